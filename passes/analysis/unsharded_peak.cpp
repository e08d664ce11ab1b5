// Analysis: the most unsharded parameter bytes a rewritten module holds at once.
//
// Walks every root method's calls with the IR's own gathers (instance_walk.h, ExplicitOps) and,
// wherever a gather opens units (an all_gather, or the start of a split one, whose buffers exist
// from then on), sums the own bytes of every unit then unsharded or in flight. Right after the
// rewrite this is the least any schedule can hold, since every unit is gathered only around its
// own calls; after scheduling it is what hoisting, bucketing and prefetching left, which the
// runtime's `peak_unsharded_bytes` counter measures.
#include <fsdp_opt/passes/analysis.h>

#include <fsdp_opt/passes/pattern.h>

#include "../ir/instance_walk.h"

namespace fsdp_opt {

UnshardedPeak staticUnshardedPeak(const torch::jit::Module& module, const FsdpPlan& plan) {
  UnshardedPeak peak;
  WalkObserver observer;
  observer.onUnitsOpened = [&](const OpenUnits& open) {
    int64_t bytes = 0;
    for (const Unit* unit : open.units) bytes += unit->bytes();
    if (bytes <= peak.bytes) return;
    peak.bytes = bytes;
    peak.entryMethod = open.stack.front().method;
    peak.units = open.units;
  };
  walkFromEntryMethods(module, plan, GatherModel::ExplicitOps, observer);
  return peak;
}

std::string describePeak(const UnshardedPeak& peak) {
  if (peak.units.empty()) return "0 bytes (no unit is gathered)";
  std::string units;
  for (const Unit* unit : peak.units) {
    units += (units.empty() ? "" : ", ") + std::string("'") + displayPath(unit->path) + "' (" +
             std::to_string(unit->bytes()) + " bytes)";
  }
  return std::to_string(peak.bytes) + " bytes in entry method '" + peak.entryMethod + "', unit" +
         (peak.units.size() > 1 ? "s " : " ") + units + (peak.units.size() > 1 ? " unsharded together" : " unsharded");
}

}  // namespace fsdp_opt
