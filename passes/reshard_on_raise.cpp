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
#include <fsdp_opt/passes/passes.h>

#include "ir/fsdp_ops.h"
#include "ir/module_tree.h"

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "reshard-on-raise";

}  // namespace

bool reshardOnRaise(PassContext& context) {
  const int inserted = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    std::vector<torch::jit::Node*> raises;
    forEachNode(m.graph->block(), [&](torch::jit::Node* node) {
      if (node->kind() == c10::prim::RaiseException) raises.push_back(node);
    });
    int count = 0;
    for (torch::jit::Node* raise : raises) {
      torch::jit::Node* previous = raise->prev();
      if (previous && previous->kind() == ops::releaseAll()) continue;
      torch::jit::WithInsertPoint before(raise);
      m.graph->insertNode(m.graph->create(ops::releaseAll(), {}, 0));
      ++count;
    }
    return count;
  });
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
