// Pass plan-gather-lifetimes: each unit stays gathered over the widest span the budget allows.
//
// Hoisting out of one loop, dropping a gather nested in another in the same graph, merging
// neighbours: each local rewrite is defeated by some way of spelling a decoding loop (`break` on
// eos puts the calls in a prim::If arm; a KV cache splits the work between a `prefill` method and
// a cached `step`; a traced Hugging Face model gathers its blocks inside its own `forward`).
// This pass looks at a whole entry method instead. Its cost model (ir/gather_cost.h, shared
// with hoist-loop-gathers) walks every call from the entry method, through loops, branches,
// other methods, traced submodules and units nested in units, and gives for each unit
//   - its cost: the collectives one call issues for it, each weighted kLoopWeight^depth by the
//     loops around it (a gather in a nested decoding loop outweighs any number of single ones);
//   - the sets of units open together wherever a gather opens one (the static peak's points).
// Units are then taken greedily, costliest first, into the set H gathered once at the top of
// the entry method and resharded at its end, while
//     bytes(H) + max over those points of bytes(open units not in H)  <=  --max-unsharded-bytes,
// which is exactly the static peak of the program with H held (a gather of a unit in H issues
// no collective and opens no new buffer: the runtime counts it as nested). With no budget every
// unit the method reaches is in H: one span, and bucket-gathers makes it as few collectives as
// --bucket-bytes allows (the gathers of H are adjacent, their reshards too). Units that do not
// fit keep their gathers, and hoist-loop-gathers may still widen them to a loop. The gathers
// now covered by H are removed by eliminate-redundant-gathers in this graph (and after
// inlining), and cost no collective at run time in the graphs of other methods.
// An entry method that may reassign a submodule or a parameter (prim::SetAttr, in its body or a
// method it calls) is left alone: a chain read at the top could reach other tensors later.
// Assumes: insert-unit-gathers and wrap-entry-methods ran, check-unsharded-budget accepted the
// budget, no scheduling pass ran yet. Guarantees: pairing kept (each added gather and its
// reshard are in the method's top block); the static peak stays within the budget; a raise is
// covered by reshard-on-raise, which runs later.
//
//   before: graph(%self, %idx, %n):  check_rank; %r = all_gather(<root>)
//             prim::Loop { prim::If { %b = all_gather(<blocks.0>); call; reshard(%b) } }
//             reshard(%r)
//   after:  graph(%self, %idx, %n):  check_rank; %r = all_gather(<root>); %h = all_gather(<blocks.0>)
//             prim::Loop { prim::If { %b = all_gather(<blocks.0>); call; reshard(%b) } }
//             reshard(%h); reshard(%r)
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/gather_cost.h"
#include "ir/module_tree.h"
#include "ir/module_writes.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "plan-gather-lifetimes";

// The method's prologue: the rank check, the replicated parameters' note, the root unit's own
// gather (wrap-entry-methods) and the reads they take. The held gathers go right after it, so no
// collective comes before the rank check and the root's gather stays first.
struct Prologue {
  torch::jit::Node* end = nullptr;  // the first node after it
  std::vector<GatherOp> gathers;    // the gathers in it, held for the whole call already
};

// Whether a gather of the body's top block stays open to its end: only reshards, backward hooks
// and operand reads come after its reshard.
bool spansBody(const GatherOp& gather, torch::jit::Block* body) {
  torch::jit::Node* reshard = gather.reshard();
  if (!reshard || reshard->owningBlock() != body) return false;
  for (torch::jit::Node* node = reshard->next(); node != body->return_node(); node = node->next()) {
    if (node->kind() != ops::reshard() && !isBackwardHookPart(node) && !isOperandRead(node)) return false;
  }
  return true;
}

Prologue prologueOf(torch::jit::Block* body) {
  Prologue prologue;
  torch::jit::Node* node = *body->nodes().begin();
  for (; node != body->return_node(); node = node->next()) {
    auto kind = node->kind();
    if (kind == ops::allGather() && spansBody(*GatherOp::of(node), body)) {
      prologue.gathers.push_back(*GatherOp::of(node));
    } else if (!isOperandRead(node) && kind != ops::checkRank() && kind != ops::replicatedParams()) {
      break;
    }
  }
  // Operand reads right before the first gather that is not the prologue's are that gather's.
  while (node->prev() != body->param_node() && isOperandRead(node->prev())) node = node->prev();
  prologue.end = node;
  return prologue;
}

// Where the held gathers' reshards go: right before the first reshard of a prologue gather (the
// root's, at the end of the body), so they nest inside it and stay adjacent to it; at the end of
// the body when the prologue gathers nothing.
torch::jit::Node* epilogueStart(torch::jit::Block* body, const Prologue& prologue) {
  torch::jit::Node* first = body->return_node();
  for (const GatherOp& gather : prologue.gathers) {
    torch::jit::Node* reshard = gather.reshard();
    if (reshard && reshard->owningBlock() == body && reshard->isBefore(first)) first = reshard;
  }
  return first;
}

