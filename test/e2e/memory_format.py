# Parameters that are not contiguous keep their layout through sharding and gathering (format.h,
# "memory layout of a shard"; docs/runtime.md, "Gathered layouts"). Kernels pick their path by the
# layout of their operands, and another path rounds differently, so a gathered parameter laid out
# otherwise than the original's gives outputs that are close but not bitwise (SPEC section 8):
#
# - torchvision's resnet18 after `model.to(memory_format=torch.channels_last)`, the flag users of
#   channels_last write (timm's --channels-last does the same), scripted, root and layer* units.
#   Called with a channels_last input and with a contiguous one: with the contiguous input the
#   convolutions' path follows their weights' layout (before this, every rank's output differed
#   from the original's in all its elements);
# - a module whose weight is stored transposed (strides (1, N)), used as `x @ w.t()`: each row
#   of the parameter is strided in memory, so its rows travel row-major and land strided.
#
# For W = 2 and 3: the rank files' shards keep the layout (channels_last shards; a transposed
# shard's strides (1, c)); on every rank, inside `fsdp_opt.unsharded` every gathered parameter has
# exactly the original's strides, and every output is bitwise the original's at the ranks'
# thread count, with the original's strides; fsdp-run --check agrees; and the same over the
# shared-memory transport. With --param-dtype=bfloat16 (W=2, Gloo), a channels_last convnet and
# the transposed weight against the originals with their parameters cast, the same way. On
# torch 2.x a DCP checkpoint of the W=2 resnet's rank files
# (fsdp_opt.sharded_state_dict) loads into zeroed W=3 rank files: their shards stay
# channels_last and their outputs are the original's, bit for bit.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import sys

import torch
import torch.nn as nn
import torchvision

import fsdp_harness as h
import fsdp_models as fm

WORLDS = (2, 3)


class Convs(nn.Module):
    """Convolutions without batch norm, whose statistics --param-dtype would leave in float32."""

    def __init__(self):
        super().__init__()
        with fm.seeded(4):
            self.conv = nn.Conv2d(3, 16, 3)
            self.pointwise = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.pointwise(torch.relu(self.conv(x)))


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        with fm.seeded(3):
            self.weight = nn.Parameter(torch.randn(96, 301).t())   # 301 x 96, strides (1, 301)
            self.bias = nn.Parameter(torch.randn(301))

    def forward(self, x):
        return x @ self.weight.t() + self.bias


# ---- rank side --------------------------------------------------------------------------------

def rank_main(ctx):
    torch.set_num_threads(1)
    fsdp_opt = h.fsdp_opt_package()
    m = fsdp_opt.load_rank_file(ctx.args["dir"])
    inputs = h.torch_load(ctx.args["inputs"])
    with torch.no_grad():
        outs = [m(x) for x in inputs]
        with fsdp_opt.unsharded(m):
            gathered = {n: tuple(p.stride()) for n, p in m.named_parameters()}
    shards = {n: tuple(p.stride()) for n, p in m.named_parameters()}
    return {"outs": outs, "out_strides": [tuple(o.stride()) for o in outs], "gathered": gathered,
            "shards": shards}


def dcp_rank_main(ctx):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    torch.set_num_threads(1)
    fsdp_opt = h.fsdp_opt_package()
    a = ctx.args
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a["dist_port"], rank=ctx.rank,
                            world_size=ctx.world_size)
    m = fsdp_opt.load_rank_file(a["dir"])
    manifest = os.path.join(a["dir"], "manifest.json")
    out = {}
    if a["phase"] == "save":
        dcp.save({"model": fsdp_opt.sharded_state_dict(m, manifest)}, checkpoint_id=a["ckpt"])
    else:
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
        dcp.load({"model": fsdp_opt.sharded_state_dict(m, manifest)}, checkpoint_id=a["ckpt"])
        out["shards"] = {n: tuple(p.stride()) for n, p in m.named_parameters()}
        with torch.no_grad():
            out["outs"] = [m(x) for x in h.torch_load(a["inputs"])]
    dist.barrier()
    return out


# ---- driver -----------------------------------------------------------------------------------

