// Pass bucket-gathers: one collective for adjacent gathers of small units.
//
// Each collective has a fixed cost (a Gloo round trip, an NCCL launch) that dominates for small
// units. Two gathers are merged when nothing but their operand reads (prim::GetAttr,
// prim::ListConstruct, prim::Constant) stands between them, their reshards are likewise
// adjacent in the same block, and the bucket stays at or below --bucket-bytes. Merging then
// changes no lifetime: both units were unsharded over the same span already. The typical case is
// the gathers hoist-loop-gathers put before a decoding loop, and the root's entry gather next to
// them. The merged op gathers all parameters in ONE collective; its unit string lists the units.
// Assumes: gathers paired in one block (verify-fsdp). Guarantees: pairing kept; idempotent.
//
//   before: %a = fsdp::all_gather(%pa, %ra, %ua)  %b = fsdp::all_gather(%pb, %rb, %ub)
//           ... fsdp::reshard(%b, %ub)  fsdp::reshard(%a, %ua)
//   after:  %ab = fsdp::all_gather(%pa ++ %pb, %ra ++ %rb, "ua, ub") ... fsdp::reshard(%ab, ...)
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/module_tree.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>


namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "bucket-gathers";

// The next fsdp op after `node` in its block, if only operand reads (and backward hooks, which
// compute nothing in forward) stand between them.
torch::jit::Node* nextAdjacent(torch::jit::Node* node, c10::Symbol kind) {
  for (torch::jit::Node* next = node->next(); next != node->owningBlock()->return_node(); next = next->next()) {
    if (next->kind() == kind) return next;
    if (!isOperandRead(next) && !isBackwardHookPart(next)) return nullptr;
  }
  return nullptr;
}

bool adjacentEitherWay(torch::jit::Node* a, torch::jit::Node* b) {
  if (a->owningBlock() != b->owningBlock()) return false;
  return nextAdjacent(a, ops::reshard()) == b || nextAdjacent(b, ops::reshard()) == a;
}

class Bucketer {
 public:
  Bucketer(PassContext& context, const FsdpPlan& plan, torch::jit::Graph& graph, std::string representative,
           std::string where)
      : context_(context), graph_(graph), gathers_(graph, std::move(representative), plan),
        where_(std::move(where)) {}

  int run() {
    int merged = 0;
    bool changed = true;
    while (changed) {
      changed = false;
      for (const GatherOp& first : gathersIn(graph_.block())) {
        if (first.isSplit()) continue;
        torch::jit::Node* next = nextAdjacent(first.issue(), ops::allGather());
        if (!next) continue;
        GatherOp second = *GatherOp::of(next);
        torch::jit::Node* firstReshard = first.reshard();
        torch::jit::Node* secondReshard = second.reshard();
        if (!firstReshard || !secondReshard || !adjacentEitherWay(firstReshard, secondReshard)) continue;
        if (!sameDtype(first, second)) continue;
        int64_t bytes = gathers_.bytes(first) + gathers_.bytes(second);
        if (gathers_.units(first).empty() || gathers_.units(second).empty() || bytes > context_.options().bucketBytes) {
          continue;
        }
        mergeGathers(graph_, first, second);
        context_.diagnostics().remark(kPassName, "merged two adjacent gathers into one collective of " +
                                                     std::to_string(bytes) + " bytes in " + where_);
        ++merged;
        changed = true;
        break;  // the gathers listed are stale
      }
    }
    if (merged > 0) torch::jit::EliminateDeadCode(graph_.block());
    return merged;
  }

 private:
  static bool sameDtype(const GatherOp& a, const GatherOp& b) {
    if (!a.paramDtype() || !b.paramDtype()) return !a.paramDtype() && !b.paramDtype();
    return torch::jit::toIValue(a.paramDtype()) == torch::jit::toIValue(b.paramDtype());
  }

  PassContext& context_;
  torch::jit::Graph& graph_;
  GraphGathers gathers_;
  std::string where_;
};

}  // namespace

bool bucketGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  if (context.options().bucketBytes <= 0) {
    context.statistics().add("gathers merged into buckets", 0);
    return false;
  }
  const int merged = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    return Bucketer(context, *plan, *m.graph, m.modulePath, m.label).run();
  });
  context.statistics().add("gathers merged into buckets", merged);
  return merged > 0;
}

PassInfo bucketGathersPass() {
  return {kPassName, "merge adjacent gathers into one collective up to --bucket-bytes", bucketGathers};
}

}  // namespace fsdp_opt
