# Bad input files: one `error:` line naming the file and the cause, exit 1, nothing on stdout,
# nothing written.
#
# RUN: rm -rf %t && mkdir -p %t
#
# Missing file.
# RUN: %python -m lit_helpers run fsdp-opt %t/missing.pt --print-ir -o %t/out.pt \
# RUN:   | FileCheck %s --check-prefix=MISSING --implicit-check-not=error: --match-full-lines
# MISSING:      [stdout]
# MISSING-NEXT: [stderr]
# MISSING-NEXT: error: cannot read input '{{.*}}missing.pt': no such file
# MISSING-NEXT: [exit 1]
#
# A file that is not a TorchScript archive (here: text; then a plain torch.save'd tensor).
# RUN: %python %s %t
# RUN: %python -m lit_helpers run fsdp-opt %t/text.pt --print-ir -o %t/out.pt \
# RUN:   | FileCheck %s --check-prefix=TEXT --implicit-check-not=error: --match-full-lines
# TEXT:      [stdout]
# TEXT-NEXT: [stderr]
# TEXT-NEXT: error: cannot load '{{.*}}text.pt' as a TorchScript module: {{.+}}
# TEXT-NEXT: [exit 1]
# RUN: %python -m lit_helpers run fsdp-opt %t/tensor.pt --print-ir -o %t/out.pt \
# RUN:   | FileCheck %s --check-prefix=TENSOR --implicit-check-not=error: --match-full-lines
# TENSOR:      [stdout]
# TENSOR-NEXT: [stderr]
# TENSOR-NEXT: error: cannot load '{{.*}}tensor.pt' as a TorchScript module{{.*}}
# TENSOR-NEXT: [exit 1]
#
# A directory given as input.
# RUN: %python -m lit_helpers run fsdp-opt %t --print-ir \
# RUN:   | FileCheck %s --check-prefix=DIR --implicit-check-not=error:
# DIR:      [stderr]
# DIR-NEXT: error: {{.*}}'{{.*}}'{{.*}}
# DIR-NEXT: [exit 1]
#
# No input at all.
# RUN: %python -m lit_helpers run fsdp-opt --print-ir \
# RUN:   | FileCheck %s --check-prefix=NONE --implicit-check-not=error:
# NONE:      [stderr]
# NONE-NEXT: error: no input file{{.*}}
# NONE-NEXT: [exit {{[1-9][0-9]*}}]
#
# Nothing was written by any of them.
# RUN: %python -m lit_helpers tree %t/out.pt | FileCheck %s --check-prefix=NOTHING
# NOTHING: out.pt: missing

import os
import sys

import torch

out = sys.argv[1]
with open(os.path.join(out, "text.pt"), "w") as f:
    f.write("this is not a TorchScript archive\n")
torch.save(torch.ones(3), os.path.join(out, "tensor.pt"))
