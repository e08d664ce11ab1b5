#include "inline_calls.h"

#include "fsdp_ops.h"
#include "module_tree.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>

namespace fsdp_opt {
namespace {

// TorchScript has no recursion; the bound only keeps a pathological chain of calls finite.
constexpr int kMaxRounds = 8;

}  // namespace

torch::jit::Function* calleeOf(torch::jit::Node* call) {
  auto type = call->input(0)->type()->cast<c10::ClassType>();
  return type ? type->findMethod(call->s(c10::attr::name)) : nullptr;
}

bool CallTreeSearch::reaches(torch::jit::Function* function) {
  auto known = memo_.find(function);
  if (known != memo_.end()) return known->second;
  memo_[function] = false;  // guards the walk only
  bool found = reaches(graphOf(function)->block());
  return memo_[function] = found;
}

bool CallTreeSearch::reaches(torch::jit::Node* node) {
  if (matches_(node)) return true;
  if (node->kind() == c10::prim::CallMethod) {
    torch::jit::Function* callee = calleeOf(node);
    if (callee && reaches(callee)) return true;
  }
  for (torch::jit::Block* nested : node->blocks()) {
    if (reaches(nested)) return true;
  }
  return false;
}

bool CallTreeSearch::reaches(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    if (reaches(node)) return true;
  }
  return false;
}

CollectiveReach::CollectiveReach() : CallTreeSearch([](torch::jit::Node* node) { return ops::isCollective(node); }) {}

bool hasConstantTrips(torch::jit::Node* loop) {
  torch::jit::Block* body = loop->blocks()[0];
  auto isTrue = [](torch::jit::Value* v) {
    auto value = torch::jit::toIValue(v);
    return value && value->isBool() && value->toBool();
  };
  return loop->input(0)->node()->kind() == c10::prim::Constant && isTrue(loop->input(1)) &&
         isTrue(body->outputs()[0]);
}

DivergentLoopReach::DivergentLoopReach(CollectiveReach& collectives)
    : CallTreeSearch([&collectives](torch::jit::Node* node) {
        return node->kind() == c10::prim::Loop && !hasConstantTrips(node) && collectives.reaches(node);
      }) {}

std::vector<std::string> inlineCalls(torch::jit::Block* block,
                                     const std::function<bool(torch::jit::Node* call)>& select) {
  std::vector<std::string> inlined;
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<torch::jit::Node*> calls;
    forEachNode(block, [&](torch::jit::Node* node) {
      if (node->kind() == c10::prim::CallMethod && calleeOf(node) && select(node)) calls.push_back(node);
    });
    if (calls.empty()) break;
    for (torch::jit::Node* call : calls) {
      torch::jit::Function* callee = calleeOf(call);
      inlined.push_back(callee->qualname().qualifiedName());
      // The callee's own graph, not its optimized (fully inlined) one: the calls it makes stay
      // calls, and the inlined IR reads as the source did.
      auto& graphFunction = torch::jit::toGraphFunction(*callee);
      torch::jit::inlineCallTo(call, &graphFunction, graphFunction.graph().get());
    }
  }
  return inlined;
}

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


}  // namespace fsdp_opt
