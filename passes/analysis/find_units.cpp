// Analysis: which module instances are FSDP units and which methods are their forward methods.
//
// Sources, combined: --fsdp-unit=PATTERN, --fsdp-unit-type=NAME, --forward-method=PATTERN:METHOD,
// the markers `_fsdp_unit: bool` / `_fsdp_forward_methods: List[str]` that Python sets before
// scripting, and last the size policy --fsdp-min-unit-params=N, which counts what the others left.
// Assumes: the module is a scripted module whose exported methods are compiled.
// Guarantees: every listed forward method exists on its unit; `forward` (and its TorchScript
// overloads, `forward__0`...) is a forward method of every unit that defines it.
#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/passes/pattern.h>

#include "../ir/module_tree.h"

#include <algorithm>
#include <cctype>
#include <map>
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

// A method and its overloads, as TorchScript compiles them: `@torch.jit._overload_method`
// overloads of `forward` become `forward__0`, `forward__1`, ... (torchvision's DenseNet layers),
// and their callers call those names. Empty when the module has none of them.
std::vector<std::string> methodAndOverloads(const torch::jit::Module& module, const std::string& name) {
  std::vector<std::string> found;
  for (torch::jit::Function* function : module.type()->methods()) {
    const std::string& method = function->name();
    bool overload = method.size() > name.size() + 2 && method.compare(0, name.size() + 2, name + "__") == 0 &&
                    std::all_of(method.begin() + name.size() + 2, method.end(), [](char c) { return std::isdigit(c); });
    if (method == name || overload) found.push_back(method);
  }
  return found;
}

// Module paths listed for a remark: the first few, then how many more.
std::string summarizePaths(const std::vector<std::string>& paths) {
  constexpr size_t kShown = 6;
  std::string text;
  for (size_t i = 0; i < paths.size() && i < kShown; ++i) text += (i ? ", " : "") + displayPath(paths[i]);
  if (paths.size() > kShown) text += ", ... (" + std::to_string(paths.size() - kShown) + " more)";
  return text;
}

// The class name as the user wrote it in Python: TorchScript inserts `___torch_mangle_N`
// components when it compiles a second class of one name, which no user types.
std::vector<std::string> typeNameComponents(const c10::ClassType& type) {
  std::vector<std::string> parts;
  for (const auto& atom : type.name()->atoms()) {
    if (atom.rfind("___torch_mangle_", 0) != 0) parts.push_back(atom);
  }
  return parts;
}

// NAME matches "__torch__.timm.models.vision_transformer.Block" spelled whole, without the
// `__torch__.` TorchScript puts in front of Python's module path, or as its last component.
bool typeMatches(const c10::ClassType& type, const std::string& name) {
  std::vector<std::string> parts = typeNameComponents(type);
  if (parts.empty()) return false;
  if (name == parts.back()) return true;
  std::string qualified;
  for (const auto& part : parts) qualified += (qualified.empty() ? "" : ".") + part;
  return name == qualified || (parts.front() == "__torch__" && name == qualified.substr(10));
}

bool hasTypeName(const c10::ClassType& type, const char* name) {
  auto parts = typeNameComponents(type);
  return !parts.empty() && parts.back() == name;
}

// FSDP1's size_based_auto_wrap_policy over the module tree, in post-order: a module whose
// parameter elements not held by a unit below it reach `minParams` becomes a unit, and what it
// holds no longer counts for its ancestors. As in FSDP1, containers without a forward of their
// own (ModuleList, ModuleDict) are never units, nothing inside a MultiheadAttention is (its
// forward reads its children's parameters directly), and the root is one whenever parameters
// are left for it: FSDP1's outermost wrapper.
std::vector<std::string> unitsBySize(const ModuleIndex& index, const std::set<std::string>& units,
                                     int64_t minParams) {
  std::map<std::string, int64_t> remaining;
  std::set<c10::TensorImpl*> counted;  // a tied tensor counts once, at its first slot
  std::set<std::string> leafInside;    // paths below a MultiheadAttention
  for (const auto& [path, module] : index.modules()) {
    auto parent = parentPath(path);
    if (parent && (leafInside.count(*parent) || hasTypeName(*index.find(*parent)->type(), "MultiheadAttention"))) {
      leafInside.insert(path);
    }
    int64_t own = 0;
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      if (item.value.defined() && counted.insert(item.value.unsafeGetTensorImpl()).second) own += item.value.numel();
    }
    remaining[path] = own;
  }
  std::vector<std::string> chosen;
  const auto& modules = index.modules();
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {  // descendants before ancestors
    const auto& [path, module] = *it;
    bool container = hasTypeName(*module.type(), "ModuleList") || hasTypeName(*module.type(), "ModuleDict");
    bool unit = units.count(path) > 0;
    bool big = path.empty() ? remaining[path] > 0
                            : remaining[path] >= minParams && !container && !leafInside.count(path);
    if (!unit && big) {
      chosen.push_back(path);
      unit = true;
    }
    auto parent = parentPath(path);
    if (parent && !unit) remaining[*parent] += remaining[path];
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
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
  for (const auto& name : options.unitTypes) {
    std::vector<std::string> matched;
    for (const auto& [path, module] : index.modules()) {
      if (typeMatches(*module.type(), name)) matched.push_back(path);
    }
    if (matched.empty()) {
      std::set<std::string> classes;
      for (const auto& [path, module] : index.modules()) classes.insert(typeNameComponents(*module.type()).back());
      std::string known;
      for (const auto& c : classes) known += (known.empty() ? "" : ", ") + c;
      diagnostics.error(kOrigin, "--fsdp-unit-type '" + name + "' matches no module's class (the model's classes: " +
                                     known + ")");
      ok = false;
      continue;
    }
    unitPaths.insert(matched.begin(), matched.end());
    diagnostics.remark(kOrigin, "--fsdp-unit-type=" + name + " chose " + std::to_string(matched.size()) +
                                    " module(s): " + summarizePaths(matched));
  }
  for (const auto& [path, module] : index.modules()) {
    if (hasUnitMarker(module)) unitPaths.insert(path);
  }
  if (options.minUnitParams) {
    std::vector<std::string> chosen = unitsBySize(index, unitPaths, *options.minUnitParams);
    unitPaths.insert(chosen.begin(), chosen.end());
    diagnostics.remark(kOrigin, "--fsdp-min-unit-params=" + std::to_string(*options.minUnitParams) +
                                    " chose " + std::to_string(chosen.size()) + " module(s): " +
                                    (chosen.empty() ? "none" : summarizePaths(chosen)));
  }

  std::map<std::string, std::set<std::string>> forwardMethods;
  for (const auto& [path, module] : index.modules()) {
    if (!unitPaths.count(path)) continue;
    for (const auto& method : methodAndOverloads(module, "forward")) forwardMethods[path].insert(method);
  }

  auto registerMethod = [&](const std::string& path, const torch::jit::Module& module,
                            const std::string& method, const std::string& source) {
    if (!unitPaths.count(path)) {
      diagnostics.remark(kOrigin, source + " on module '" + displayPath(path) +
                                      "' is a no-op: the module is not an FSDP unit");
      return;
    }
    std::vector<std::string> methods = methodAndOverloads(module, method);
    if (methods.empty()) {
      diagnostics.error(kOrigin, "module '" + displayPath(path) + "' has no method '" + method +
                                     "' (registered by " + source +
                                     "; is it compiled, e.g. marked @torch.jit.export?)");
      ok = false;
      return;
    }
    forwardMethods[path].insert(methods.begin(), methods.end());
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
