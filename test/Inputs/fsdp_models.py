"""Models for fsdp-opt's tests, importable from lit tests (PYTHONPATH has test/Inputs).

Every model scripts on torch 1.13 and 2.x, is built deterministically from a seed (the global
RNG is left as it was) and is returned in eval mode, so two calls give the same bits.

FSDP markers are plain attributes set before scripting; TorchScript keeps them as module
attributes (`scripted._c.hasattr("_fsdp_unit")`):
    module._fsdp_unit = True
    module._fsdp_forward_methods = ["generate"]     # never an empty list: it has no type

From Python:
    import fsdp_models as fm
    model = fm.make("gpt", n_layer=3)               # any constructor argument by keyword
    fm.mark(model, units=["blocks.0", "blocks.1"], forward_methods={".": ["generate"]})
    fm.save(model, "m.pt"); fm.save_inputs(fm.example_inputs("gpt"), "in.pt")

From a RUN line (the same, in one command):
    %python -m fsdp_models gpt -o %t.pt --inputs %t.in.pt --unit blocks.0 --forward-method .:generate
"""

import argparse
import contextlib
import warnings
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torchvision

# torch 2.x warns on every torch.jit.script/save/load; the tests use them on purpose and
# check stderr, so keep it free of that noise.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)


@contextlib.contextmanager
def seeded(seed: int):
    """Run the body with the CPU RNG seeded, restoring the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# ---- GPT-style decoder ---------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    # Plain matmul + softmax (no scaled_dot_product_attention, absent from 1.13).
    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.n_embd = n_embd
        self.scale = (n_embd // n_head) ** -0.5
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.n_head
        qkv = self.qkv(x)
        q = qkv.narrow(2, 0, C).view(B, T, self.n_head, hd).transpose(1, 2)
        k = qkv.narrow(2, C, C).view(B, T, self.n_head, hd).transpose(1, 2)
        v = qkv.narrow(2, 2 * C, C).view(B, T, self.n_head, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, n_layer blocks, final LayerNorm, and an LM head whose
    weight IS the token embedding's (tied: lm_head.weight and wte.weight are one tensor).
    The default vocabulary (67) is odd so that dim 0 splits unevenly for every W > 1."""

    def __init__(self, vocab_size: int = 67, block_size: int = 16, n_layer: int = 2,
                 n_head: int = 2, n_embd: int = 32, seed: int = 0):
        super().__init__()
        self.block_size = block_size
        with seeded(seed):
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(block_size, n_embd)
            self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    @torch.jit.export
    def generate(self, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy decoding: append the most likely next token max_new_tokens times."""
        for _ in range(max_new_tokens):
            idx_cond = idx
            if idx.size(1) > self.block_size:
                idx_cond = idx[:, idx.size(1) - self.block_size:]
            logits = self.forward(idx_cond)
            next_token = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat([idx, next_token], dim=1)
        return idx


# ---- torchvision wrappers whose parent calls NON-forward methods of the child -------------

class ResNetClassifier(nn.Module):
    """resnet18 reached through its `_forward_impl`, not its `forward`."""

    def __init__(self, num_classes: int = 10, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.backbone = torchvision.models.resnet18(num_classes=num_classes)

    def forward(self, x):
        return self.backbone._forward_impl(x)


class FeatureResNet(torchvision.models.ResNet):
    """torchvision's resnet18 split the way timm splits its models: forward_features (stem and
    stages) and forward_head (pooling and classifier)."""

    def __init__(self, num_classes: int = 10):
        super().__init__(torchvision.models.resnet.BasicBlock, [2, 2, 2, 2], num_classes=num_classes)

    def forward_features(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x):
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ResNetFeaturesClassifier(nn.Module):
    """A parent that calls the backbone's forward_features and forward_head, as code written for
    timm models does (and issue 10 asks to train through): both must be registered."""

    def __init__(self, num_classes: int = 10, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.backbone = FeatureResNet(num_classes)

    def forward(self, x):
        return self.backbone.forward_head(self.backbone.forward_features(x))


class ViTClassifier(nn.Module):
    """A tiny VisionTransformer driven piece by piece from the parent, as its own forward
    does: `_process_input`, its class token (a parameter of `vit` itself), `encoder`, `heads`."""

    def __init__(self, num_classes: int = 10, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.vit = torchvision.models.VisionTransformer(
                image_size=32, patch_size=8, num_layers=2, num_heads=2,
                hidden_dim=32, mlp_dim=64, num_classes=num_classes)

    def forward(self, x):
        x = self.vit._process_input(x)
        batch_class_token = self.vit.class_token.expand(x.size(0), -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        x = self.vit.encoder(x)
        return self.vit.heads(x[:, 0])


class Trunk(nn.Module):
    """A unit with a forward method that calls its own forward, as timm's forward_features and
    HF's generate do: with --forward-method=trunk:features, both methods gather the unit."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.fc(x))

    def features(self, x):
        return self.proj(self.forward(x)) + x


