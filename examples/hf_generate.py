import os
import sys

import torch
import transformers

import fsdp_opt


class Generate(torch.nn.Module):
    """Greedy decoding over a traced Hugging Face causal LM, in TorchScript."""

    def __init__(self, traced):
        super().__init__()
        self.model = traced

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)["logits"]

    @torch.jit.export
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, eos: int) -> torch.Tensor:
        for _ in range(max_new_tokens):
            logits = self.model(input_ids)["logits"]
            token = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            input_ids = torch.cat([input_ids, token], dim=1)
            if bool((token == eos).all()):
                break
        return input_ids


if sys.argv[1] == "save":  # once, in one process
    config = transformers.GPT2Config(n_embd=64, n_layer=4, n_head=4, vocab_size=128, use_cache=False)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()  # or .from_pretrained("gpt2", use_cache=False)
    example = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        traced = torch.jit.trace(model, (example,), strict=False)  # strict=False: it returns a dict
    torch.jit.script(Generate(traced)).save("gpt2-generate.pt")
else:  # on every rank, under torchrun
    model = fsdp_opt.load_rank_file("gpt2-sharded")
    prompt = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(int(os.environ["RANK"])))
    with torch.no_grad():
        if sys.argv[1] == "run":  # the loop in TorchScript
            tokens = model.generate(prompt, 16, 50256)  # this rank's prompt, its own eos
        else:  # "python": the loop in Python, in one unshard scope
            tokens = prompt
            with fsdp_opt.unsharded(model):
                for _ in range(16):
                    token = torch.argmax(model(tokens)[:, -1, :], dim=-1, keepdim=True)
                    tokens = torch.cat([tokens, token], dim=1)
    # One write per line: both ranks share torchrun's stdout.
    sys.stdout.write("rank %s: %s (%d all-gathers)\n" % (os.environ["RANK"], tokens.tolist(),
                                                           fsdp_opt.stats()["all_gathers"]))
    sys.stdout.flush()
