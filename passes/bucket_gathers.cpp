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
#include <fsdp_opt/passes.h>
#include <fsdp_opt/pattern.h>

#include "support/fsdp_ops.h"
#include "support/module_tree.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <map>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "bucket-gathers";

bool isOperandRead(torch::jit::Node* node) {
  auto kind = node->kind();
  return kind == c10::prim::GetAttr || kind == c10::prim::ListConstruct || kind == c10::prim::Constant ||
         kind == c10::prim::unchecked_cast;
}

// The next fsdp op after `node` in its block, if only operand reads stand between them.
torch::jit::Node* nextAdjacent(torch::jit::Node* node, c10::Symbol kind) {
  for (torch::jit::Node* next = node->next(); next != node->owningBlock()->return_node(); next = next->next()) {
    if (next->kind() == kind) return next;
    if (!isOperandRead(next)) return nullptr;
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
      : context_(context), plan_(plan), graph_(graph), representative_(std::move(representative)),
        where_(std::move(where)) {}

  int run() {
    int merged = 0;
    bool changed = true;
    while (changed) {
      changed = false;
      std::vector<torch::jit::Node*> gathers;
      forEachNode(graph_.block(), [&](torch::jit::Node* node) {
        if (node->kind() == ops::allGather()) gathers.push_back(node);
      });
      for (torch::jit::Node* first : gathers) {
        torch::jit::Node* second = nextAdjacent(first, ops::allGather());
        if (!second) continue;
        torch::jit::Node* firstReshard = reshardOf(first);
        torch::jit::Node* secondReshard = reshardOf(second);
        if (!firstReshard || !secondReshard || !adjacentEitherWay(firstReshard, secondReshard)) continue;
        if (first->inputs().size() != second->inputs().size()) continue;  // different param dtypes
        if (first->inputs().size() > 3 && torch::jit::toIValue(first->input(3)) != torch::jit::toIValue(second->input(3))) continue;
        int64_t bytes = bytesOf(first) + bytesOf(second);
        if (bytes <= 0 || bytes > context_.options().bucketBytes) continue;
        merge(first, second, firstReshard, secondReshard, bytes);
        ++merged;
        changed = true;
        break;  // the node list is stale
      }
    }
    if (merged > 0) torch::jit::EliminateDeadCode(graph_.block());
    return merged;
  }

 private:
  int64_t bytesOf(torch::jit::Node* gather) {
    auto known = bucketBytes_.find(gather);
    if (known != bucketBytes_.end()) return known->second;
    torch::jit::Value* module = gatheredModule(gather);
    if (!module) return -1;
    auto path = pathFromSelf(module, graph_.inputs().at(0));
    const Unit* unit = path ? plan_.unitAt(joinPath(representative_, *path)) : nullptr;
    return unit ? unit->bytes() : -1;
  }

  void merge(torch::jit::Node* first, torch::jit::Node* second, torch::jit::Node* firstReshard,
             torch::jit::Node* secondReshard, int64_t bytes) {
    std::vector<torch::jit::Value*> params;
    for (torch::jit::Node* gather : {first, second}) {
      for (torch::jit::Value* param : gather->input(0)->node()->inputs()) params.push_back(param);
    }
    std::vector<int64_t> rows;
    for (torch::jit::Node* gather : {first, second}) {
      for (int64_t r : torch::jit::toIValue(gather->input(1))->toIntVector()) rows.push_back(r);
    }
    torch::jit::Node* lastReshard = firstReshard->isBefore(secondReshard) ? secondReshard : firstReshard;
    torch::jit::Node* merged;
    {
      torch::jit::WithInsertPoint at(second);
      auto* list = graph_.insertNode(graph_.createList(c10::TensorType::get(), params))->output();
      auto* rowsValue = graph_.insertConstant(c10::IValue(rows));
      auto* separator = graph_.insertConstant(c10::IValue(std::string(", ")));
      auto* names = graph_.insertNode(graph_.createList(c10::StringType::get(), {first->input(2), second->input(2)}))->output();
      auto* unitNames = graph_.insert(c10::Symbol::fromQualString("aten::join"), {separator, names});
      std::vector<torch::jit::Value*> operands{list, rowsValue, unitNames};
      if (first->inputs().size() > 3) operands.push_back(first->input(3));
      merged = graph_.insertNode(graph_.create(ops::allGather(), operands, 1));
      merged->output()->setType(c10::ListType::ofTensors());
    }
    {
      torch::jit::WithInsertPoint at(lastReshard);
      graph_.insertNode(graph_.create(ops::reshard(), {merged->output(), merged->input(2)}, 0));
    }
    firstReshard->destroy();
    secondReshard->destroy();
    second->destroy();
    first->destroy();
    bucketBytes_[merged] = bytes;
    context_.diagnostics().remark(kPassName, "merged two adjacent gathers into one collective of " +
                                                 std::to_string(bytes) + " bytes in " + where_);
  }

  PassContext& context_;
  const FsdpPlan& plan_;
  torch::jit::Graph& graph_;
  std::string representative_;
  std::string where_;
  std::map<torch::jit::Node*, int64_t> bucketBytes_;
};

}  // namespace

bool bucketGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  int merged = 0;
  if (context.options().bucketBytes <= 0) {
    context.statistics().add("gathers merged into buckets", 0);
    return false;
  }
  for (const auto& [type, representative] : distinctModuleTypes(context.module())) {
    for (torch::jit::Function* function : type->methods()) {
      auto graph = graphOf(function);
      merged += Bucketer(context, *plan, *graph, representative,
                         type->name()->qualifiedName() + "::" + function->name())
                    .run();
    }
  }
  context.statistics().add("gathers merged into buckets", merged);
  return merged > 0;
}

PassInfo bucketGathersPass() {
  return {kPassName, "merge adjacent gathers into one collective up to --bucket-bytes", bucketGathers};
}

}  // namespace fsdp_opt
