// Pass eliminate-redundant-gathers: a unit already unsharded is not gathered again.
//
// Within one graph, walks blocks in order keeping the units whose gather is open (gathered, not
// yet resharded) on the path to each point: enclosing blocks' gathers are open in nested blocks.
// A gather of a unit that is already open, with its reshard, is deleted: the enclosing gather
// covers every use, on every path, since gather and reshard pair within one block. Units are
// identified by the prim::GetAttr chain of the module they are read from, so copies made by
// inlining match their caller's gathers. Across calls, insert-unit-gathers already skips
// self-calls from forward methods; inline-loop-calls brings the other cases into one graph.
// Assumes: gathers come from insert-unit-gathers/wrap-entry-methods (paired in one block).
// Guarantees: pairing kept; fewer collectives, never more unsharded memory.
//
//   before: %a = fsdp::all_gather(<root>) ... %b = fsdp::all_gather(<root>) ... fsdp::reshard(%b)
//   after:  %a = fsdp::all_gather(<root>) ...
#include <fsdp_opt/passes.h>

#include "support/fsdp_ops.h"
#include "support/module_tree.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <map>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "eliminate-redundant-gathers";

void collectRedundant(torch::jit::Block* block, std::map<std::string, int> open,
                      std::vector<torch::jit::Node*>& redundant) {
  std::map<torch::jit::Node*, std::string> openedHere;
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == ops::allGather()) {
      torch::jit::Value* module = gatheredModule(node);
      if (module) {
        std::string key = moduleChainKey(module);
        if (open[key] > 0) {
          redundant.push_back(node);
        } else {
          ++open[key];
          openedHere[node] = key;
        }
      }
    } else if (node->kind() == ops::reshard()) {
      auto opened = openedHere.find(node->input(0)->node());
      if (opened != openedHere.end()) --open[opened->second];
    }
    for (torch::jit::Block* nested : node->blocks()) collectRedundant(nested, open, redundant);
  }
}

// Copies of an entry prologue that inlining put after the graph's own: the first check covers
// the whole call.
int removeRepeatedRankChecks(torch::jit::Graph& graph) {
  torch::jit::Node* first = nullptr;
  for (torch::jit::Node* node : graph.block()->nodes()) {
    if (node->kind() == ops::checkRank()) {
      first = node;
      break;
    }
  }
  if (!first) return 0;
  std::vector<torch::jit::Node*> repeated;
  forEachNode(graph.block(), [&](torch::jit::Node* node) {
    if (node->kind() == ops::checkRank() && node != first) repeated.push_back(node);
  });
  for (torch::jit::Node* node : repeated) node->destroy();
  return static_cast<int>(repeated.size());
}

}  // namespace

bool eliminateRedundantGathers(PassContext& context) {
  int removed = 0;
  for (const auto& [type, path] : distinctModuleTypes(context.module())) {
    for (torch::jit::Function* function : type->methods()) {
      auto graph = graphOf(function);
      std::vector<torch::jit::Node*> redundant;
      collectRedundant(graph->block(), {}, redundant);
      if (removeRepeatedRankChecks(*graph) > 0) torch::jit::EliminateDeadCode(graph);
      for (torch::jit::Node* gather : redundant) {
        if (torch::jit::Node* reshard = reshardOf(gather)) reshard->destroy();
        gather->destroy();
        ++removed;
      }
      if (!redundant.empty()) {
        torch::jit::EliminateDeadCode(graph);  // the removed gathers' operand chains
        context.diagnostics().remark(kPassName, std::to_string(redundant.size()) +
                                                    " redundant gather(s) removed in " +
                                                    type->name()->qualifiedName() + "::" + function->name());
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
