#include "gather_cost.h"

#include "instance_walk.h"

#include <algorithm>
#include <cmath>

namespace fsdp_opt {

GatherCost::GatherCost(const torch::jit::Module& root, const FsdpPlan& plan, const std::string& entryMethod) {
  WalkObserver observer;
  observer.onGather = [&](const GatherVisit& visit) {
    if (visit.issuesCollective) collectives_.push_back({visit.units, visit.loops});
  };
  observer.onUnitsOpened = [&](const OpenUnits& open) { openPoints_.insert({open.units, open.loops}); };
  walkFromEntryMethods(root, plan, GatherModel::ExplicitOps, observer, entryMethod, Revisits::Walk);
}

std::map<const Unit*, double> GatherCost::costs() const {
  std::map<const Unit*, double> cost;
  for (const Collective& c : collectives_) {
    for (const Unit* unit : c.units) cost[unit] += std::pow(kLoopWeight, static_cast<double>(c.loops.size()));
  }
  return cost;
}

double GatherCost::costWithin(const Unit* unit, torch::jit::Node* loop) const {
  double cost = 0;
  for (const Collective& c : collectives_) {
    if (std::find(c.units.begin(), c.units.end(), unit) == c.units.end()) continue;
    if (std::find(c.loops.begin(), c.loops.end(), loop) == c.loops.end()) continue;
    cost += std::pow(kLoopWeight, static_cast<double>(c.loops.size()));
  }
  return cost;
}

int64_t GatherCost::peak(const std::set<const Unit*>& held,
                         const std::map<torch::jit::Node*, std::set<const Unit*>>& across) const {
  int64_t heldBytes = 0;
  for (const Unit* unit : held) heldBytes += unit->bytes();
  int64_t worstRest = 0;
  for (const auto& [units, loops] : openPoints_) {
    std::set<const Unit*> open(units.begin(), units.end());
    for (torch::jit::Node* loop : loops) {
      auto extra = across.find(loop);
      if (extra != across.end()) open.insert(extra->second.begin(), extra->second.end());
    }
    int64_t rest = 0;
    for (const Unit* unit : open) {
      if (!held.count(unit)) rest += unit->bytes();
    }
    worstRest = std::max(worstRest, rest);
  }
  return heldBytes + worstRest;
}

}  // namespace fsdp_opt
