#include <fsdp_opt/passes/plan.h>

#include <algorithm>

namespace fsdp_opt {

std::string ParamSlot::path() const {
  return ownerPath.empty() ? name : ownerPath + "." + name;
}

int64_t GroupParam::bytes() const {
  return static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
}

bool Unit::hasForwardMethod(const std::string& method) const {
  return std::binary_search(forwardMethods.begin(), forwardMethods.end(), method);
}

int64_t Unit::bytes() const {
  int64_t total = 0;
  for (const auto& param : params) total += param.bytes();
  return total;
}

const Unit* FsdpPlan::unitAt(const std::string& modulePath) const {
  auto it = unitIndex.find(modulePath);
  return it == unitIndex.end() ? nullptr : &units[it->second];
}

const Unit* FsdpPlan::unitOfParam(const std::string& paramPath) const {
  auto it = unitOfParamPath.find(paramPath);
  return it == unitOfParamPath.end() ? nullptr : &units[it->second];
}

const Unit* FsdpPlan::enclosingUnit(const std::string& modulePath) const {
  std::string path = modulePath;
  while (true) {
    if (const Unit* unit = unitAt(path)) return unit;
    if (path.empty()) return nullptr;
    size_t dot = path.rfind('.');
    path = dot == std::string::npos ? std::string() : path.substr(0, dot);
  }
}

int64_t FsdpPlan::footprintBytes(const Unit& unit) const {
  if (footprints_.size() != units.size()) {
    footprints_.assign(units.size(), 0);
    for (const Unit& inner : units) {
      const int64_t bytes = inner.bytes();
      // Every unit at or above `inner` (its path and each of its dotted prefixes, the root "").
      std::string path = inner.path;
      while (true) {
        auto it = unitIndex.find(path);
        if (it != unitIndex.end()) footprints_[it->second] += bytes;
        if (path.empty()) break;
        size_t dot = path.rfind('.');
        path = dot == std::string::npos ? std::string() : path.substr(0, dot);
      }
    }
  }
  return footprints_.at(unitIndex.at(unit.path));
}

}  // namespace fsdp_opt
