#include "module_writes.h"

#include "module_tree.h"

namespace fsdp_opt {

bool assignsModuleOrParameter(const torch::jit::Node* node) {
  if (node->kind() != c10::prim::SetAttr) return false;
  auto owner = node->input(0)->type()->cast<c10::ClassType>();
  if (!owner) return false;
  auto slot = owner->findAttributeSlot(node->s(c10::attr::name));
  if (!slot) return false;
  auto attribute = owner->getAttribute(*slot)->cast<c10::ClassType>();
  if (attribute && attribute->is_module()) return true;
  // Only modules have parameters (and ClassType asserts as much): `with torch.no_grad():` sets an
  // attribute of its context object, a plain class.
  return owner->is_module() && owner->is_parameter(*slot);
}

bool ModuleAssignments::inFunction(torch::jit::Function* function) {
  auto known = functions_.find(function);
  if (known != functions_.end()) return known->second;
  functions_[function] = false;  // TorchScript has no recursion; this only guards the walk
  bool found = inBlock(graphOf(function)->block());
  functions_[function] = found;
  return found;
}

bool ModuleAssignments::in(torch::jit::Node* node) {
  if (assignsModuleOrParameter(node)) return true;
  if (node->kind() == c10::prim::CallMethod) {
    auto type = node->input(0)->type()->cast<c10::ClassType>();
    torch::jit::Function* callee = type ? type->findMethod(node->s(c10::attr::name)) : nullptr;
    if (callee && inFunction(callee)) return true;
  }
  for (torch::jit::Block* nested : node->blocks()) {
    if (inBlock(nested)) return true;
  }
  return false;
}

bool ModuleAssignments::inBlock(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    if (in(node)) return true;
  }
  return false;
}

bool ModuleAssignments::between(torch::jit::Node* from, torch::jit::Node* to) {
  for (torch::jit::Node* node = from->next(); node != to; node = node->next()) {
    if (in(node)) return true;
  }
  return false;
}

}  // namespace fsdp_opt
