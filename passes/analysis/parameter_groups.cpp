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

}  // namespace fsdp_opt
