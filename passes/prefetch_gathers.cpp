// Pass prefetch-gathers: start the next unit's gather before the current unit's call.
//
// Where units are gathered one after another in one block (gather A, call A, reshard A,
// gather B, call B, ...), B's collective can run while A computes. The pass splits B's gather
// into fsdp::all_gather_start, placed right after A's gather (so before A's call), and
// fsdp::all_gather_wait at B's old place, just before its use; B's operand reads (pure
// prim::GetAttr chains) move up with the start. One gather is in flight at a time, and only
// while the static peak (units open around the pair + footprints of A and B, a unit's footprint
// counting the units nested in it) stays within --max-unsharded-bytes, so the budget bounds
// prefetch memory too; under a budget only root methods are prefetched, since elsewhere the
// callers' open gathers are not in view. Runtime: the start allocates B's full buffers, so they
// count from then. No prefetch across code that may reassign a submodule or a parameter
// (prim::SetAttr, there or in a method it calls): B's operand reads would run before it.
// Assumes: bucket-gathers ran (buckets are final); gathers paired in one block.
// Guarantees: every wait follows its start in the same block and feeds exactly one reshard.
//
//   before: %a = all_gather(A); call A; reshard(%a); %b = all_gather(B); call B; reshard(%b)
//   after:  %a = all_gather(A); %h = all_gather_start(B); call A; reshard(%a);
//           %b = all_gather_wait(%h); call B; reshard(%b)
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/module_tree.h"
#include "ir/module_writes.h"

#include <algorithm>
#include <limits>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "prefetch-gathers";

class Prefetcher {
 public:
  Prefetcher(PassContext& context, const FsdpPlan& plan, torch::jit::Graph& graph,
             std::string representative, std::string where)
      : context_(context), plan_(plan), graph_(graph), gathers_(graph, std::move(representative), plan),
        where_(std::move(where)),
        budget_(context.options().maxUnshardedBytes.value_or(std::numeric_limits<int64_t>::max())) {}

  int run() {
    std::vector<torch::jit::Block*> blocks;
    collectBlocks(graph_.block(), blocks);
    int split = 0;
    for (torch::jit::Block* block : blocks) split += prefetchIn(block);
    return split;
  }

 private:
  static void collectBlocks(torch::jit::Block* block, std::vector<torch::jit::Block*>& blocks) {
    blocks.push_back(block);
    for (torch::jit::Node* node : block->nodes()) {
      for (torch::jit::Block* nested : node->blocks()) collectBlocks(nested, blocks);
    }
  }

  // Linear in the block's nodes: the block's open gathers are tracked while walking its gathers
  // in order (a model of 1024 units is one block of 1024 gathers; bench/pass_scaling.py).
  int prefetchIn(torch::jit::Block* block) {
    std::vector<GatherOp> gathers;  // every gather of the block, in the order of its result
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == ops::allGather() || node->kind() == ops::gatherWait()) gathers.push_back(*GatherOp::of(node));
    }
    if (gathers.size() < 2) return 0;
    const int64_t outerOpen = block->owningNode() ? gathers_.openBytesAt(block->owningNode()) : 0;
    // Gathers before `previous` not resharded yet at it. Reshards do not move, and `previous`
    // only moves forward, so one resharded before it stays closed for the rest of the walk.
    std::vector<std::pair<torch::jit::Node*, int64_t>> open;  // reshard, own bytes
    int64_t openBytes = 0;
    int split = 0;
    for (size_t i = 1; i < gathers.size(); ++i) {
      torch::jit::Node* previous = gathers[i - 1].result();
      if (i >= 2) {
        torch::jit::Node* earlierReshard = gathers[i - 2].reshard();
        if (earlierReshard) {
          int64_t bytes = gathers_.bytes(gathers[i - 2]);
          open.emplace_back(earlierReshard, bytes);
          openBytes += bytes;
        }
      }
      for (size_t k = 0; k < open.size();) {
        if (open[k].first->isBefore(previous)) {
          openBytes -= open[k].second;
          open[k] = open.back();
          open.pop_back();
        } else {
          ++k;
        }
      }
      if (gathers[i].isSplit()) continue;
      torch::jit::Node* gather = gathers[i].issue();
      torch::jit::Node* previousReshard = gathers[i - 1].reshard();
      if (!previousReshard || !previousReshard->isBefore(gather)) continue;  // nested, not sequential
      const Unit* previousUnit = gathers_.unit(gathers[i - 1]);
      const Unit* unit = gathers_.unit(gathers[i]);
      if (!previousUnit || !unit) continue;
      int64_t peak = outerOpen + openBytes + plan_.footprintBytes(*previousUnit) + plan_.footprintBytes(*unit);
      if (peak > budget_) {
        context_.diagnostics().remark(kPassName, "no prefetch of unit '" + displayPath(unit->path) + "' in " + where_ +
                                                     ": " + std::to_string(peak) + " bytes in flight would exceed the budget of " +
                                                     std::to_string(budget_));
        continue;
      }
      // Only the reads between `previous` and the gather move with it; anything else they
      // depend on there keeps the gather where it is.
      auto reads = operandReadsIn(gather, [&](torch::jit::Node* n) {
        return n->owningBlock() == gather->owningBlock() && previous->isBefore(n);
      });
      if (!reads) continue;
      std::set<torch::jit::Node*> operands = std::move(*reads);
      if (assignments_.between(previous, gather)) {
        context_.diagnostics().remark(kPassName, "no prefetch of unit '" + displayPath(unit->path) + "' in " + where_ +
                                                     ": the code before it may reassign a submodule or a parameter (prim::SetAttr)");
        continue;
      }
      std::vector<torch::jit::Node*> ordered(operands.begin(), operands.end());
      std::sort(ordered.begin(), ordered.end(),
                [](torch::jit::Node* a, torch::jit::Node* b) { return a->isBefore(b); });
      torch::jit::Node* insertAfter = previous;
      for (torch::jit::Node* node : ordered) {
        node->moveAfter(insertAfter);
        insertAfter = node;
      }
      gathers[i] = splitGather(graph_, gathers[i], insertAfter);
      ++split;
      context_.diagnostics().remark(kPassName, "unit '" + displayPath(unit->path) + "' prefetched during unit '" +
                                                   displayPath(previousUnit->path) + "' in " + where_ +
                                                   " (static peak " + std::to_string(peak) + " bytes)");
    }
    return split;
  }

  PassContext& context_;
  const FsdpPlan& plan_;
  torch::jit::Graph& graph_;
  GraphGathers gathers_;
  ModuleAssignments assignments_;
  std::string where_;
  int64_t budget_;
};

}  // namespace

bool prefetchGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  // Under a budget, only root methods: elsewhere the callers' open gathers are not in view, so
  // the peak could not be bounded (as for hoist-loop-gathers).
  const MethodScope scope = context.options().maxUnshardedBytes ? MethodScope::kRootMethods : MethodScope::kEveryType;
  const int split = forEachMethod(context.module(), scope, [&](const VisitedMethod& m) {
    return Prefetcher(context, *plan, *m.graph, m.modulePath, m.label).run();
  });
  context.statistics().add("gathers prefetched", split);
  return split > 0;
}

PassInfo prefetchGathersPass() {
  return {kPassName, "start the next unit's gather before the current unit's call (start/wait)", prefetchGathers};
}

}  // namespace fsdp_opt
