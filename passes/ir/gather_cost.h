// The cost model of the gather schedule, shared by plan-gather-lifetimes (units held for a whole
// entry call) and hoist-loop-gathers (units held across one loop of it); docs/passes.md, "The
// planner and its cost model". One instance walk (instance_walk.h, ExplicitOps, every call
// walked) over an entry method's current IR gives
//   - every gather that issues a collective, with the loops around it: a unit's cost in a region
//     (the whole call, or one loop) is the sum, over its collectives there, of
//     kLoopWeight^(loops around the collective);
//   - every point where a gather opens units, with the units then open and the loops around it:
//     the static peak is the largest sum of open bytes over these points.
// Both passes ask the same question of it: what the static peak would be if some units were
// held over a region too (a unit held opens no buffer of its own inside it, the runtime counts
// its gathers there as nested), and take units costliest first while the answer fits the budget.
#pragma once

#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

// One level of loop nesting counts as this many calls: a decoding loop runs at least a few
// steps, and any unit gathered per step should be held before one gathered once.
constexpr double kLoopWeight = 1000.0;

class GatherCost {
 public:
  // Walks one call of `entryMethod` of `root`.
  GatherCost(const torch::jit::Module& root, const FsdpPlan& plan, const std::string& entryMethod);

  bool empty() const { return collectives_.empty(); }
  // The weighted collectives a call issues for each unit, over the whole call.
  std::map<const Unit*, double> costs() const;
  // The same, counting only the collectives inside `loop` (a prim::Loop of any graph walked).
  double costWithin(const Unit* unit, torch::jit::Node* loop) const;
  // The static peak of unsharded bytes with `held` gathered for the whole call and each
  // `across[loop]` gathered around that loop.
  int64_t peak(const std::set<const Unit*>& held,
               const std::map<torch::jit::Node*, std::set<const Unit*>>& across = {}) const;

 private:
  struct Collective {
    std::vector<const Unit*> units;
    std::vector<torch::jit::Node*> loops;
  };
  std::vector<Collective> collectives_;
  std::set<std::pair<std::vector<const Unit*>, std::vector<torch::jit::Node*>>> openPoints_;
};

}  // namespace fsdp_opt
