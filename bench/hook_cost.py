#!/usr/bin/env python3
"""What the training hooks cost a call made without grad mode (issue 20 item 8; SPEC section 10:
"without grad mode nothing of this costs anything"). docs/benchmarks.md section 9.

One process, W = 1, one intra-op thread: the KVDecoder of the decode-loop matrix (section 6)
sharded by fsdp-opt with the matrix's unit flags, its `generate_while` called under
`torch.no_grad()` inside `fsdp_opt.unsharded` (no collective at all), against the original
scripted model. W = 1 leaves out everything but the rewritten program: what remains is the ops
the passes added and what they do to TorchScript's optimiser. Rank files:

  one path        the default pipeline without specialize-no-grad: every call, with grad mode
                  or without, runs the backward hooks (what fsdp-opt wrote before that pass)
  one path, hooks guarded
                  the same file with every fsdp::backward_hook, and the lists, tuples and
                  attribute reads only it uses, moved under `if torch.is_grad_enabled():` once
                  loaded, so that none of it runs (an experiment on the loaded graphs)
  as written      the default pipeline: entry methods take specialize-no-grad's copy without
                  training ops when grad mode is off
  hooks removed   the one-path file with every fsdp::backward_hook deleted once loaded (their
                  operands then die in TorchScript's dead-code elimination): the bound for a
                  call without grad mode. Such a file cannot train; the row is not a
                  configuration

CPU ms: the median over all timed calls of the calling thread's CPU time (time.thread_time), the
variants and the original interleaved call by call in an order rotated every pass; ratio: over
the original's median. Every variant's tokens are compared with the original's, bit for bit.
The optimised graph's counts (`torch.jit.last_executed_optimized_graph()` after the warm-up
calls) say what TorchScript kept: backward hooks and `aten::append`s. For the file as written
they count both paths, since TorchScript inlines the copy into the method's optimised graph; the
hooks there sit in the path taken with grad mode.

    python bench/hook_cost.py                   # full run; --json bench/results/hook_cost.json
    python bench/hook_cost.py --quick           # smoke: 2 layers, d 32, 4 tokens, few calls
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
from bench_common import median  # noqa: E402

# Each variant: the rank file it starts from and the edit applied once loaded.
VARIANTS = {"one path": ("one path", None), "one path, hooks guarded": ("one path", "guard"),
            "as written": ("default", None), "hooks removed": ("one path", "remove")}
HOOK = "fsdp::backward_hook"
BUILDERS = ("prim::ListConstruct", "prim::TupleConstruct", "prim::GetAttr", "prim::unchecked_cast")


def method_graphs(module):
    """Every method graph of the module's types, once per type."""
    seen = set()

    def walk(m):
        for name in m._c._method_names():
            key = (m._c._type().qualified_name(), name)
            if key not in seen:
                seen.add(key)
                yield m._c._get_method(name).graph
        for child in m.children():
            yield from walk(child)

    yield from walk(module)


def exclusive_builders(hook):
    """The list, tuple and attribute-read nodes before `hook` in its block that only the hook
    (or another of them) uses, in program order."""
    moving = [hook]
    users = {hook}
    node = hook.prev()
    while node.kind() != "prim::Param":
        before = node.prev()
        if node.kind() in BUILDERS and all(u.user in users for out in node.outputs() for u in out.uses()):
            moving.insert(0, node)
            users.add(node)
        node = before
    return moving


def edit_hooks(module, edit):
    """Applies `edit` (None, "guard" or "remove") to every backward hook of the module's graphs;
    returns how many hooks the graphs hold."""
    import torch
    edited = 0
    for graph in method_graphs(module):
        for hook in graph.findAllNodes(HOOK):
            if edit == "remove":
                hook.destroy()
            elif edit == "guard":
                moving = exclusive_builders(hook)
                grad = graph.create("aten::is_grad_enabled", [], 1)
                grad.insertBefore(hook)
                grad.output().setType(torch._C.BoolType.get())
                guard = graph.create("prim::If", [grad.output()], 0)
                guard.insertBefore(hook)
                arm = guard.addBlock()
                guard.addBlock()
                for node in moving:
                    node.moveBefore(arm.returnNode())
            edited += 1
    return edited


def optimised_counts(torch):
    graph = torch.jit.last_executed_optimized_graph()
    return {"hooks": len(graph.findAllNodes(HOOK, recurse=True)),
            "appends": len(graph.findAllNodes("aten::append", recurse=True)),
            "nodes": len(str(graph).splitlines())}


def load_fsdp_opt(lib, port):
    sys.path.insert(0, os.path.join(bc.ROOT, "python"))
    os.environ["FSDP_OPT_LIB_DIR"] = os.path.dirname(lib)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import fsdp_opt
    fsdp_opt.load()
    return fsdp_opt


