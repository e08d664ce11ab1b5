# --version prints the tool's name, version and the torch it was built against, and exits 0;
# it needs no input.
#
# RUN: %python -m lit_helpers run fsdp-opt --version | FileCheck %s --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: fsdp-opt {{[0-9]+\.[0-9]+\.[0-9]+}} (torch {{[0-9]+\.[0-9]+}}{{.*}})
# CHECK-NEXT: [stderr]
# CHECK-NEXT: [exit 0]
#
# The version is the one the manifest records as tool_version.
# RUN: %python -m fsdp_models two_blocks -o %t.pt
# RUN: rm -rf %t.out
# RUN: fsdp-opt %t.pt --fsdp-unit=. --world-size=2 -o %t.out
# RUN: fsdp-opt --version > %t.version
# RUN: %python %s %t.out/manifest.json %t.version | FileCheck %s --check-prefix=SAME
# SAME: same version: True

import json
import sys

with open(sys.argv[1]) as f:
    manifest = json.load(f)
with open(sys.argv[2]) as f:
    words = f.read().split()
print("same version:", words[1] == manifest["tool_version"])