class EntryPlanner {
 public:
  EntryPlanner(PassContext& context, const FsdpPlan& plan, torch::jit::Function* function)
      : context_(context), plan_(plan), function_(function),
        where_(context.module().type()->name()->qualifiedName() + "::" + function->name()) {
    budget_ = context.options().maxUnshardedBytes.value_or(std::numeric_limits<int64_t>::max());
  }

  // Returns how many units are now held for the whole call.
  int run(ModuleAssignments& assignments) {
    auto graph = graphOf(function_);
    GatherCost model(context_.module(), plan_, function_->name());
    if (model.empty()) return 0;
    if (assignments.inBlock(graph->block())) {
      context_.diagnostics().remark(kPassName, "no gather planned in " + where_ +
                                                   ": it may reassign a submodule or a parameter (prim::SetAttr)");
      return 0;
    }
    const std::map<const Unit*, double> costs = model.costs();
    std::vector<std::pair<const Unit*, double>> byCost(costs.begin(), costs.end());
    std::stable_sort(byCost.begin(), byCost.end(), [&](const auto& a, const auto& b) {
      if (a.second != b.second) return a.second > b.second;
      return plan_.unitIndex.at(a.first->path) < plan_.unitIndex.at(b.first->path);
    });
    torch::jit::Block* body = graph->block();
    Prologue prologue = prologueOf(body);
    GraphGathers gathers(*graph, "", plan_);
    std::set<const Unit*> held;  // the prologue's units are held already
    for (const GatherOp& gather : prologue.gathers) {
      for (const Unit* unit : gathers.units(gather)) held.insert(unit);
    }
    std::vector<const Unit*> order;
    for (const auto& [unit, cost] : byCost) {
      if (held.count(unit)) continue;
      std::set<const Unit*> trial = held;
      trial.insert(unit);
      int64_t peak = model.peak(trial);
      if (peak > budget_) {
        context_.diagnostics().remark(kPassName, "unit '" + displayPath(unit->path) + "' not held for the call of " +
                                                     where_ + ": holding it would reach " + std::to_string(peak) +
                                                     " unsharded bytes, over the budget of " + std::to_string(budget_));
        continue;
      }
      held = std::move(trial);
      order.push_back(unit);
    }
    if (order.empty()) return 0;
    // Program order within the span: the bucket then reads as the model does.
    std::sort(order.begin(), order.end(), [&](const Unit* a, const Unit* b) {
      return plan_.unitIndex.at(a->path) < plan_.unitIndex.at(b->path);
    });
    insertHeldGathers(*graph, order, prologue.end, epilogueStart(body, prologue));
    context_.diagnostics().remark(kPassName, std::to_string(order.size()) + " unit(s) held for the whole call of " +
                                                 where_ + ": " + describe(order) + " (static peak " +
                                                 std::to_string(model.peak(held)) + " bytes)");
    return static_cast<int>(order.size());
  }

 private:
  void insertHeldGathers(torch::jit::Graph& graph, const std::vector<const Unit*>& units, torch::jit::Node* start,
                         torch::jit::Node* end) {
    torch::jit::Value* self = graph.inputs().at(0);
    for (const Unit* unit : units) {
      std::optional<GatherOp> gather;
      {
        torch::jit::WithInsertPoint before(start);
        torch::jit::Value* module = unit->path.empty() ? self : insertGetAttrChain(graph, self, unit->path);
        gather = insertUnitGather(graph, module, *unit, context_.options().paramDtype);
      }
      torch::jit::WithInsertPoint before(end);
      insertReshard(graph, *gather);
    }
  }

  static std::string describe(const std::vector<const Unit*>& units) {
    std::string text;
    for (const Unit* unit : units) text += (text.empty() ? "'" : ", '") + displayPath(unit->path) + "'";
    return text;
  }

  PassContext& context_;
  const FsdpPlan& plan_;
  torch::jit::Function* function_;
  std::string where_;
  int64_t budget_;
};

}  // namespace

bool planGatherLifetimes(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  ModuleAssignments assignments;
  // One method after another, each profiled on the program the previous ones left: a method that
  // calls another sees the other's held units in its peak (docs/passes.md, "Cost and limits").
  const int held = forEachMethod(context.module(), MethodScope::kRootMethods, [&](const VisitedMethod& m) {
    return EntryPlanner(context, *plan, m.function).run(assignments);
  });
  context.statistics().add("units held for a whole entry call", held);
  return held > 0;
}

PassInfo planGatherLifetimesPass() {
  return {kPassName, "hold units gathered for the whole entry call, costliest first, within --max-unsharded-bytes",
          planGatherLifetimes};
}

}  // namespace fsdp_opt
