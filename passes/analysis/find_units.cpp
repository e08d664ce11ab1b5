// Analysis: which module instances are FSDP units and which methods are their forward methods.
//
// Sources, combined: --fsdp-unit=PATTERN, --forward-method=PATTERN:METHOD, and the markers
// `_fsdp_unit: bool` / `_fsdp_forward_methods: List[str]` that Python sets before scripting.
// Assumes: the module is a scripted module whose exported methods are compiled.
// Guarantees: every listed forward method exists on its unit; `forward` is a forward method of
// every unit that defines it.
#include <fsdp_opt/analysis.h>
#include <fsdp_opt/pattern.h>

#include "../support/module_tree.h"

#include <algorithm>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kOrigin = "find-units";

bool hasUnitMarker(const torch::jit::Module& module) {
  if (!module.hasattr("_fsdp_unit")) return false;
  auto value = module.attr("_fsdp_unit");
  return value.isBool() && value.toBool();
}

std::vector<std::string> markedForwardMethods(const torch::jit::Module& module) {
  std::vector<std::string> methods;
  if (!module.hasattr("_fsdp_forward_methods")) return methods;
  auto value = module.attr("_fsdp_forward_methods");
  if (!value.isList()) return methods;
  for (const auto& item : value.toListRef()) {
    if (item.isString()) methods.push_back(item.toStringRef());
  }
  return methods;
}

}  // namespace

bool findUnits(const torch::jit::Module& root, const PipelineOptions& options,
               DiagnosticSink& diagnostics, FsdpPlan& plan) {
  ModuleIndex index(root);
  bool ok = true;

  std::set<std::string> unitPaths;
  for (const auto& pattern : options.unitPatterns) {
    int matched = 0;
    for (const auto& [path, module] : index.modules()) {
      if (matchModulePattern(pattern, path)) {
        unitPaths.insert(path);
        ++matched;
      }
    }
    if (matched == 0) {
      diagnostics.error(kOrigin, "--fsdp-unit pattern '" + pattern + "' matches no module");
      ok = false;
    }
  }
  for (const auto& [path, module] : index.modules()) {
    if (hasUnitMarker(module)) unitPaths.insert(path);
  }

  std::map<std::string, std::set<std::string>> forwardMethods;
  for (const auto& [path, module] : index.modules()) {
    if (!unitPaths.count(path)) continue;
    if (module.find_method("forward")) forwardMethods[path].insert("forward");
  }

  auto registerMethod = [&](const std::string& path, const torch::jit::Module& module,
                            const std::string& method, const std::string& source) {
    if (!unitPaths.count(path)) {
      diagnostics.remark(kOrigin, source + " on module '" + displayPath(path) +
                                      "' is a no-op: the module is not an FSDP unit");
      return;
    }
    if (!module.find_method(method)) {
      diagnostics.error(kOrigin, "module '" + displayPath(path) + "' has no method '" + method +
                                     "' (registered by " + source +
                                     "; is it compiled, e.g. marked @torch.jit.export?)");
      ok = false;
      return;
    }
    forwardMethods[path].insert(method);
  };

  for (const auto& spec : options.forwardMethodSpecs) {
    int matched = 0;
    std::string source = "--forward-method=" + spec.pattern + ":" + spec.method;
    for (const auto& [path, module] : index.modules()) {
      if (!matchModulePattern(spec.pattern, path)) continue;
      ++matched;
      registerMethod(path, module, spec.method, source);
    }
    if (matched == 0) {
      diagnostics.error(kOrigin, "--forward-method pattern '" + spec.pattern + "' matches no module");
      ok = false;
    }
  }
  for (const auto& [path, module] : index.modules()) {
    for (const auto& method : markedForwardMethods(module)) {
      registerMethod(path, module, method, "marker _fsdp_forward_methods['" + method + "']");
    }
  }

  for (const auto& [path, module] : index.modules()) {
    if (!unitPaths.count(path)) continue;
    Unit unit;
    unit.path = path;
    const auto& methods = forwardMethods[path];
    unit.forwardMethods.assign(methods.begin(), methods.end());
    plan.unitIndex[path] = plan.units.size();
    plan.units.push_back(std::move(unit));
    std::string list;
    for (const auto& m : methods) list += (list.empty() ? "" : ", ") + m;
    diagnostics.remark(kOrigin, "unit '" + displayPath(path) + "' (" +
                                    module.type()->name()->qualifiedName() +
                                    "), forward methods: " + (list.empty() ? "none" : list));
  }
  return ok;
}

}  // namespace fsdp_opt
