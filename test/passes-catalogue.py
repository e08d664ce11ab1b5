# docs/passes.md is checked against the libraries, so the catalogue cannot drift: its
# "Catalogue" table must list exactly the passes and summaries `fsdp-opt --list-passes` prints,
# and its "default pipeline" table exactly defaultPipeline(), in order.
#
# RUN: fsdp-opt --list-passes > %t.list
# RUN: %python %s %S/../docs/passes.md %t.list %runtime_lib

import os
import re
import sys

import torch

docs_path, list_path, runtime_lib = sys.argv[1:4]
docs = open(docs_path).read()


def table_after(heading):
    """Rows (as lists of cells) of the first Markdown table after `heading`."""
    section = docs.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r"-+", c) for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


listed = {}
for line in open(list_path):
    name, summary = line.strip().split(None, 1)
    listed[name] = summary.strip()
documented = {row[0].strip("`"): row[1] for row in table_after("## Catalogue")}
problems = []
for name in sorted(set(listed) | set(documented)):
    if name not in documented:
        problems.append("'%s' is registered but not in the catalogue" % name)
    elif name not in listed:
        problems.append("'%s' is in the catalogue but not registered" % name)
    elif listed[name] != documented[name]:
        problems.append("'%s': --list-passes says %r, docs say %r" % (name, listed[name], documented[name]))

torch.ops.load_library(runtime_lib)
torch.ops.load_library(os.path.join(os.path.dirname(runtime_lib), "libfsdp_passes.so"))
pipeline = list(torch.ops.fsdp_opt.default_pipeline())
in_docs = [row[1].strip("`") for row in table_after("## The default pipeline")]
if in_docs != pipeline:
    problems.append("default pipeline: docs %s, libraries %s" % (in_docs, pipeline))

for p in problems:
    print("FAIL " + p)
print("%d passes, %d-step default pipeline: %s" % (len(listed), len(pipeline), "MISMATCH" if problems else "docs agree"))
sys.exit(1 if problems else 0)
