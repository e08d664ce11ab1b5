// Pass eliminate-redundant-gathers: a unit already unsharded is not gathered again.
//
// Within one graph, a gather whose units are all held open, until after its own reshard, by
// gathers around it (coveredGathers, ir/fsdp_ops.h) is deleted with its reshard: the
// enclosing gathers cover every use, on every path, since gather and reshard pair within one
// block. plan-gather-lifetimes relies on it to drop the per-call gathers of the units it holds.
// Units are resolved from the parameters a gather reads (passes/ir/fsdp_ops.h), so copies
// made by inlining match their caller's gathers. Across calls, insert-unit-gathers already skips
// self-calls from forward methods; inline-loop-calls brings the other cases into one graph.
// A graph that may reassign a submodule or a parameter (prim::SetAttr, there or in a method it
// calls) is left alone: one chain could then reach another unit's tensors than before.
// Assumes: gathers come from insert-unit-gathers/wrap-entry-methods (paired in one block).
// Guarantees: pairing kept; fewer collectives, never more unsharded memory.
//
//   before: %a = fsdp::all_gather(<root>) ... %b = fsdp::all_gather(<root>) ... fsdp::reshard(%b)
//   after:  %a = fsdp::all_gather(<root>) ...
#include <fsdp_opt/passes/passes.h>

#include "ir/fsdp_ops.h"
#include "ir/inline_calls.h"
#include "ir/module_tree.h"
#include "ir/module_writes.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "eliminate-redundant-gathers";

}  // namespace

bool eliminateRedundantGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  ModuleAssignments assignments;
  const int removed = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    if (removeRepeatedRankChecks(*m.graph) > 0) torch::jit::EliminateDeadCode(m.graph);
    std::vector<GatherOp> redundant = coveredGathers(m.graph->block(), GraphGathers(*m.graph, m.modulePath, *plan));
    if (redundant.empty()) return 0;
    if (assignments.inBlock(m.graph->block())) {
      context.diagnostics().remark(kPassName, "gathers in " + m.label +
                                                  " kept: it may reassign a submodule or a parameter (prim::SetAttr)");
      return 0;
    }
    for (const GatherOp& gather : redundant) removeGather(gather);
    torch::jit::EliminateDeadCode(m.graph);  // the removed gathers' operand chains
    context.diagnostics().remark(kPassName, std::to_string(redundant.size()) + " redundant gather(s) removed in " +
                                                m.label);
    return static_cast<int>(redundant.size());
  });
  context.statistics().add("redundant gathers removed", removed);
  return removed > 0;
}

PassInfo eliminateRedundantGathersPass() {
  return {kPassName, "drop gathers of units already unsharded on every path", eliminateRedundantGathers};
}

}  // namespace fsdp_opt
