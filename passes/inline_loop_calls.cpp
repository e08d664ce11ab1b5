// Pass inline-loop-calls: makes the gathers a loop runs visible in the loop's own graph.
//
// `generate` calls `self.forward` inside its decoding loop; the per-layer gathers live in
// forward's graph, where no loop is in sight. This pass inlines, into the body of every
// prim::Loop, each method call whose callee (directly or through its own calls) contains an
// fsdp::all_gather, repeating until no such call is left or a depth limit is reached. The callee's
// `self` becomes the caller's module value, so every prim::GetAttr chain keeps naming the same
// instance: inlining is instance-correct even where types are shared. The callee stays as it
// is for its other callers.
// It also inlines, wherever it is called, a method that runs a loop whose trips may differ
// between ranks and whose body issues collectives (a unit's registered `generate` with a `break`
// on eos, called from the root's forward). In the callee's own graph such a loop must agree
// across ranks every iteration, since nothing there says who holds its units; in the entry
// method's graph the units plan-gather-lifetimes holds for the whole call are in view, the
// loop's gathers of them go, and so does the agreement.
// Assumes: insert-unit-gathers and wrap-entry-methods ran. Guarantees: semantics unchanged;
// the inlined copy keeps its check_rank and gathers (eliminate-redundant-gathers removes those
// made redundant by the caller's own).
//
//   before: prim::Loop: %y = prim::CallMethod[name="forward"](%self, %x)
//   after:  prim::Loop: fsdp::check_rank(...); %g = fsdp::all_gather(...block 0...); ...
#include <fsdp_opt/passes/passes.h>

#include "ir/fsdp_ops.h"
#include "ir/inline_calls.h"
#include "ir/module_tree.h"

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "inline-loop-calls";

bool insideLoop(torch::jit::Node* node) {
  for (torch::jit::Block* block = node->owningBlock(); block->owningNode(); block = block->owningNode()->owningBlock()) {
    if (block->owningNode()->kind() == c10::prim::Loop) return true;
  }
  return false;
}

}  // namespace

bool inlineLoopCalls(PassContext& context) {
  CollectiveReach reach;
  DivergentLoopReach divergentLoops(reach);
  const int inlined = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    auto callees = inlineCalls(m.graph->block(), [&](torch::jit::Node* call) {
      // A rewritten call site keeps its call: the gather around it is already in this graph.
      bool rewritten = call->next() && call->next()->kind() == ops::reshard();
      if (divergentLoops.reaches(calleeOf(call))) {
        context.diagnostics().remark(kPassName, "inlined " + calleeOf(call)->qualname().qualifiedName() +
                                                    " (its loop's trips may differ between ranks) into " + m.label);
        return true;
      }
      if (!(insideLoop(call) && !rewritten && reach.reaches(calleeOf(call)))) return false;
      context.diagnostics().remark(kPassName, "inlined " + calleeOf(call)->qualname().qualifiedName() +
                                                  " into the loop of " + m.label);
      return true;
    });
    return static_cast<int>(callees.size());
  });
  return inlined > 0;
}

PassInfo inlineLoopCallsPass() {
  return {kPassName, "inline method calls in loop bodies that reach a gather, and methods with rank-divergent loops", inlineLoopCalls};
}

}  // namespace fsdp_opt
