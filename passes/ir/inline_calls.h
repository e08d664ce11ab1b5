// Inlining of method calls for passes that need a call's collectives in view: inline-loop-calls
// (the gathers a decoding loop runs) and rank-uniform-control-flow (every collective of a branch
// arm or a loop body). Inlined the TorchScript way, from the callee's own graph with `self`
// bound to the caller's module value, so every prim::GetAttr chain keeps naming the same
// instance even where types are shared; the callee stays as it is for its other callers.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

// The method a prim::CallMethod calls, or nullptr.
torch::jit::Function* calleeOf(torch::jit::Node* call);

// Whether running code reaches a node `matches` picks: in the code itself, in its nested
// blocks, or in the methods it calls, transitively. Memoized per method.
class CallTreeSearch {
 public:
  explicit CallTreeSearch(std::function<bool(torch::jit::Node*)> matches) : matches_(std::move(matches)) {}
  bool reaches(torch::jit::Function* function);
  // The node itself, its nested blocks, and what it calls.
  bool reaches(torch::jit::Node* node);
  bool reaches(torch::jit::Block* block);

 private:
  std::function<bool(torch::jit::Node*)> matches_;
  std::map<torch::jit::Function*, bool> memo_;
};

// Whether running code can issue a collective (a gather of either form, or an agreement of
// ranks), directly or through the methods it calls.
class CollectiveReach : public CallTreeSearch {
 public:
  CollectiveReach();
};

// Whether a loop runs the same iterations on every rank: a constant trip count and a condition
// that is constant true before and after every iteration.
bool hasConstantTrips(torch::jit::Node* loop);

// Whether running a method can enter a loop whose trips may differ between ranks and whose body
// issues collectives, directly or through the methods it calls. Such a loop needs the ranks to
// agree each iteration unless the graph it ends up in already holds its units.
class DivergentLoopReach : public CallTreeSearch {
 public:
  explicit DivergentLoopReach(CollectiveReach& collectives);
};

// Inlines into `block` (nested blocks included) every method call `select` picks, round after
// round (an inlined body may hold more such calls), at most a few rounds deep. Returns the
// qualified names of the callees inlined, in order.
std::vector<std::string> inlineCalls(torch::jit::Block* block,
                                     const std::function<bool(torch::jit::Node* call)>& select);

// Inlining an entry method copies its prologue (fsdp::check_rank) into the caller, after the
// caller's own: the graph's first check covers the whole call, so the copies go. Returns how
// many were removed.
int removeRepeatedRankChecks(torch::jit::Graph& graph);

}  // namespace fsdp_opt