def check_model(t, out_dir, name, model, inputs, flags, kept, param_dtype=None):
    """`kept(param, shard_strides, shard_rows)`: whether a shard with those strides keeps the
    layout of `param`, one of the original's parameters that are not contiguous. With
    `param_dtype` (a torch dtype): rank files made with --param-dtype, called on inputs in that
    dtype, against the original with its parameters cast (`Tensor.to` keeps their strides); W=2
    over Gloo only."""
    torch.set_num_threads(1)
    src = os.path.join(out_dir, name + ".pt")
    if not os.path.exists(src):
        torch.jit.script(model).save(src)
    tag = name + ("." + str(param_dtype).replace("torch.", "") if param_dtype else "")
    if param_dtype:
        inputs = [x.to(param_dtype) for x in inputs]
        flags = list(flags) + ["--param-dtype=" + str(param_dtype).replace("torch.", "")]
    in_path = os.path.join(out_dir, tag + ".in.pt")
    torch.save(inputs, in_path)
    original = torch.jit.load(src)
    if param_dtype:
        for p in original.parameters():
            p.data = p.data.to(param_dtype)
    with torch.no_grad():
        want = [original(x) for x in inputs]
    params = dict(original.named_parameters())
    strides = {n: tuple(p.stride()) for n, p in params.items()}
    permuted = sorted(n for n, p in original.named_parameters() if not p.is_contiguous())
    t.check(permuted, "%s: the original has parameters that are not contiguous (%d)" % (tag, len(permuted)))

    for w in (2,) if param_dtype else WORLDS:
        out = os.path.join(out_dir, "%s.w%d" % (tag, w))
        r = h.fsdp_opt(src, "--world-size=%d" % w, *flags, "-o", out)
        if not t.check(r.returncode == 0, "%s W=%d: fsdp-opt" % (tag, w), r.describe()):
            continue
        h.check_rank_files(t, out, src, w, "%s W=%d" % (tag, w))

        for transport in ("gloo",) if param_dtype else ("gloo", "shm"):
            env = dict(os.environ, FSDP_OPT_CPU_TRANSPORT=transport)
            label = "%s W=%d %s" % (tag, w, transport)
            results = h.run_ranks(w, rank_main, {"dir": out, "inputs": in_path}, timeout=240, env=env)
            if not t.check(all(x.ok for x in results), "%s: every rank ran" % label, h.describe_ranks(results)):
                continue
            bad_shards, bad_gathered, bad_outs = [], [], []
            for res in results:
                v = res.value
                for n in permuted:
                    if not kept(params[n], v["shards"][n], h.shard_rows(params[n].shape[0], w)):
                        bad_shards.append("rank %d %s: %s" % (res.rank, n, v["shards"][n]))
                for n, s in strides.items():
                    if v["gathered"].get(n) != s:
                        bad_gathered.append("rank %d %s: %s, original %s" % (res.rank, n, v["gathered"].get(n), s))
                for i, (got, ref) in enumerate(zip(v["outs"], want)):
                    d = h.same_bits(got, ref, "input %d" % i)
                    if d or tuple(got.stride()) != tuple(ref.stride()):
                        bad_outs.append("rank %d: %s" % (res.rank, d or "strides %s, original %s" % (
                            tuple(got.stride()), tuple(ref.stride()))))
            t.check(not bad_shards, "%s: the shards keep their parameters' layout" % label, "; ".join(bad_shards[:4]))
            t.check(not bad_gathered, "%s: every gathered parameter has the original's strides (%d parameters)"
                    % (label, len(strides)), "; ".join(bad_gathered[:4]))
            t.check(not bad_outs, "%s: %d outputs bitwise the original's, with its strides, on every rank"
                    % (label, len(want)), "; ".join(bad_outs[:4]))
        if not param_dtype:
            rr = h.fsdp_run(out, inputs=os.path.join(out_dir, name + ".in0.pt"), check=src)
            h.check_fsdp_run_exact(t, rr, "%s W=%d fsdp-run --check" % (name, w), w, src)


