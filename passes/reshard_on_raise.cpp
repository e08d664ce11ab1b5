// Pass reshard-on-raise: a raising method leaves the module usable.
//
// TorchScript has no try/finally, and an exception unwinds every TorchScript frame to the
// caller outside. So before each prim::RaiseException the pass inserts fsdp::release_all, which
// reshards every unit still gathered and resets the runtime's counts: the next call starts from
// the same state as the first.
// Assumes: nothing. Guarantees: every prim::RaiseException in the tree is preceded by
// fsdp::release_all; idempotent.
//
//   before: prim::RaiseException(%msg, %cls)
//   after:  fsdp::release_all()
//           prim::RaiseException(%msg, %cls)
#include <fsdp_opt/passes.h>

#include "support/fsdp_ops.h"
#include "support/module_tree.h"

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "reshard-on-raise";

}  // namespace

bool reshardOnRaise(PassContext& context) {
  int inserted = 0;
  for (const auto& [type, path] : distinctModuleTypes(context.module())) {
    for (torch::jit::Function* function : type->methods()) {
      auto graph = graphOf(function);
      std::vector<torch::jit::Node*> raises;
      forEachNode(graph->block(), [&](torch::jit::Node* node) {
        if (node->kind() == c10::prim::RaiseException) raises.push_back(node);
      });
      for (torch::jit::Node* raise : raises) {
        torch::jit::Node* previous = raise->prev();
        if (previous && previous->kind() == ops::releaseAll()) continue;
        torch::jit::WithInsertPoint before(raise);
        graph->insertNode(graph->create(ops::releaseAll(), {}, 0));
        ++inserted;
      }
    }
  }
  if (inserted > 0) {
    context.diagnostics().remark(kPassName, "release_all inserted before " +
                                                         std::to_string(inserted) + " raise(s)");
  }
  return inserted > 0;
}

PassInfo reshardOnRaisePass() {
  return {kPassName, "fsdp::release_all before every raise", reshardOnRaise};
}

}  // namespace fsdp_opt
