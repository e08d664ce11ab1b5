#include <fsdp_opt/plan.h>

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

}  // namespace fsdp_opt