def dcp_round_trip(t, out_dir, name, kept):
    """W=2's checkpoint into W=3's rank files (both made by check_model)."""
    src = os.path.join(out_dir, name + ".pt")
    in_path = os.path.join(out_dir, name + ".in.pt")
    ckpt = os.path.join(out_dir, name + ".dcp")
    original = torch.jit.load(src)
    params = dict(original.named_parameters())
    with torch.no_grad():
        want = [original(x) for x in h.torch_load(in_path)]
    for phase, w in (("save", 2), ("load", 3)):
        with h.ReservedPort() as dist_port:
            args = {"dir": os.path.join(out_dir, "%s.w%d" % (name, w)), "ckpt": ckpt, "phase": phase,
                    "inputs": in_path, "dist_port": dist_port.port}
            results = h.run_ranks(w, dcp_rank_main, args, timeout=240)
        if not t.check(all(x.ok for x in results), "%s DCP: W=%d ranks %s the checkpoint" % (name, w, phase),
                       h.describe_ranks(results)):
            return
    bad = []
    for res in results:
        v = res.value
        for n, p in params.items():
            if not p.is_contiguous() and not kept(p, v["shards"][n], h.shard_rows(p.shape[0], 3)):
                bad.append("rank %d %s: shard strides %s" % (res.rank, n, v["shards"][n]))
        for i, (got, ref) in enumerate(zip(v["outs"], want)):
            d = h.same_bits(got, ref, "input %d" % i)
            if d:
                bad.append("rank %d: %s" % (res.rank, d))
    t.check(not bad, "%s DCP: W=3 rank files loading W=2's checkpoint keep their layout and give the "
            "original's outputs, bitwise" % name, "; ".join(bad[:4]))


def main():
    out_dir = sys.argv[1]
    t = h.Test("memory_format")

    with fm.seeded(0):
        resnet = torchvision.models.resnet18(num_classes=10).eval()
    resnet = resnet.to(memory_format=torch.channels_last)
    with fm.seeded(1):
        x = torch.randn(2, 3, 32, 32)
    resnet_inputs = [x.contiguous(memory_format=torch.channels_last), x]
    torch.save((x,), os.path.join(out_dir, "resnet18_cl.in0.pt"))

    def channels_last(param, shard_strides, rows):
        probe = torch.empty_strided((rows,) + tuple(param.shape[1:]), shard_strides)
        return probe.is_contiguous(memory_format=torch.channels_last)

    check_model(t, out_dir, "resnet18_cl", resnet, resnet_inputs, ["--fsdp-unit=.", "--fsdp-unit=layer*"],
                channels_last)
    if int(torch.__version__.split(".")[0]) >= 2:
        dcp_round_trip(t, out_dir, "resnet18_cl", channels_last)
    else:
        print("SKIP resnet18_cl DCP round trip: fsdp_opt's DCP checkpoints need torch 2.x (this is %s)"
              % torch.__version__)

    transposed = Transposed().eval()
    with fm.seeded(2):
        xt = torch.randn(4, 96)
    torch.save((xt,), os.path.join(out_dir, "transposed.in0.pt"))
    transposed_kept = lambda param, s, rows: s == (1, rows)  # noqa: E731
    check_model(t, out_dir, "transposed", transposed, [xt], ["--fsdp-unit=."], transposed_kept)

    # Mixed precision: shards cast into their own layout (channels_last), or cast row-major and
    # copied into place strided (transposed).
    convs = Convs().eval().to(memory_format=torch.channels_last)
    check_model(t, out_dir, "convs_cl", convs, [x.contiguous(memory_format=torch.channels_last), x],
                ["--fsdp-unit=."], channels_last, param_dtype=torch.bfloat16)
    check_model(t, out_dir, "transposed", transposed, [xt], ["--fsdp-unit=."], transposed_kept,
                param_dtype=torch.bfloat16)

    return t.finish("non-contiguous parameters (channels_last resnet18, a transposed weight) keep their layout "
                    "when sharded and gathered, and the outputs are exact, W=2 and 3, Gloo and shm, and "
                    "with --param-dtype=bfloat16")


if __name__ == "__main__":
    sys.exit(main())
