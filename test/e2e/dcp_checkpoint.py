# Sharded checkpoints through torch.distributed.checkpoint (DCP): fsdp_opt.sharded_state_dict
# gives a rank file's unit parameters as Shard(0) DTensors of their full shape (the local
# tensor: the rank's rows of its shard, without the padding) and the rest as plain tensors, and
# sharded_optimizer_state_dict the optimizer's state sharded the same way, so that (the GPT of
# the tests, vocabulary 67 so every W splits unevenly):
#   - W=2 rank files train 5 AdamW steps, checkpointing parameters and optimizer after step 3;
#     fresh rank files with a fresh optimizer (another learning rate, which the checkpoint's
#     replaces) load it and train steps 4 and 5 on the same batches: their shards are bitwise
#     those of the uninterrupted run;
#   - rank files of W=4 (4 ranks) and W=1 (1 process) dcp.load the step-3 checkpoint in place:
#     every shard is bitwise the trained model's rows (assembled from the W=2 ranks' shards at
#     step 3), the padding stays zero, and a rank file saved after the load and loaded again
#     holds the same;
#   - rank files of W=4 as 2 x 2 (--shard-group-size=2, HSDP: their DTensors on a 2-D mesh,
#     (Replicate(), Shard(0))) load it too: rank r holds shard r % 2, bitwise;
#   - an FSDP2 model of the same architecture (fully_shard on every block and the root, W=2)
#     dcp.loads it: every full_tensor() is bitwise the trained parameter;
#   - the reverse: an FSDP2 job at W=2 dcp.saves its model (seed 1) and W=2 rank files (made
#     from seed 0) load it: their shards are seed 1's, and `generate` on the rank files returns
#     exactly what the scripted seed-1 model returns.
#
# REQUIRES: torch2
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import json
import os
import sys

import torch

import fsdp_harness as h
import fsdp_models as fm

NEW_TOKENS = 4


def init_dist(ctx):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % ctx.args["dist_port"],
                            rank=ctx.rank, world_size=ctx.world_size)


