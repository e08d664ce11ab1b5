// Analysis: the parameter group of every unit.
//
// FSDP2's rule: a unit's group is every parameter below it that is not below a nested unit.
// Tied parameters (one tensor in several slots) form ONE group entry that belongs to the nearest
// unit holding all of its slots. 0-dim parameters are replicated and belong to no group.
// A grouped parameter must be reachable through its parameter slots only: a tensor attribute or a
// list holding the parameter itself (nn.LSTM's _flat_weights, unless expand-parameter-lists ran
// first) would keep the whole tensor in every rank file, and a method reading it there would
// compute with it instead of the gathered one and train nothing. Another tensor over the same
// storage (a buffer registered from `weight.data`) is separate state, as under FSDP2: it stays
// whole and is read at load (docs/design.md).
// Assumes: findUnits has filled plan.units. Guarantees: every slot of a grouped tensor maps to
// its unit in plan.unitOfParamPath; no tensor is in two groups; no attribute other than a
// parameter slot holds a grouped parameter.
#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/passes/deferred_load.h>
#include <fsdp_opt/passes/pattern.h>

#include "../ir/module_tree.h"

#include <algorithm>
#include <map>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kOrigin = "parameter-groups";

struct TensorSlots {
  at::Tensor tensor;
  std::vector<ParamSlot> slots;
};

// The nearest unit whose path is an ancestor-or-self of every slot's owner.
const Unit* nearestCommonUnit(const FsdpPlan& plan, const std::vector<ParamSlot>& slots) {
  const Unit* candidate = plan.enclosingUnit(slots.front().ownerPath);
  while (candidate) {
    bool holdsAll = true;
    for (const auto& slot : slots) holdsAll = holdsAll && isWithin(slot.ownerPath, candidate->path);
    if (holdsAll) return candidate;
    auto parent = parentPath(candidate->path);
    candidate = parent ? plan.enclosingUnit(*parent) : nullptr;
  }
  return nullptr;
}

// Errors for every attribute other than a parameter slot that holds a grouped parameter.
bool groupedParametersOnlyInSlots(const ModuleIndex& index, const FsdpPlan& plan, DiagnosticSink& diagnostics) {
  std::map<const c10::TensorImpl*, std::string> grouped;
  for (const auto& unit : plan.units) {
    for (const auto& param : unit.params) grouped.emplace(param.tensor.unsafeGetTensorImpl(), param.slots.front().path());
  }
  bool ok = true;
  for (const auto& [path, module] : index.modules()) {
    const auto& type = module.type();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      // Submodules are walked as modules of the index, with their own attribute names.
      if (type->is_parameter(i) || type->getAttribute(i)->is_module()) continue;
      const std::string attribute = path.empty() ? type->getAttributeName(i) : path + "." + type->getAttributeName(i);
      std::set<std::string> held;
      forEachReachableTensor(module._ivalue()->getSlot(i), [&](const at::Tensor& tensor, bool /*isParameterSlot*/) {
        auto it = grouped.find(tensor.unsafeGetTensorImpl());
        if (it != grouped.end()) held.insert(it->second);
      });
      for (const auto& param : held) {
        diagnostics.error(kOrigin, std::string(type->is_buffer(i) ? "buffer" : "attribute") + " '" + attribute +
                                       "' holds parameter '" + param +
                                       "' outside its parameter slot; every rank file would keep it whole and "
                                       "the methods reading it there would compute with it unsharded and train "
                                       "nothing (a list of parameters is read as its parameters when every "
                                       "element is one and nothing writes it: see the remarks of "
                                       "expand-parameter-lists)");
        ok = false;
      }
    }
  }
  return ok;
}

// The first parameter of the model that can be sharded (not 0-dim), as a path; empty when none.
std::string firstShardableParameter(const ModuleIndex& index) {
  for (const auto& [path, module] : index.modules()) {
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      if (item.value.defined() && item.value.dim() > 0) return joinPath(path, item.name);
    }
  }
  return "";
}

// Where a model without a shardable parameter keeps its weights, as the end of an error message;
// empty when nothing says.
std::string whereTheWeightsAre(const ModuleIndex& index) {
  // torch.jit.freeze (and optimize_for_inference, which freezes) inlines every parameter into the
  // graphs as a constant and drops the submodules that held them.
  int64_t constants = 0;
  int64_t constantBytes = 0;
  forEachMethod(index.modules().front().second, MethodScope::kEveryType, [&](const VisitedMethod& method) {
    forEachNode(method.graph->block(), [&](torch::jit::Node* node) {
      if (node->kind() != c10::prim::Constant || !node->output()->type()->isSubtypeOf(*c10::TensorType::get())) return;
      const at::Tensor value = node->t(c10::attr::value);
      ++constants;
      constantBytes += static_cast<int64_t>(value.numel()) * static_cast<int64_t>(value.element_size());
    });
    return 0;
  });
  // Quantized and prepacked modules hold their weights in objects of classes registered in C++
  // (torch.classes), which are opaque to a sharder.
  std::vector<std::string> packed;
  for (const auto& [path, module] : index.modules()) {
    const auto& type = module.type();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      auto attributeClass = type->getAttribute(i)->cast<c10::ClassType>();
      if (!attributeClass || attributeClass->is_module() || !attributeClass->name()) continue;
      const std::string name = attributeClass->name()->qualifiedName();
      const std::string prefix = "__torch__.torch.classes.";
      if (name.rfind(prefix, 0) != 0) continue;
      packed.push_back("'" + joinPath(path, type->getAttributeName(i)) + "' (" + name.substr(prefix.size()) + ")");
    }
  }
  if (!packed.empty()) {
    return "the model keeps its weights in " + std::to_string(packed.size()) + " packed object(s) of C++ classes, " +
           packed.front() + (packed.size() > 1 ? " and others" : "") +
           ", which fsdp-opt cannot shard; shard the model before it is quantized or prepacked";
  }
  if (constantBytes > 0) {
    return "the model's weights are " + std::to_string(constants) + " tensor constants (" +
           std::to_string(constantBytes) +
           " bytes) in its graphs, as torch.jit.freeze and torch.jit.optimize_for_inference leave "
           "them; run fsdp-opt on the scripted model before freezing it";
  }
  return "";
}

}  // namespace

