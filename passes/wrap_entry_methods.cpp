// Pass wrap-entry-methods: the prologue and epilogue of methods called from outside TorchScript.
//
// Every method of the root is an entry method (Python or C++ may call it). Each gets, first,
// fsdp::check_rank(self._fsdp_rank, self._fsdp_world_size, self._fsdp_manifest_sha256), which
// initialises the process group and rejects a rank file loaded on the wrong rank or mixed with
// another run's files before the first collective (a file made with --shard-group-size calls
// fsdp::check_rank(rank, world, self._fsdp_shard_group_size, sha), which also sets the mesh the
// runtime's gathers use); then, above world size 1, when some
// parameters are replicated (0-dim, or in no unit's group), fsdp::replicated_params on them, so
// that training averages their gradients over the ranks. When the root itself is a unit, the body is
// wrapped in the root unit's gather and reshard, since no caller graph exists to hold them, in
// every method that needs it: its registered forward methods, and every other method that reads
// a parameter of the root's group where no gather covers it (timm's `forward_features`,
// `forward_head`, torchvision's `_process_input`). A user may call any of those from outside;
// called from another entry method instead, the gather is nested, and nested gathers of an
// unsharded unit cost no collective.
// Assumes: the plan is built; insert-unit-gathers ran, so reads under a unit's call are already
// covered and only the root's own group is left. Guarantees: the three attributes exist on the
// root (the shard writer sets them per rank), and so do the unshard scopes' (scope_metadata.h);
// no root method reads the root group uncovered; idempotent.
//
//   after: graph(%self, ...):
//            fsdp::check_rank(%rank, %world, %sha)
//            %full = fsdp::all_gather(...)      # root unit only
//            ... body ...
//            fsdp::reshard(%full, ...)          # root unit only
//            return (...)
#include <fsdp_opt/passes/passes.h>

#include "ir/fsdp_ops.h"
#include "ir/instance_walk.h"
#include "ir/module_tree.h"
#include "ir/scope_metadata.h"

#include <fsdp_opt/passes/pattern.h>

#include <map>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "wrap-entry-methods";

void addRankAttributes(torch::jit::Module& root, const PipelineOptions& options) {
  if (!root.hasattr(kRankAttr)) root.register_attribute(kRankAttr, c10::IntType::get(), int64_t{0});
  if (options.hybrid() && !root.hasattr(kShardGroupSizeAttr)) {
    root.register_attribute(kShardGroupSizeAttr, c10::IntType::get(), options.shardGroup());
  }
  if (!root.hasattr(kWorldSizeAttr)) {
    root.register_attribute(kWorldSizeAttr, c10::IntType::get(), int64_t{1});
  }
  if (!root.hasattr(kManifestHashAttr)) {
    root.register_attribute(kManifestHashAttr, c10::StringType::get(), std::string());
  }
}

// Root methods that, called from outside, would read a parameter of the root unit's group while
// no gather covers it, each with the first such parameter (for the remark).
std::map<std::string, std::string> methodsReadingShardedRoot(const torch::jit::Module& root,
                                                             const FsdpPlan& plan, const Unit& rootUnit) {
  std::map<std::string, std::string> firstRead;
  WalkObserver observer;
  observer.onParamRead = [&](const ParamRead& read) {
    if (read.unit == &rootUnit && !read.unsharded) firstRead.emplace(read.stack.front().method, read.paramPath);
  };
  walkFromEntryMethods(root, plan, GatherModel::ExplicitOps, observer);
  return firstRead;
}

// The parameters every rank holds whole (0-dim, or in no unit's group), one slot path each:
// training averages their gradients over the ranks (fsdp::replicated_params).
std::vector<std::string> replicatedParameters(const torch::jit::Module& root, const FsdpPlan& plan) {
  std::vector<std::string> paths;
  std::set<const c10::TensorImpl*> seen;
  ModuleIndex index(root);
  for (const auto& [owner, module] : index.modules()) {
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      if (!item.value.defined() || !seen.insert(item.value.unsafeGetTensorImpl()).second) continue;
      std::string path = joinPath(owner, item.name);
      if (!plan.unitOfParam(path)) paths.push_back(path);
    }
  }
  return paths;
}

}  // namespace