def eager_fsdp2(seed):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = fm.GPT(n_layer=2, seed=seed)
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def rank_main(ctx):
    import torch.distributed.checkpoint as dcp
    fsdp_opt = h.fsdp_opt_package()
    init_dist(ctx)
    a = ctx.args
    phase = a["phase"]
    out = {}
    if phase == "load":  # rank files of another W load it, and are saved again
        path = a["file"] if a.get("file") else ctx.rank_file(a["dir"])
        m = ctx.load(path)
        manifest = None if a.get("file") else os.path.join(a["dir"], "manifest.json")
        dcp.load({"model": fsdp_opt.sharded_state_dict(m, manifest)}, checkpoint_id=a["ckpt"])  # not "optim"
        again = os.path.join(a["resaved"], "rank%d.pt" % ctx.rank)
        m.save(again)
        out["params"] = {n: p.detach().clone() for n, p in m.named_parameters()}
        out["resaved"] = {n: p.detach().clone() for n, p in ctx.load(again).named_parameters()}
    elif phase == "fsdp2_load":  # FSDP2 loads fsdp-opt's checkpoint
        model = eager_fsdp2(seed=0)
        dcp.load({"model": model.state_dict()}, checkpoint_id=a["ckpt"])
        out["params"] = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    elif phase == "fsdp2_save":  # an FSDP2 job's checkpoint
        model = eager_fsdp2(seed=1)
        dcp.save(model.state_dict(), checkpoint_id=a["ckpt"])
    elif phase in ("train", "resume"):
        m = ctx.load(ctx.rank_file(a["dir"]))
        manifest = os.path.join(a["dir"], "manifest.json")
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2 if phase == "train" else 0.5, weight_decay=0.1)
        first = 1
        if phase == "resume":
            # A call of the model before resuming, its gradients dropped: the uninterrupted job's
            # step save_after + 1 is not its process's first call, and TorchScript's profiling
            # executor runs a first call unoptimised and later ones through an optimised graph
            # whose backward may add in another order (fsdp_harness.MeanGradientReference).
            warm = torch.randint(0, 67, (4, 9), generator=torch.Generator().manual_seed(7))
            torch.nn.functional.cross_entropy(m(warm[:, :-1]).flatten(0, 1), warm[:, 1:].flatten()).backward()
            for p in m.parameters():
                p.grad = None
            osd = fsdp_opt.sharded_optimizer_state_dict(m, opt, manifest)
            dcp.load({"model": fsdp_opt.sharded_state_dict(m, manifest), "optim": osd}, checkpoint_id=a["ckpt"])
            fsdp_opt.apply_optimizer_param_groups(opt, osd)
            out["lr"] = opt.param_groups[0]["lr"]
            first = a["save_after"] + 1
        for step in range(first, a["steps"] + 1):
            g = torch.Generator().manual_seed(1000 * ctx.rank + step)
            tokens = torch.randint(0, 67, (4, 9), generator=g)
            logits = m(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if phase == "train" and step == a["save_after"]:
                dcp.save({"model": fsdp_opt.sharded_state_dict(m, manifest),
                          "optim": fsdp_opt.sharded_optimizer_state_dict(m, opt, manifest)}, checkpoint_id=a["ckpt"])
                out["saved"] = {n: p.detach().clone() for n, p in m.named_parameters()}
        out["params"] = {n: p.detach().clone() for n, p in m.named_parameters()}
    elif phase == "load_fsdp2":  # fsdp-opt rank files load the FSDP2 checkpoint, then decode
        m = ctx.load(ctx.rank_file(a["dir"]))
        dcp.load(fsdp_opt.sharded_state_dict(m, os.path.join(a["dir"], "manifest.json")), checkpoint_id=a["ckpt"])
        out["params"] = {n: p.detach().clone() for n, p in m.named_parameters()}
        prompt, n = h.torch_load(a["inputs"])
        out["tokens"] = m.generate(prompt, n)
    torch.distributed.barrier()
    return out


def check_shards(t, label, got, full, world, rank):
    problems = []
    for name, want_full in full.items():
        if name not in got:
            problems.append("%s missing" % name)
            continue
        want = h.expected_shard(want_full, world, rank) if world > 1 else want_full
        if d := h.same_bits(got[name], want, "%s rank %d %s" % (label, rank, name)):
            problems.append(d)
    t.check(not problems, "%s rank %d: every parameter bitwise the checkpointed model's (its shard, padding zero)"
            % (label, rank), "; ".join(problems[:5]))


def main():
    out_dir = sys.argv[1]
    t = h.Test("dcp_checkpoint")
    src = {}
    for seed in (0, 1):
        src[seed] = os.path.join(out_dir, "gpt%d.pt" % seed)
        fm.save(fm.mark(fm.make("gpt", n_layer=2, seed=seed), units=["."], forward_methods={".": ["generate"]}),
                src[seed])
    inputs = os.path.join(out_dir, "in.pt")
    fm.save_inputs((fm.example_inputs("gpt")[0], NEW_TOKENS), inputs)
    dirs = {}
    for w in (2, 4, 1):
        dirs[w] = os.path.join(out_dir, "w%d%s" % (w, ".pt" if w == 1 else ""))
        if not h.sharded(t, src[0], dirs[w], "--world-size=%d" % w, "--fsdp-unit=blocks.*"):
            return t.finish("")
    dirs["2x2"] = os.path.join(out_dir, "w4s2")
    if not h.sharded(t, src[0], dirs["2x2"], "--world-size=4", "--shard-group-size=2", "--fsdp-unit=blocks.*"):
        return t.finish("")
    with open(os.path.join(dirs[2], "manifest.json")) as f:
        unit_params = {name for u in json.load(f)["units"] for p in u["params"] for name in [p["path"]] + p["aliases"]}

    def ranks(world, phase, **args):
        with h.ReservedPort() as dist_port:  # torch.distributed's own group (rank_main)
            args.update(phase=phase, dist_port=dist_port.port)
            results = h.run_ranks(world, rank_main, args, timeout=240)
        ok = t.check(all(r.ok for r in results), "W=%d %s: every rank ran" % (world, phase), h.describe_ranks(results))
        return [r.value for r in results] if ok else None

    ckpt = os.path.join(out_dir, "ckpt_step3")
    run = {"dir": dirs[2], "ckpt": ckpt, "steps": 5, "save_after": 3}
    uninterrupted = ranks(2, "train", **run)
    if uninterrupted is None:
        return t.finish("")
    resumed = ranks(2, "resume", **run)
    for r, (u, v) in enumerate(zip(uninterrupted, resumed or [])):
        diffs = [d for n in u["params"] if (d := h.same_bits(v["params"][n], u["params"][n], "rank %d %s" % (r, n)))]
        t.check(not diffs and v["lr"] == 1e-2,
                "resumed at step 4 from the step-3 checkpoint, rank %d: shards after step 5 bitwise the "
                "uninterrupted run's (%d tensors), the checkpoint's learning rate restored" % (r, len(u["params"])),
                "; ".join(diffs[:5]) + " lr %r" % v["lr"])

    # The model as checkpointed: unit parameters from both ranks' rows, the rest rank 0's.
    trained = {}
    for n, p in h.distinct_named_parameters(torch.jit.load(src[0])).items():
        if n in unit_params:
            trained[n] = torch.cat([u["saved"][n] for u in uninterrupted])[:p.shape[0]]
        else:
            trained[n] = uninterrupted[0]["saved"][n]
    sharded_names = {n: v for n, v in trained.items() if n in unit_params}
    whole_names = {n: v for n, v in trained.items() if n not in unit_params}
    for w in (4, 1):
        resaved = os.path.join(out_dir, "resaved%d" % w)
        os.makedirs(resaved)
        args = {"file": dirs[1]} if w == 1 else {"dir": dirs[w]}
        values = ranks(w, "load", ckpt=ckpt, resaved=resaved, **args)
        for r, v in enumerate(values or []):
            for which in ("params", "resaved"):
                label = "step-3 checkpoint into W=%d rank files%s" % (
                    w, " (saved and loaded again)" if which == "resaved" else "")
                if w == 1:
                    check_shards(t, label, v[which], trained, 1, r)
                    continue
                check_shards(t, label, {n: v[which][n] for n in sharded_names if n in v[which]}, sharded_names, w, r)
                if whole_names:  # parameters above every unit: whole on every rank
                    check_shards(t, label + ", replicated", v[which], whole_names, 1, r)
    resaved = os.path.join(out_dir, "resaved2x2")
    os.makedirs(resaved)
    values = ranks(4, "load", ckpt=ckpt, resaved=resaved, dir=dirs["2x2"])
    for r, v in enumerate(values or []):
        for which in ("params", "resaved"):
            label = "step-3 checkpoint into W=4 as 2x2 (HSDP) rank files%s" % (
                " (saved and loaded again)" if which == "resaved" else "")
            check_shards(t, label, {n: v[which][n] for n in sharded_names if n in v[which]}, sharded_names, 2, r % 2)
            if whole_names:
                check_shards(t, label + ", replicated", v[which], whole_names, 1, r)
    values = ranks(2, "fsdp2_load", ckpt=ckpt)
    for r, v in enumerate(values or []):
        check_shards(t, "step-3 checkpoint into FSDP2 (full_tensor)", v["params"], trained, 1, r)

    ckpt2 = os.path.join(out_dir, "ckpt_fsdp2")
    if ranks(2, "fsdp2_save", ckpt=ckpt2) is not None:
        seed1 = torch.jit.load(src[1])
        seed1_params = {n: p.detach() for n, p in h.distinct_named_parameters(seed1).items()}
        prompt, n = h.torch_load(inputs)
        with torch.no_grad():
            want_tokens = seed1.generate(prompt, n)
        values = ranks(2, "load_fsdp2", dir=dirs[2], ckpt=ckpt2, inputs=inputs)
        for r, v in enumerate(values or []):
            check_shards(t, "FSDP2 checkpoint into W=2 rank files",
                         {k: x for k, x in v["params"].items() if k in unit_params},
                         {k: x for k, x in seed1_params.items() if k in unit_params}, 2, r)
            t.check(torch.equal(v["tokens"], want_tokens),
                    "FSDP2 checkpoint into W=2 rank files rank %d: generate equals the seed-1 model's" % r,
                    "%s vs %s" % (v["tokens"].tolist(), want_tokens.tolist()))
    return t.finish("training resumes from a W=2 checkpoint with its optimizer; the checkpoint loads into W=4, "
                    "W=1 and FSDP2; FSDP2's loads into rank files; bitwise")


if __name__ == "__main__":
    sys.exit(main())
