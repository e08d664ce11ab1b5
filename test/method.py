# --method=NAME restricts --print-ir (and --print-ir-after*) to methods of that name, in every
# module that has one; a name no module has is an error.
#
# RUN: %python -m fsdp_models gpt -o %t.pt
# RUN: fsdp-opt %t.pt '--fsdp-unit=blocks.*' --print-ir --method=generate | FileCheck %s --implicit-check-not=//
# CHECK:     // . : __torch__.GPT :: generate
# CHECK-NOT: :: forward
#
# A method of submodules only (`__len__` of the ModuleList) prints for them alone.
# RUN: fsdp-opt %t.pt --print-ir --method=__len__ | FileCheck %s --check-prefix=LEN --implicit-check-not=//
# LEN:      // blocks : __torch__.torch.nn.modules.container.ModuleList :: __len__
# LEN-NEXT: graph(%self : __torch__.torch.nn.modules.container.ModuleList):
# LEN-NEXT:   %1 : int = prim::Constant[value=2]()
#
# Without --method: every method of every distinct type, forward and generate of the root
# included.
# RUN: fsdp-opt %t.pt --print-ir | FileCheck %s --check-prefix=ALL
# ALL-DAG: // . : __torch__.GPT :: forward
# ALL-DAG: // . : __torch__.GPT :: generate
# ALL-DAG: // blocks.0 : __torch__.Block :: forward
# ALL-DAG: // blocks.0.attn : __torch__.CausalSelfAttention :: forward
#
# RUN: %python -m lit_helpers run fsdp-opt %t.pt --print-ir --method=decode \
# RUN:   | FileCheck %s --check-prefix=UNKNOWN --implicit-check-not=error: --match-full-lines
# UNKNOWN:      [stdout]
# UNKNOWN-NEXT: [stderr]
# UNKNOWN-NEXT: error: --method: no module has a method 'decode'
# UNKNOWN-NEXT: [exit 1]
