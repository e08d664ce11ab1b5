# --world-size=N -o DIR over an existing non-empty directory that is not an fsdp-opt output is
# an error (one `error:` line naming it, exit 1), and the directory's contents are untouched.
# An earlier fsdp-opt output directory is replaced as a whole; an empty directory is filled.
#
# RUN: rm -rf %t && mkdir -p %t/user/sub %t/empty
# RUN: %python -m fsdp_models two_blocks -o %t/in.pt
# RUN: %python %s %t/user
# RUN: %python -m lit_helpers tree %t/user > %t/user.before
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/user \
# RUN:   | FileCheck %s --implicit-check-not=error: --match-full-lines
# CHECK:      [stdout]
# CHECK-NEXT: [stderr]
# CHECK-NEXT: error: cannot write '{{.*}}/user': output directory '{{.*}}/user' is not empty and holds no fsdp-opt output; refusing to replace it
# CHECK-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/user > %t/user.after
# RUN: %python -m lit_helpers diff %t/user.before %t/user.after
# RUN: FileCheck %s --check-prefix=USER --match-full-lines < %t/user.after
# USER:      notes.txt 6 {{[0-9a-f]+}}
# USER-NEXT: rank0.pt 4 {{[0-9a-f]+}}
# USER-NEXT: sub/
# USER-NEXT: sub/data.bin 3 {{[0-9a-f]+}}
#
# With --world-size=1, -o naming an existing directory is an error too.
# RUN: %python -m lit_helpers run fsdp-opt %t/in.pt --fsdp-unit=. -o %t/user \
# RUN:   | FileCheck %s --check-prefix=SINGLE --implicit-check-not=error:
# SINGLE:      [stderr]
# SINGLE-NEXT: error: cannot write '{{.*}}/user': {{.*}}directory{{.*}}
# SINGLE-NEXT: [exit 1]
# RUN: %python -m lit_helpers tree %t/user > %t/user.after2
# RUN: %python -m lit_helpers diff %t/user.before %t/user.after2
#
# An empty directory is filled; an fsdp-opt output is replaced (no rank2.pt left from W=3).
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=3 -o %t/empty
# RUN: fsdp-opt %t/in.pt --fsdp-unit=. --world-size=2 -o %t/empty
# RUN: %python -m lit_helpers tree %t/empty | FileCheck %s --check-prefix=REPLACED --match-full-lines
# REPLACED:      manifest.json {{[0-9]+}} {{[0-9a-f]+}}
# REPLACED-NEXT: rank0.pt {{[0-9]+}} {{[0-9a-f]+}}
# REPLACED-NEXT: rank1.pt {{[0-9]+}} {{[0-9a-f]+}}
# REPLACED-NOT:  {{.}}

import os
import sys

user = sys.argv[1]
with open(os.path.join(user, "notes.txt"), "w") as f:
    f.write("notes\n")
with open(os.path.join(user, "rank0.pt"), "w") as f:
    f.write("mine")
with open(os.path.join(user, "sub", "data.bin"), "wb") as f:
    f.write(b"\x00\x01\x02")