bool wrapEntryMethods(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  torch::jit::Module& root = context.module();
  addRankAttributes(root, context.options());
  addUnitPathAttributes(root, *plan);
  addScopeAttributes(root, *plan, context.options());  // for unshard scopes (fsdp_opt.unsharded)
  const Unit* rootUnit = plan->unitAt("");
  std::vector<std::string> replicated = context.options().worldSize > 1 ? replicatedParameters(root, *plan)
                                                                        : std::vector<std::string>();
  // Decided for all methods before any is wrapped: the analysis sees the program as called.
  std::map<std::string, std::string> readers;
  if (rootUnit) readers = methodsReadingShardedRoot(root, *plan, *rootUnit);
  const int changed = forEachMethod(root, MethodScope::kRootMethods, [&](const VisitedMethod& m) {
    torch::jit::Function* function = m.function;
    const std::shared_ptr<torch::jit::Graph>& graph = m.graph;
    torch::jit::Block* body = graph->block();
    bool wrapped = false;
    for (torch::jit::Node* node : body->nodes()) wrapped = wrapped || node->kind() == ops::checkRank();
    if (wrapped) return 0;
    torch::jit::Value* self = graph->inputs().at(0);
    {
      torch::jit::WithInsertPoint atStart(*body->nodes().begin());
      auto* rank = graph->insertGetAttr(self, kRankAttr);
      auto* world = graph->insertGetAttr(self, kWorldSizeAttr);
      auto* sha = graph->insertGetAttr(self, kManifestHashAttr);
      std::vector<torch::jit::Value*> checked{rank, world, sha};
      if (root.hasattr(kShardGroupSizeAttr)) checked.insert(checked.begin() + 2, graph->insertGetAttr(self, kShardGroupSizeAttr));
      auto* check = graph->insertNode(graph->create(ops::checkRank(), checked, 0));
      if (!replicated.empty()) {
        std::vector<torch::jit::Value*> reads;
        for (const auto& path : replicated) {
          torch::jit::Value* read = insertGetAttrChain(*graph, self, path);
          if (!read->type()->isSubtypeOf(*c10::TensorType::get())) read = graph->insertUncheckedCast(read, c10::TensorType::get());
          reads.push_back(read);
        }
        auto* list = graph->insertNode(graph->createList(c10::TensorType::get(), reads))->output();
        graph->insertNode(graph->create(ops::replicatedParams(), {list}, 0));
      }
      auto reader = readers.find(function->name());
      bool registered = rootUnit && rootUnit->hasForwardMethod(function->name());
      if (registered || reader != readers.end()) {
        torch::jit::WithInsertPoint afterCheck(check->next());
        GatherOp gather = insertUnitGather(*graph, self, *rootUnit, context.options().paramDtype);
        torch::jit::WithInsertPoint atEnd(body->return_node());
        insertReshard(*graph, gather);
        insertBackwardHook(*graph, gather, graph->outputs(), graph->inputs().slice(1), context.options().maxUnshardedBytes);
        context.diagnostics().remark(
            kPassName, "entry method " + function->name() + " wrapped in the root unit's gather/reshard" +
                           (registered ? "" : " (not a forward method, but reads parameter '" + reader->second +
                                                  "' of the root's group)"));
        context.statistics().add("call sites rewritten", 1);
      }
    }
    return 1;
  });
  return changed > 0;
}

PassInfo wrapEntryMethodsPass() {
  return {kPassName, "rank check in root methods; root unit gathered in those that read it", wrapEntryMethods};
}

}  // namespace fsdp_opt
