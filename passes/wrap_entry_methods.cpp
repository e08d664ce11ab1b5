// Pass wrap-entry-methods: the prologue and epilogue of methods called from outside TorchScript.
//
// Every method of the root is an entry method (Python or C++ may call it). Each gets, first,
// fsdp::check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256), which
// initialises the process group and rejects a rank file loaded on the wrong rank or mixed with
// another run's files before the first collective. When the root itself is a unit and the method
// is one of its forward methods, the body is wrapped in the root unit's gather and reshard, since
// no caller graph exists to hold them.
// Assumes: the plan is built. Guarantees: the three attributes exist on the root (the shard writer
// sets them per rank); idempotent.
//
//   after: graph(%self, ...):
//            fsdp::check_rank(%rank, %world, %sha)
//            %full = fsdp::all_gather(...)      # root unit only
//            ... body ...
//            fsdp::reshard(%full, ...)          # root unit only
//            return (...)
#include <fsdp_opt/passes.h>

#include "support/fsdp_ops.h"
#include "support/module_tree.h"

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "wrap-entry-methods";

void addRankAttributes(torch::jit::Module& root) {
  if (!root.hasattr(kRankAttr)) root.register_attribute(kRankAttr, c10::IntType::get(), int64_t{0});
  if (!root.hasattr(kWorldSizeAttr)) {
    root.register_attribute(kWorldSizeAttr, c10::IntType::get(), int64_t{1});
  }
  if (!root.hasattr(kManifestHashAttr)) {
    root.register_attribute(kManifestHashAttr, c10::StringType::get(), std::string());
  }
}

}  // namespace

bool wrapEntryMethods(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  torch::jit::Module& root = context.module();
  addRankAttributes(root);
  addUnitPathAttributes(root, *plan);
  const Unit* rootUnit = plan->unitAt("");
  bool changed = false;
  for (torch::jit::Function* function : root.type()->methods()) {
    auto graph = graphOf(function);
    torch::jit::Block* body = graph->block();
    bool wrapped = false;
    for (torch::jit::Node* node : body->nodes()) wrapped = wrapped || node->kind() == ops::checkRank();
    if (wrapped) continue;
    torch::jit::Value* self = graph->inputs().at(0);
    {
      torch::jit::WithInsertPoint atStart(*body->nodes().begin());
      auto* rank = graph->insertGetAttr(self, kRankAttr);
      auto* world = graph->insertGetAttr(self, kWorldSizeAttr);
      auto* sha = graph->insertGetAttr(self, kManifestHashAttr);
      auto* check = graph->insertNode(graph->create(ops::checkRank(), {rank, world, sha}, 0));
      if (rootUnit && rootUnit->hasForwardMethod(function->name())) {
        torch::jit::WithInsertPoint afterCheck(check->next());
        torch::jit::Node* gather = insertUnitGather(*graph, self, *rootUnit, context.options().paramDtype);
        torch::jit::WithInsertPoint atEnd(body->return_node());
        insertUnitReshard(*graph, gather);
        context.diagnostics().remark(kPassName, "entry method " + function->name() +
                                                    " wrapped in the root unit's gather/reshard");
        context.statistics().add("call sites rewritten", 1);
      }
    }
    changed = true;
  }
  return changed;
}

}  // namespace fsdp_opt
