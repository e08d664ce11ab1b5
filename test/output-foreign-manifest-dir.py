# A directory is an fsdp-opt output only if its manifest.json is one (format_version, tool
# "fsdp-opt"). A user's directory that merely has a file named manifest.json (a web app's, a
# dataset's) is not, so -o over it must fail and leave it untouched.
#
# Regression test (fixed): the shard writer treats any directory containing a file named manifest.json
# as a previous output and REPLACES it: the user's notes.txt and manifest.json are deleted and
# the command exits 0.
#
# RUN: rm -rf %t && mkdir -p %t/webapp
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python %s %t/webapp
# RUN: %python -m lit_helpers tree %t/webapp > %t/before
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/webapp \
# RUN:   | FileCheck %s --implicit-check-not=error:
# CHECK:      [stderr]
# CHECK-NEXT: error: cannot write '{{.*}}/webapp': {{.*}}
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/webapp > %t/after
# RUN: %python -m lit_helpers diff %t/before %t/after

import os
import sys

d = sys.argv[1]
with open(os.path.join(d, "manifest.json"), "w") as f:
    f.write('{"name": "my web app", "start_url": "/"}\n')
with open(os.path.join(d, "notes.txt"), "w") as f:
    f.write("keep me\n")
