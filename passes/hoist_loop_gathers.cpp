// Pass hoist-loop-gathers: gather a unit once per loop instead of once per iteration.
//
// In `generate`, every decoding step calls every layer, so per-call gathers re-gather the whole
// model per token. plan-gather-lifetimes holds what fits for the whole call; this pass widens
// what did not fit to a loop. For each prim::Loop in a method of the root (innermost loops
// first, so a gather can leave a nest loop by loop), the gathers directly in the loop body
// whose operands are loop-invariant (prim::GetAttr chains from values defined outside the loop)
// move before the loop, and their reshards after it, costliest first (their collectives inside
// the loop, weighted by loop depth), as long as the static peak of unsharded bytes with them
// held across the loop stays within --max-unsharded-bytes. Cost and peak are the planner's
// (ir/gather_cost.h): one instance walk of the entry method per loop, so units nested in
// others, gathers in called methods and what the caller holds are all counted exactly. Units that
// do not fit keep their per-iteration gathers. Loops outside root methods are left alone (after
// inline-loop-calls, the loops that gather are in root methods). A loop that may reassign a
// submodule or a parameter (prim::SetAttr, in its body or a method it calls) keeps every
// gather: the chains the gather reads could reach other tensors in a later iteration.
// Assumes: inline-loop-calls and eliminate-redundant-gathers ran (gathers of the loop are in
// this graph, none redundant). Guarantees: pairing kept (both ends move to the loop's block).
//
//   before: prim::Loop { %g = fsdp::all_gather(...); call; fsdp::reshard(%g) }
//   after:  %g = fsdp::all_gather(...); prim::Loop { call }; fsdp::reshard(%g)
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/gather_cost.h"
#include "ir/module_tree.h"
#include "ir/module_writes.h"

#include <limits>
#include <map>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "hoist-loop-gathers";

class LoopHoister {
 public:
  LoopHoister(PassContext& context, const FsdpPlan& plan, torch::jit::Function* function, std::string where)
      : context_(context), plan_(plan), function_(function), graph_(*graphOf(function)),
        gathers_(graph_, "", plan), where_(std::move(where)) {
    budget_ = context.options().maxUnshardedBytes.value_or(std::numeric_limits<int64_t>::max());
  }

  int run() {
    std::vector<torch::jit::Node*> loops;
    collectLoopsPostOrder(graph_.block(), loops);
    int hoisted = 0;
    for (torch::jit::Node* loop : loops) hoisted += hoistFrom(loop);
    return hoisted;
  }

 private:
  static void collectLoopsPostOrder(torch::jit::Block* block, std::vector<torch::jit::Node*>& loops) {
    for (torch::jit::Node* node : block->nodes()) {
      for (torch::jit::Block* nested : node->blocks()) collectLoopsPostOrder(nested, loops);
      if (node->kind() == c10::prim::Loop) loops.push_back(node);
    }
  }

  static bool isInside(torch::jit::Node* node, torch::jit::Node* loop) {
    for (torch::jit::Block* block = node->owningBlock(); block->owningNode(); block = block->owningNode()->owningBlock()) {
      if (block->owningNode() == loop) return true;
    }
    return false;
  }

  int hoistFrom(torch::jit::Node* loop) {
    torch::jit::Block* body = loop->blocks()[0];
    std::vector<GatherOp> candidates;
    std::vector<GatherOp> inside = gathersIn(body);  // every gather in the loop, nested blocks too
    for (const GatherOp& gather : inside) {
      if (!gather.isSplit() && gather.issue()->owningBlock() == body) candidates.push_back(gather);
    }
    if (candidates.empty()) return 0;
    if (assignments_.in(loop)) {
      context_.diagnostics().remark(kPassName, "no gather hoisted out of a loop in " + where_ +
                                                   ": the loop may reassign a submodule or a parameter (prim::SetAttr)");
      return 0;
    }
    // The program as the previous loops left it; the candidates' own gathers are in it.
    GatherCost cost(context_.module(), plan_, function_->name());
    std::stable_sort(candidates.begin(), candidates.end(), [&](const GatherOp& a, const GatherOp& b) {
      const Unit* ua = gathers_.unit(a);
      const Unit* ub = gathers_.unit(b);
      return (ua ? cost.costWithin(ua, loop) : 0) > (ub ? cost.costWithin(ub, loop) : 0);
    });
    std::map<torch::jit::Node*, std::set<const Unit*>> across{{loop, {}}};
    int moved = 0;
    for (const GatherOp& candidate : candidates) {
      torch::jit::Node* gather = candidate.issue();
      const Unit* unit = gathers_.unit(candidate);
      torch::jit::Node* reshard = candidate.reshard();
      // Loop-invariant: everything it reads inside the loop is a read of values from outside.
      auto reads = operandReadsIn(gather, [&](torch::jit::Node* n) { return isInside(n, loop); });
      if (!unit || !reshard || !reads) continue;
      std::set<torch::jit::Node*> operands = std::move(*reads);
      std::map<torch::jit::Node*, std::set<const Unit*>> trial = across;
      trial[loop].insert(unit);
      int64_t peak = cost.peak({}, trial);
      if (peak > budget_) {
        context_.diagnostics().remark(kPassName, "unit '" + displayPath(unit->path) + "' kept per iteration in " +
                                                     where_ + ": hoisting it would reach " +
                                                     std::to_string(peak) + " unsharded bytes, over the budget of " +
                                                     std::to_string(budget_));
        continue;
      }
      operands.insert(gather);
      std::vector<torch::jit::Node*> ordered;
      for (torch::jit::Node* node : body->nodes()) {
        if (operands.count(node)) ordered.push_back(node);
      }
      for (torch::jit::Node* node : ordered) node->moveBefore(loop);
      reshard->moveAfter(loop);
      across = std::move(trial);
      ++moved;
      context_.diagnostics().remark(kPassName, "gather of unit '" + displayPath(unit->path) +
                                                   "' hoisted out of a loop in " + where_ +
                                                   " (static peak " + std::to_string(peak) + " bytes)");
    }
    return moved;
  }

  PassContext& context_;
  const FsdpPlan& plan_;
  torch::jit::Function* function_;
  torch::jit::Graph& graph_;
  GraphGathers gathers_;
  ModuleAssignments assignments_;
  std::string where_;
  int64_t budget_;
};

}  // namespace

bool hoistLoopGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  const int hoisted = forEachMethod(context.module(), MethodScope::kRootMethods, [&](const VisitedMethod& m) {
    return LoopHoister(context, *plan, m.function, m.label).run();
  });
  context.statistics().add("gathers hoisted out of loops", hoisted);
  return hoisted > 0;
}

PassInfo hoistLoopGathersPass() {
  return {kPassName, "gather loop-invariant units once per loop, within --max-unsharded-bytes", hoistLoopGathers};
}

}  // namespace fsdp_opt