class TwoPaths(nn.Module):
    """One step calls trunk.features (which calls trunk.forward) and trunk.forward directly, and
    another unit's forward: a forward method calling forward, and forward and a forward method
    of one unit mixed in one step (training, issue 10). Takes images like the classifiers."""

    def __init__(self, d: int = 32, num_classes: int = 10, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.embed = nn.Linear(3 * 32 * 32, d)
            self.trunk = Trunk(d)
            self.other = Trunk(d)
            self.head = nn.Linear(d, num_classes)

    def forward(self, x):
        h = self.embed(x.flatten(1))
        a = self.trunk.features(h)
        b = self.trunk(a)
        return self.head(self.other(b) + a)


# ---- toy models for IR tests ---------------------------------------------------------------

class LinearBlock(nn.Module):
    def __init__(self, d_in: int = 8, d_out: int = 8):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


class TwoBlocks(nn.Module):
    """Two LinearBlocks in a ModuleList (`layers.0`, `layers.1`)."""

    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.layers = nn.ModuleList([LinearBlock(d, d), LinearBlock(d, d)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SequentialModel(nn.Module):
    """An nn.Sequential (`seq.0`, `seq.2` hold parameters) between two plain Linears."""

    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.inp = nn.Linear(d, d)
            self.seq = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
            self.out = nn.Linear(d, d)

    def forward(self, x):
        return self.out(self.seq(self.inp(x)))


class Inner(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


class Outer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.pre = nn.Linear(d, d)
        self.inner = Inner(d)
        self.post = nn.Linear(d, d)

    def forward(self, x):
        return self.post(self.inner(self.pre(x)))


class NestedUnits(nn.Module):
    """Units inside units: `outer` (parameters pre.*, post.*) holds `outer.inner` (fc.*);
    `head` stays with the root. With marked=True, outer and outer.inner carry _fsdp_unit."""

    def __init__(self, d: int = 8, seed: int = 0, marked: bool = True):
        super().__init__()
        with seeded(seed):
            self.outer = Outer(d)
            self.head = nn.Linear(d, d)
        if marked:
            self.outer._fsdp_unit = True
            self.outer.inner._fsdp_unit = True

    def forward(self, x):
        return self.head(self.outer(x))


class ZeroDimParam(nn.Module):
    """A 0-dim parameter (`scale`, replicated, never sharded) beside a Linear."""

    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.fc = nn.Linear(d, d)
            self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.fc(x) * self.scale


class SmallDim0(nn.Module):
    """Parameters whose dim 0 is smaller than 4: `fc.weight` [3, d], `fc.bias` [3],
    `gain` [1]. With W=4 some ranks hold only padding."""

    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.fc = nn.Linear(d, 3)
            self.gain = nn.Parameter(torch.full([1], 0.5))

    def forward(self, x):
        return self.fc(x) * self.gain


class SharedType(nn.Module):
    """Two instances of one class, `a` and `b`, that TorchScript gives ONE class type.
    With marked=True, a._fsdp_unit = True and b._fsdp_unit = False: both have the attribute,
    so the type stays shared and only the value differs per instance. (Setting it on `a`
    alone would give the two different types.)"""

    def __init__(self, d: int = 8, seed: int = 0, marked: bool = True):
        super().__init__()
        with seeded(seed):
            self.a = LinearBlock(d, d)
            self.b = LinearBlock(d, d)
        if marked:
            self.a._fsdp_unit = True
            self.b._fsdp_unit = False

    def forward(self, x):
        return self.b(self.a(x))


class RecurrentStack(nn.Module):
    """torch.nn's recurrent layers side by side on one sequence [batch, 5, d]: a 2-layer
    bidirectional LSTM with proj_size, a GRU and an Elman RNN, then a Linear over their
    concatenated outputs. Scripted, each keeps its weights twice: in its parameters and in
    `_flat_weights`, the list its forward passes to aten::lstm / gru / rnn_tanh."""

    def __init__(self, d: int = 8, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.lstm = nn.LSTM(d, 16, num_layers=2, bidirectional=True, proj_size=4, batch_first=True)
            self.gru = nn.GRU(d, d, batch_first=True)
            self.rnn = nn.RNN(d, d, batch_first=True)
            self.head = nn.Linear(8 + d + d, 3)

    def forward(self, x):
        a, _ = self.lstm(x)
        b, _ = self.gru(x)
        c, _ = self.rnn(x)
        return self.head(torch.cat([a, b, c], -1))


# ---- registry, markers, saving -------------------------------------------------------------

# The GPT's units as its users mark them: the root (embeddings, final norm, tied head) and every block.
GPT_UNIT_FLAGS = ("--fsdp-unit=.", "--fsdp-unit=blocks.*")
# RecurrentStack's units: the root (head) and each recurrent layer.
RNN_UNIT_FLAGS = ("--fsdp-unit=.", "--fsdp-unit=lstm", "--fsdp-unit=gru", "--fsdp-unit=rnn")

MODELS = {
    "gpt": GPT,
    "resnet": ResNetClassifier,
    "resnet_features": ResNetFeaturesClassifier,
    "vit": ViTClassifier,
    "two_paths": TwoPaths,
    "two_blocks": TwoBlocks,
    "sequential": SequentialModel,
    "nested": NestedUnits,
    "zero_dim": ZeroDimParam,
    "small_dim0": SmallDim0,
    "shared_type": SharedType,
    "rnn": RecurrentStack,
}


def make(name: str, **kwargs) -> nn.Module:
    """A fresh MODELS[name](**kwargs), in eval mode."""
    return MODELS[name](**kwargs).eval()


def example_inputs(name: str, batch: int = 2, input_seed: int = 1, **kwargs) -> tuple:
    """Deterministic forward() arguments for MODELS[name] built with the same kwargs."""
    with seeded(input_seed):
        if name == "gpt":
            vocab = kwargs.get("vocab_size", 67)
            return (torch.randint(0, vocab, (batch, 5)),)
        if name in ("resnet", "resnet_features", "vit", "two_paths"):
            return (torch.randn(batch, 3, 32, 32),)
        if name == "rnn":
            return (torch.randn(batch, 5, kwargs.get("d", 8)),)
        return (torch.randn(batch, kwargs.get("d", 8)),)


def mark(model: nn.Module, units: Optional[List[str]] = None,
         forward_methods: Optional[Dict[str, List[str]]] = None) -> nn.Module:
    """Set FSDP markers on submodules named as named_modules() spells them ("." is the root)."""
    modules = dict(model.named_modules())
    modules["."] = model
    for path in units or []:
        modules[path]._fsdp_unit = True
    for path, methods in (forward_methods or {}).items():
        if methods:
            modules[path]._fsdp_forward_methods = list(methods)
    return model


def submodule(model: nn.Module, path: str) -> nn.Module:
    """The submodule named `path` ("blocks.0", "." for the root); works on loaded TorchScript
    modules too, whose ModuleLists cannot be indexed."""
    for name in ([] if path == "." else path.split(".")):
        model = getattr(model, name)
    return model


def save(model: nn.Module, path: str) -> torch.jit.ScriptModule:
    """torch.jit.script the model and torch.jit.save it to path; returns the scripted module."""
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, path)
    return scripted


def save_inputs(args: tuple, path: str) -> None:
    """Save a tuple of forward() arguments with torch.save."""
    torch.save(tuple(args), path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fsdp_models",
                                description="Build, mark, script and save a test model.")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("-o", "--output", required=True, help="TorchScript archive to write")
    p.add_argument("--inputs", help="also torch.save example_inputs() here")
    p.add_argument("--unit", action="append", default=[], metavar="PATH",
                   help="set _fsdp_unit on this submodule (repeatable; '.' is the root)")
    p.add_argument("--forward-method", action="append", default=[], metavar="PATH:METHOD",
                   help="append METHOD to _fsdp_forward_methods of PATH (repeatable)")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=INT",
                   help="constructor argument, e.g. --arg n_layer=3 (repeatable)")
    args = p.parse_args(argv)

    kwargs = {}
    for kv in args.arg:
        key, value = kv.split("=", 1)
        kwargs[key] = int(value)
    forward_methods: Dict[str, List[str]] = {}
    for pm in args.forward_method:
        path, method = pm.rsplit(":", 1)
        forward_methods.setdefault(path, []).append(method)

    model = mark(make(args.model, **kwargs), args.unit, forward_methods)
    save(model, args.output)
    if args.inputs:
        save_inputs(example_inputs(args.model, **kwargs), args.inputs)


if __name__ == "__main__":
    main()
