// Pass eliminate-redundant-gathers: a unit already unsharded is not gathered again.
//
// Within one graph, a gather whose units are all held open, until after its own reshard, by
// gathers around it (coveredGathers, support/fsdp_ops.h) is deleted with its reshard: the
// enclosing gathers cover every use, on every path, since gather and reshard pair within one
// block. plan-gather-lifetimes relies on it to drop the per-call gathers of the units it holds.
// Units are resolved from the parameters a gather reads (passes/support/fsdp_ops.h), so copies
// made by inlining match their caller's gathers. Across calls, insert-unit-gathers already skips
// self-calls from forward methods; inline-loop-calls brings the other cases into one graph.
// A graph that may reassign a submodule or a parameter (prim::SetAttr, there or in a method it
// calls) is left alone: one chain could then reach another unit's tensors than before.
// Assumes: gathers come from insert-unit-gathers/wrap-entry-methods (paired in one block).
// Guarantees: pairing kept; fewer collectives, never more unsharded memory.
//
//   before: %a = fsdp::all_gather(<root>) ... %b = fsdp::all_gather(<root>) ... fsdp::reshard(%b)
//   after:  %a = fsdp::all_gather(<root>) ...
#include <fsdp_opt/passes.h>

#include "support/fsdp_ops.h"
#include "support/inline_calls.h"
#include "support/module_tree.h"
#include "support/module_writes.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "eliminate-redundant-gathers";

}  // namespace

bool eliminateRedundantGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  int removed = 0;
  ModuleAssignments assignments;
  for (const auto& [type, path] : distinctModuleTypes(context.module())) {
    for (torch::jit::Function* function : type->methods()) {
      auto graph = graphOf(function);
      std::string where = type->name()->qualifiedName() + "::" + function->name();
      if (removeRepeatedRankChecks(*graph) > 0) torch::jit::EliminateDeadCode(graph);
      std::vector<GatherOp> redundant = coveredGathers(graph->block(), GraphGathers(*graph, path, *plan));
      if (!redundant.empty() && assignments.inBlock(graph->block())) {
        context.diagnostics().remark(kPassName, "gathers in " + where +
                                                    " kept: it may reassign a submodule or a parameter (prim::SetAttr)");
        continue;
      }
      for (const GatherOp& gather : redundant) removeGather(gather);
      removed += static_cast<int>(redundant.size());
      if (!redundant.empty()) {
        torch::jit::EliminateDeadCode(graph);  // the removed gathers' operand chains
        context.diagnostics().remark(kPassName, std::to_string(redundant.size()) +
                                                    " redundant gather(s) removed in " + where);
      }
    }
  }
  context.statistics().add("redundant gathers removed", removed);
  return removed > 0;
}

PassInfo eliminateRedundantGathersPass() {
  return {kPassName, "drop gathers of units already unsharded on every path", eliminateRedundantGathers};
}

}  // namespace fsdp_opt
