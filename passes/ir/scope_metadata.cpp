#include "scope_metadata.h"

#include <fsdp_opt/passes/pattern.h>

#include <ATen/core/List.h>

#include <string>
#include <vector>

namespace fsdp_opt {
namespace {

void setAttribute(torch::jit::Module& root, const char* name, const c10::TypePtr& type, c10::IValue value) {
  if (root.hasattr(name)) {
    root.setattr(name, std::move(value));
  } else {
    root.register_attribute(name, type, std::move(value));
  }
}

}  // namespace

void addScopeAttributes(torch::jit::Module& root, const FsdpPlan& plan, const PipelineOptions& options) {
  c10::List<std::string> units;
  c10::List<c10::List<std::string>> params;
  c10::List<c10::List<int64_t>> rows;
  for (const Unit& unit : plan.units) {
    c10::List<std::string> paths;
    c10::List<int64_t> unitRows;
    // As insertUnitGather lists them: every slot of every group parameter.
    for (const GroupParam& param : unit.params) {
      for (const ParamSlot& slot : param.slots) {
        paths.push_back(slot.path());
        unitRows.push_back(param.rows());
      }
    }
    units.push_back(displayPath(unit.path));
    params.push_back(std::move(paths));
    rows.push_back(std::move(unitRows));
  }
  c10::List<int64_t> scopeOptions({options.maxUnshardedBytes.value_or(-1), options.bucketBytes,
                                   options.paramDtype ? static_cast<int64_t>(*options.paramDtype) : -1});
  setAttribute(root, kScopeUnitsAttr, c10::ListType::ofStrings(), units);
  setAttribute(root, kScopeParamsAttr, c10::ListType::create(c10::ListType::ofStrings()), params);
  setAttribute(root, kScopeRowsAttr, c10::ListType::create(c10::ListType::ofInts()), rows);
  setAttribute(root, kScopeOptionsAttr, c10::ListType::ofInts(), scopeOptions);
}

}  // namespace fsdp_opt
