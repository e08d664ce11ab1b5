"""Helpers shared by fsdp-opt's lit tests (importable: PYTHONPATH has test/Inputs).

From a test file (which scripts its own model and checks its own output):
    import lit_helpers as lh
    lh.save(model, path)                  # torch.jit.script + save; returns the scripted module
    lh.sha256(path)                       # hex digest of a file
    lh.load_rewritten(path)               # torch.ops.load_library(runtime) + torch.jit.load
    lh.count_fsdp_ops(graph)              # fsdp:: nodes in a graph, nested blocks included
    lh.count_gathers(graph)               # gathers issued: fsdp::all_gather + fsdp::all_gather_start

From a RUN line:
    %python -m lit_helpers sha256 FILE...       # "<hex> <basename>" per file
    %python -m lit_helpers tree PATH            # every entry below PATH with its size and sha256,
                                                # sorted; "PATH: missing" when it does not exist
    %python -m lit_helpers diff A B             # unified diff; exit 1 when the files differ
                                                # (lit 14's own `diff`/`cat` builtins overwrite
                                                # PYTHONPATH for every later RUN line: avoid them)
    %python -m lit_helpers run CMD ARGS...      # runs CMD; prints "[stdout]", its stdout,
                                                # "[stderr]", its stderr, "[exit N]"; exits 0
"""

import hashlib
import os
import sys
import warnings

# torch 2.x warns on every torch.jit.script/save/load; tests check stderr, keep it clean.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(model, path: str):
    """torch.jit.script the module (in eval mode) and save it; returns the scripted module."""
    import torch
    scripted = torch.jit.script(model.eval())
    torch.jit.save(scripted, path)
    return scripted


_runtime_loaded = False


def load_runtime() -> None:
    """Register the fsdp:: ops (libfsdp_runtime) in this process, once."""
    global _runtime_loaded
    if not _runtime_loaded:
        import torch
        torch.ops.load_library(os.environ["FSDP_OPT_RUNTIME_LIB"])
        _runtime_loaded = True


def load_rewritten(path: str):
    """Load a file written by fsdp-opt: the fsdp:: ops must be registered first."""
    import torch
    load_runtime()
    return torch.jit.load(path)


def fsdp_nodes(block):
    """Every fsdp:: node of a graph or block, nested blocks included, in order."""
    found = []
    for node in block.nodes():
        if node.kind().startswith("fsdp::"):
            found.append(node)
        for sub in node.blocks():
            found.extend(fsdp_nodes(sub))
    return found


def count_fsdp_ops(graph) -> int:
    return len(fsdp_nodes(graph))


def count_gathers(graph) -> int:
    """Gathers in a graph, in either form of SPEC section 5: fsdp::all_gather, or the split
    fsdp::all_gather_start (whose fsdp::all_gather_wait is not counted again)."""
    return sum(n.kind() in ("fsdp::all_gather", "fsdp::all_gather_start") for n in fsdp_nodes(graph))


def tree(path: str) -> str:
    if not os.path.lexists(path):
        return "%s: missing\n" % os.path.basename(path.rstrip("/"))
    if os.path.isfile(path):
        return "%s %d %s\n" % (os.path.basename(path), os.path.getsize(path), sha256(path))
    lines = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs):
            lines.append("%s/" % os.path.relpath(os.path.join(root, name), path))
        for name in sorted(files):
            full = os.path.join(root, name)
            lines.append("%s %d %s" % (os.path.relpath(full, path), os.path.getsize(full), sha256(full)))
    return "".join(line + "\n" for line in sorted(lines)) or "(empty)\n"


def run(argv) -> int:
    import subprocess
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = sys.stdout
    out.write("[stdout]\n" + done.stdout.decode(errors="replace"))
    out.write("[stderr]\n" + done.stderr.decode(errors="replace"))
    out.write("[exit %d]\n" % done.returncode)
    return 0


def diff(a: str, b: str) -> int:
    import difflib
    with open(a) as fa, open(b) as fb:
        lines_a, lines_b = fa.readlines(), fb.readlines()
    delta = list(difflib.unified_diff(lines_a, lines_b, a, b))
    sys.stdout.writelines(delta)
    return 1 if delta else 0


def main(argv) -> int:
    if len(argv) == 3 and argv[0] == "diff":
        return diff(argv[1], argv[2])
    if len(argv) >= 2 and argv[0] == "run":
        return run(argv[1:])
    if len(argv) >= 2 and argv[0] == "sha256":
        for path in argv[1:]:
            print(sha256(path), os.path.basename(path))
        return 0
    if len(argv) == 2 and argv[0] == "tree":
        sys.stdout.write(tree(argv[1]))
        return 0
    sys.stderr.write("usage: python -m lit_helpers sha256 FILE... | tree PATH | diff A B | run CMD ARGS...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