def run(args, fsdp_opt, original_pt, rank_pts):
    import torch
    torch.set_num_threads(1)
    ids = torch.randint(0, 67, (1, 16), generator=torch.Generator().manual_seed(0))
    call_args = (ids, args.tokens, -1)  # eos -1: every call decodes all its tokens
    original = torch.jit.load(original_pt)
    rows = {}
    with torch.no_grad():
        expected = original.generate_while(*call_args)
        models = {"original": original}
        for variant, (source, edit) in VARIANTS.items():
            model = torch.jit.load(rank_pts[source])
            rows[variant] = {"edited": edit_hooks(model, edit)}
            models[variant] = model
        scopes = {v: fsdp_opt.unsharded(models[v]) for v in VARIANTS}
        for scope in scopes.values():
            scope.__enter__()
        try:
            for name, model in models.items():
                for _ in range(args.warmup):
                    out = model.generate_while(*call_args)
                if name != "original":
                    rows[name].update(optimised_counts(torch))
                    rows[name]["tokens_equal"] = bool(torch.equal(out, expected))
            times = {name: [] for name in models}
            order = list(models)
            for p in range(args.passes):
                for name in bc.rotated(order, p):
                    for _ in range(args.calls):
                        start = time.thread_time()
                        out = models[name].generate_while(*call_args)
                        times[name].append(time.thread_time() - start)
                    if not torch.equal(out, expected):
                        sys.exit("error: %s decoded other tokens than the original" % name)
        finally:
            for scope in scopes.values():
                scope.__exit__(None, None, None)
    base = median(times["original"])
    table = [["original", "-", "%.2f" % (base * 1e3), "1.000", "-", "-", "yes"]]
    for variant in VARIANTS:
        r = rows[variant]
        r["ms"] = median(times[variant]) * 1e3
        r["ratio"] = median(times[variant]) / base
        table.append([variant, r["edited"], "%.2f" % r["ms"], "%.3f" % r["ratio"], r["hooks"], r["appends"],
                      "yes" if r["tokens_equal"] else "NO"])
    head = ["rank file", "hooks in file", "CPU ms/call", "/ original", "hooks in optimised graph",
            "appends in optimised graph", "tokens equal"]
    return bc.print_table(head, table), rows, {k: v for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bc.add_build_args(p)
    p.add_argument("--quick", action="store_true", help="smoke mode: tiny model, few calls")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--tokens", type=int, default=32, help="new tokens per generate_while call")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=150, help="passes over the configurations")
    p.add_argument("--calls", type=int, default=2, help="timed calls of each configuration per pass")
    p.add_argument("--port", type=int, default=None,
                   help="MASTER_PORT of the W=1 group (default: a port this process holds)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.d, args.tokens, args.passes, args.calls, args.warmup = 2, 32, 4, 2, 2, 2
    tool, lib = bc.fsdp_opt_and_runtime(args.build)
    # Held until the process exits: the group's store binds it when the first rank file loads.
    import fsdp_harness
    held_port = None if args.port else fsdp_harness.ReservedPort()
    fsdp_opt = load_fsdp_opt(lib, args.port or held_port.port)
    pipelines = {"default": fsdp_opt.default_pipeline()}
    pipelines["one path"] = [p for p in pipelines["default"] if p != "specialize-no-grad"]
    load_start = os.getloadavg()[0]
    start = time.time()
    with bc.scratch_dir(args.work, "hook_cost_") as work:
        original_pt = os.path.join(work, "kv.pt")
        rank_pts, cmds = {}, {}
        subprocess.run([sys.executable, os.path.join(bc.INPUTS, "decoders.py"), "kv", "-o", original_pt,
                        "--n-layer", str(args.layers), "--d", str(args.d)], check=True, timeout=600)
        for name, pipeline in pipelines.items():
            rank_pts[name] = os.path.join(work, "kv_w1_%s.pt" % name.replace(" ", "_"))
            cmd = [tool, original_pt, "--world-size=1", "--fsdp-unit=.", "--fsdp-unit-type=Block",
                   "--fsdp-unit=head_a", "--fsdp-unit=head_b", "--passes=" + ",".join(pipeline),
                   "-o", rank_pts[name]]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
            cmds[name] = {"cmd": cmd}
        table, rows, times = run(args, fsdp_opt, original_pt, rank_pts)
    if args.json:
        out = {"rows": rows, "times_s": times,
               "run": bc.run_record(load_start, os.getloadavg()[0], cmds, time.time() - start,
                                    argv, table)}
        bc.write_json(args.json, out)


if __name__ == "__main__":
    main()
