# lower-indexed-module-calls: a call on a ModuleList / ModuleDict element chosen when the program
# runs (prim::ModuleContainerIndex, the element typed as a module interface) becomes one prim::If
# per element, each arm calling its element by class; a key that names no element raises.
# An element used other than as a callee is left as it is, with a remark.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t
#
# RUN: fsdp-opt %t/list.pt --passes=lower-indexed-module-calls --print-ir --method=forward --remarks 2>%t/list.err \
# RUN:   | FileCheck %s --check-prefix=LIST --implicit-check-not=prim::ModuleContainerIndex
# LIST:      %[[ZERO:.*]] : int = prim::Constant[value=0]()
# LIST-NEXT: %[[IS0:.*]] : bool = aten::eq(%table{{.*}}, %[[ZERO]])
# LIST-NEXT: %{{.*}} : Tensor = prim::If(%[[IS0]])
# LIST-NEXT:   block0():
# LIST-NEXT:     %[[T0:.*]] : __torch__.torch.nn.modules.sparse.Embedding = prim::GetAttr[name="0"](%tables
# LIST-NEXT:     %[[R0:.*]] : Tensor = prim::CallMethod[name="forward"](%[[T0]], %ids
# LIST-NEXT:     -> (%[[R0]])
# LIST-NEXT:   block1():
# LIST:          prim::GetAttr[name="1"]
# LIST:          prim::GetAttr[name="2"]
# LIST:          prim::RaiseException(%{{.*}}, %{{.*}})
# LIST:          prim::Uninitialized()
# RUN: FileCheck %s --check-prefix=LIST-REMARK < %t/list.err
# LIST-REMARK: remark: [lower-indexed-module-calls] in __torch__.Tables::forward, 1 call(s) on an element of ModuleList chosen when it runs became one branch per element (3)
#
# A ModuleDict keyed by str: the keys are compared as strings, in the dict's order.
# RUN: fsdp-opt %t/dict.pt --passes=lower-indexed-module-calls --print-ir --method=forward \
# RUN:   | FileCheck %s --check-prefix=DICT --implicit-check-not=prim::ModuleContainerIndex
# DICT: prim::Constant[value="sum"]()
# DICT: aten::eq(%task
# DICT: prim::GetAttr[name="sum"]
# DICT: prim::Constant[value="max"]()
# DICT: prim::GetAttr[name="max"]
# DICT: prim::Constant[value="builtins.KeyError"]()
#
# The element also handed to a method: left alone, and check-hidden-unit-calls refuses it.
# RUN: fsdp-opt %t/passed.pt --passes=lower-indexed-module-calls --print-ir --method=forward --remarks 2>&1 \
# RUN:   | FileCheck %s --check-prefix=PASSED
# PASSED: remark: [lower-indexed-module-calls] in __torch__.Passed::forward, an element of ModuleList chosen when it runs is used other than as a callee; left as it is
# PASSED: prim::ModuleContainerIndex
#
# Running the lowered program (no sharding) gives the original's results, and the missing key
# raises the Python exception a user would expect.
# RUN: fsdp-opt %t/list.pt --passes=lower-indexed-module-calls,wrap-entry-methods -o %t/list-lowered.pt
# RUN: fsdp-opt %t/dict.pt --passes=lower-indexed-module-calls,wrap-entry-methods -o %t/dict-lowered.pt
# RUN: %python %s %t --run | FileCheck %s --check-prefix=RESULTS
# RESULTS:      list: same results: True
# RESULTS-NEXT: list: table 3 raises IndexError
# RESULTS-NEXT: dict: same results: True
# RESULTS-NEXT: dict: task 'min' raises KeyError

import os
import sys

import torch
import torch.nn as nn

import lit_helpers as lh

out = sys.argv[1]


@torch.jit.interface
class Lookup(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        pass


class Tables(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(5, 3) for _ in range(3)])

    def forward(self, ids, table: int):
        chosen: Lookup = self.tables[table]
        return chosen.forward(ids)


class Dict(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"sum": nn.Linear(3, 2), "max": nn.Linear(3, 4)})

    def forward(self, x, task: str):
        head: Lookup = self.heads[task]
        return head.forward(x)


class Passed(Tables):
    def forward(self, ids, table: int):
        chosen: Lookup = self.tables[table]
        return self.look_up(chosen, ids)

    @torch.jit.export
    def look_up(self, table: Lookup, ids):
        return table.forward(ids)


def raised(fn):
    # TorchScript raises torch.jit.Error; its message names the Python exception raised.
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return [kind for kind in ("IndexError", "KeyError", "RuntimeError") if kind in str(e)][:1] or repr(e)
    return "nothing"


if sys.argv[2:] == ["--run"]:
    lh.load_runtime()
    ids, x = torch.tensor([[0, 3, 4]]), torch.randn(2, 3)
    for name, calls, bad in (("list", [(ids, 0), (ids, 1), (ids, 2)], (ids, 3)),
                             ("dict", [(x, "sum"), (x, "max")], (x, "min"))):
        original = torch.jit.load(os.path.join(out, name + ".pt"))
        lowered = torch.jit.load(os.path.join(out, name + "-lowered.pt"))
        print("%s: same results: %s" % (name, all(torch.equal(lowered(*c), original(*c)) for c in calls)))
        print("%s: %s %r raises %s" % (name, "table" if name == "list" else "task", bad[1], *raised(lambda: lowered(*bad))))
    sys.exit(0)

torch.manual_seed(0)
for name, cls in (("list", Tables), ("dict", Dict), ("passed", Passed)):
    torch.jit.script(cls()).save(os.path.join(out, name + ".pt"))
