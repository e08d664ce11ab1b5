// Where code may change what a prim::GetAttr chain reaches. A gather reads its unit's parameters
// through such chains; TorchScript lets a method reassign a submodule (`self.block = self.other`)
// or a parameter (`self.fc.weight = w`) with prim::SetAttr, after which the same chain reaches
// other tensors. So before a pass moves a gather or its operand reads across code, or treats two
// gathers of one chain as the same unit, it asks here whether that code may assign such an
// attribute. The answer is conservative: any prim::SetAttr of a module-typed or parameter
// attribute, in the code or in any method it calls, counts; assignments of plain attributes
// (buffers, caches, counters) do not, since no gather reads through them.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>

namespace fsdp_opt {

class ModuleAssignments {
 public:
  // Whether `node`, its nested blocks or the methods it calls may assign such an attribute.
  bool in(torch::jit::Node* node);
  // Whether any node strictly between `from` and `to` (one block, `from` first) may.
  bool between(torch::jit::Node* from, torch::jit::Node* to);
  // Whether anything in `block` may.
  bool inBlock(torch::jit::Block* block);

 private:
  bool inFunction(torch::jit::Function* function);
  std::map<torch::jit::Function*, bool> functions_;
};

// A prim::SetAttr that assigns a submodule or a parameter.
bool assignsModuleOrParameter(const torch::jit::Node* node);

}  // namespace fsdp_opt
