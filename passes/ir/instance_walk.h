// An inter-procedural walk over the methods reachable from the root's entry methods, tracking
// which module instance every module-typed value denotes and which units are unsharded at each
// point. Types may be shared between instances; the walk is per instance, so its answers are
// instance-correct whatever the types.
#pragma once

#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <string>
#include <vector>

namespace fsdp_opt {

// How units become unsharded during the walk.
enum class GatherModel {
  // As eager FSDP's hooks: around every call of a unit's forward method (and a root unit's
  // forward methods on entry). Used to find what eager FSDP would compute on shards.
  EagerHooks,
  // Only where the IR says so: fsdp::all_gather (or a start's wait) / fsdp::reshard. Used to
  // verify the rewrite and to measure what it holds.
  ExplicitOps,
};

struct Frame {
  std::string modulePath;
  std::string method;
};

struct ParamRead {
  std::string paramPath;
  const Unit* unit;  // the unit whose group holds it; nullptr when not sharded
  bool unsharded;    // whether that unit is unsharded at this read
  torch::jit::Node* node;
  const std::vector<Frame>& stack;  // entry method first
};

struct GatherVisit {
  std::vector<const Unit*> units;  // one, or several for a bucket
  bool issuesCollective;  // some unit was sharded before this gather
  int loopDepth;          // prim::Loop bodies around the gather, across the call chain
  const std::vector<Frame>& stack;
  const std::vector<torch::jit::Node*>& loops;  // those prim::Loop nodes, outermost first
};

// After a gather (or the start of a split one, whose buffers exist from then on) opened units
// (ExplicitOps): every unit now unsharded or in flight, sorted by path.
struct OpenUnits {
  std::vector<const Unit*> units;
  const std::vector<Frame>& stack;
  const std::vector<torch::jit::Node*>& loops;  // the prim::Loop nodes around, outermost first
};

// A prim::SetAttr that assigns a parameter slot.
struct ParamWrite {
  std::string paramPath;
  const Unit* unit;  // nullptr when the parameter is in no unit's group
  torch::jit::Node* node;
  const std::vector<Frame>& stack;
};

struct WalkObserver {
  std::function<void(const ParamRead&)> onParamRead;
  std::function<void(const GatherVisit&)> onGather;
  std::function<void(const OpenUnits&)> onUnitsOpened;
  std::function<void(const ParamWrite&)> onParamWrite;
  // Around the arms of a prim::If: `arm` 0 and 1 before each arm is walked, -1 after both. One
  // call takes one arm: an observer that counts per call keeps the arms apart.
  std::function<void(torch::jit::Node* branch, int arm)> onBranch;
};

// Whether a method reached again with the same unsharded units is walked again.
enum class Revisits {
  // Once is enough for questions whose answer only depends on that state (a sharded read).
  Skip,
  // Every call is walked, for an observer that counts what a call issues.
  Walk,
};

// Walks from each method of the root (or only `entryMethod` when given).
void walkFromEntryMethods(const torch::jit::Module& root, const FsdpPlan& plan, GatherModel model,
                          const WalkObserver& observer, const std::string& entryMethod = "",
                          Revisits revisits = Revisits::Skip);

}  // namespace fsdp_opt
