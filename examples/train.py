import os

import torch
import torch.nn.functional as F

import fsdp_opt

model = fsdp_opt.load_rank_file("gpt-sharded")  # rank$RANK.pt, runtime loaded
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(int(os.environ["RANK"]))
for step in range(10):
    tokens = torch.randint(0, 67, (4, 9))  # this rank's data
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()  # gradients reduced into the shards
    optimizer.step()
    print("rank %s step %d loss %.4f" % (os.environ["RANK"], step, loss.item()))
state = fsdp_opt.full_state_dict(model, "gpt-sharded/manifest.json")  # every rank calls it
if os.environ["RANK"] == "0":
    original = torch.jit.load("gpt.pt")
    original.load_state_dict(state)
    torch.jit.save(original, "gpt-trained.pt")
