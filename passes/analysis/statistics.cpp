// Analysis: the statistics of a finished transform, for --stats, the C++ API and Python alike.
// Gathers per call come from the same instance walk the verifier uses, over the rewritten IR:
// what a call really issues, not what the passes meant to leave.
#include <fsdp_opt/passes/analysis.h>

#include "../ir/fsdp_ops.h"
#include "../ir/instance_walk.h"

#include <set>

namespace fsdp_opt {

std::vector<std::pair<std::string, std::string>> transformStatistics(
    const torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh,
    const std::vector<std::pair<std::string, std::string>>& passStatistics) {
  int64_t params = 0, shardedBytes = 0, fullBytes = 0;
  for (const auto& unit : plan.units) {
    for (const auto& param : unit.params) {
      ++params;
      fullBytes += param.bytes();
      int64_t rowBytes = param.rows() > 0 ? param.bytes() / param.rows() : 0;
      shardedBytes += shardRows(param.rows(), mesh.shardGroupSize) * rowBytes;
    }
  }
  int64_t allBytes = 0;
  std::set<c10::TensorImpl*> counted;  // a tied parameter is one tensor in several slots
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!counted.insert(item.value.unsafeGetTensorImpl()).second) continue;
    allBytes += static_cast<int64_t>(item.value.numel() * item.value.element_size());
  }
  std::vector<std::pair<std::string, std::string>> entries = {
      {"units", std::to_string(plan.units.size())},
      {"sharded parameters", std::to_string(params)},
      {"world size", std::to_string(mesh.worldSize)},
      {"sharded bytes per rank", std::to_string(shardedBytes) + " (of " + std::to_string(fullBytes) + ")"},
      {"replicated bytes per rank", std::to_string(allBytes - fullBytes)},
  };
  if (mesh.shardGroupSize != mesh.worldSize) {
    entries.insert(entries.begin() + 3, {"mesh", std::to_string(mesh.replicas()) + " replicas x shard group size " +
                                                     std::to_string(mesh.shardGroupSize)});
  }
  entries.insert(entries.end(), passStatistics.begin(), passStatistics.end());

  // Per root method, the collectives one call issues: both arms of a branch are walked, and a
  // call takes the one that issues more.
  struct Calls {
    int collectives = 0, inLoops = 0;
  };
  for (torch::jit::Function* function : module.type()->methods()) {
    if (isNoGradCopy(function->name())) continue;  // the method's own line counts its path
    std::vector<Calls> path{Calls{}};     // the counts of the path being walked, innermost last
    std::vector<Calls> thenArms;          // of each open branch, its first arm's counts
    WalkObserver observer;
    observer.onGather = [&](const GatherVisit& visit) {  // one collective per gather op
      if (!visit.issuesCollective) return;
      ++path.back().collectives;
      if (visit.loopDepth > 0) ++path.back().inLoops;
    };
    observer.onBranch = [&](torch::jit::Node*, int arm) {
      if (arm == 0) {
        path.push_back(Calls{});
      } else if (arm == 1) {
        thenArms.push_back(path.back());
        path.back() = Calls{};
      } else {
        Calls elseArm = path.back();
        path.pop_back();
        Calls thenArm = thenArms.back();
        thenArms.pop_back();
        const Calls& taken = thenArm.collectives >= elseArm.collectives ? thenArm : elseArm;
        path.back().collectives += taken.collectives;
        path.back().inLoops += taken.inLoops;
      }
    };
    walkFromEntryMethods(module, plan, GatherModel::ExplicitOps, observer, function->name(), Revisits::Walk);
    const Calls& calls = path.front();
    std::string value = std::to_string(calls.collectives);
    if (calls.inLoops > 0) value += " (" + std::to_string(calls.inLoops) + " inside loops, once per iteration)";
    entries.emplace_back("gathers per call of " + function->name(), value);
  }
  return entries;
}

}  // namespace fsdp_opt
