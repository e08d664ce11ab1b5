# fsdp-opt never modifies its input: after successful runs that rewrite, specialize types and
# write shards, the input file has the same bytes (sha256 before == after).
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python -m fsdp_models shared_type -o %t/in.pt
# RUN: %python -c "import lit_helpers as lh; print(lh.sha256('%t/in.pt'))" > %t/before
# RUN: fsdp-opt %t/in.pt --print-ir --stats > %t/ir
# RUN: fsdp-opt %t/in.pt -o %t/single.pt
# RUN: fsdp-opt %t/in.pt --world-size=3 -o %t/sharded
# RUN: %python -c "import lit_helpers as lh; print(lh.sha256('%t/in.pt'))" > %t/after
# RUN: %python -m lit_helpers diff %t/before %t/after
#
# And the runs did rewrite (so "unchanged" is not because nothing happened).
# RUN: FileCheck %s < %t/ir
# CHECK: fsdp::all_gather
# CHECK: stats:
# RUN: %python %s %t | FileCheck %s --check-prefix=DIFFERENT
# DIFFERENT: single differs from input: True
# DIFFERENT: manifest input sha256 matches: True

import json
import os
import sys

import lit_helpers as lh

t = sys.argv[1]
with open(os.path.join(t, "before")) as f:
    before = f.read().strip()
print("single differs from input:", lh.sha256(os.path.join(t, "single.pt")) != before)
with open(os.path.join(t, "sharded", "manifest.json")) as f:
    print("manifest input sha256 matches:", json.load(f)["input"]["sha256"] == before)