bool collectParameterGroups(const torch::jit::Module& root, DiagnosticSink& diagnostics,
                            FsdpPlan& plan) {
  ModuleIndex index(root);
  std::vector<TensorSlots> tensors;
  std::map<c10::TensorImpl*, size_t> byImpl;
  std::map<const void*, std::string> byStorage;
  bool ok = true;

  for (const auto& [ownerPath, module] : index.modules()) {
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      const at::Tensor& tensor = item.value;
      if (!tensor.defined()) continue;
      ParamSlot slot{ownerPath, item.name};
      auto it = byImpl.find(tensor.unsafeGetTensorImpl());
      if (it != byImpl.end()) {
        tensors[it->second].slots.push_back(slot);
        continue;
      }
      // Two different tensors over one storage cannot be sharded independently.
      const void* data = tensor.numel() > 0 ? tensor.storage().data() : nullptr;
      if (data) {
        auto [pos, inserted] = byStorage.emplace(data, slot.path());
        if (!inserted) {
          diagnostics.error(kOrigin, "parameters '" + pos->second + "' and '" + slot.path() +
                                         "' are different tensors over one storage; "
                                         "fsdp-opt cannot shard overlapping parameters");
          ok = false;
          continue;
        }
      }
      byImpl[tensor.unsafeGetTensorImpl()] = tensors.size();
      tensors.push_back({tensor, {slot}});
    }
  }

  for (auto& entry : tensors) {
    bool ownedByAUnit = false;
    for (const auto& slot : entry.slots) ownedByAUnit = ownedByAUnit || plan.enclosingUnit(slot.ownerPath);
    if (!ownedByAUnit) continue;  // above every unit: stays whole on every rank
    const Unit* unit = nearestCommonUnit(plan, entry.slots);
    if (!unit) {
      std::string paths;
      for (const auto& slot : entry.slots) paths += (paths.empty() ? "'" : ", '") + slot.path() + "'";
      diagnostics.error(kOrigin, "tied parameter " + paths +
                                     " is not held by any single FSDP unit; make a module above "
                                     "all of them a unit");
      ok = false;
      continue;
    }
    if (entry.tensor.dim() == 0) {
      diagnostics.remark(kOrigin, "parameter '" + entry.slots.front().path() +
                                      "' is 0-dim: replicated, not sharded");
      continue;
    }
    size_t unitIdx = plan.unitIndex.at(unit->path);
    GroupParam param;
    param.slots = entry.slots;
    param.tensor = entry.tensor;
    param.shape = entry.tensor.sizes().vec();
    for (const auto& slot : entry.slots) plan.unitOfParamPath[slot.path()] = unitIdx;
    if (entry.slots.size() > 1) {
      std::string paths;
      for (const auto& slot : entry.slots) paths += (paths.empty() ? "'" : ", '") + slot.path() + "'";
      diagnostics.remark(kOrigin, "tied parameter " + paths + " joins the group of unit '" +
                                      displayPath(unit->path) + "'");
    }
    plan.units[unitIdx].params.push_back(std::move(param));
  }
  return groupedParametersOnlyInSlots(index, plan, diagnostics) && ok;
}

// A plan that shards nothing is refused: every rank file would hold the whole model, which a user
// who asked for sharding would not notice until memory ran out. The error says where the weights
// are when they are not parameters (graph constants of a frozen model, packed objects of a
// quantized one). With no unit at all this holds only from two ranks on: at world size 1
// nothing is sharded anyway, and --print-ir of a model without units is a way to read its IR.
bool checkSomethingIsSharded(const torch::jit::Module& root, int64_t worldSize, const FsdpPlan& plan,
                             DiagnosticSink& diagnostics) {
  const bool anyGrouped =
      std::any_of(plan.units.begin(), plan.units.end(), [](const Unit& unit) { return !unit.params.empty(); });
  if (anyGrouped || (plan.units.empty() && worldSize <= 1)) return true;
  const ModuleIndex index(root);
  const std::string parameter = firstShardableParameter(index);
  std::string why;
  if (!parameter.empty()) {
    why = plan.units.empty() ? "designate units with --fsdp-unit, --fsdp-unit-type, --fsdp-min-unit-params or a "
                               "`_fsdp_unit` marker"
                             : "parameter '" + parameter +
                                   "' and any others are above every unit; designate the modules that hold them";
  } else {
    why = whereTheWeightsAre(index);
    if (why.empty()) why = "the model has no parameter that can be sharded";
  }
  if (plan.units.empty()) {
    diagnostics.error(kOrigin, "no module is an FSDP unit, so each of the " + std::to_string(worldSize) +
                                   " rank files would hold the whole model: " + why);
    return false;
  }
  std::string listed;
  for (size_t i = 0; i < plan.units.size() && i < 4; ++i) listed += (i ? ", '" : "'") + displayPath(plan.units[i].path) + "'";
  if (plan.units.size() > 4) listed += ", ... (" + std::to_string(plan.units.size()) + " in all)";
  diagnostics.error(kOrigin, "no FSDP unit holds a parameter to shard (units: " + listed +
                                 "), so every rank file would hold the whole model: " + why);
  return false;
}

}  // namespace fsdp_opt
