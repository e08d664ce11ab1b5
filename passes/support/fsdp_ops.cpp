#include "fsdp_ops.h"

#include <algorithm>

#include "module_tree.h"

#include <fsdp_opt/pattern.h>


namespace fsdp_opt {

namespace ops {
c10::Symbol allGather() { return c10::Symbol::fromQualString("fsdp::all_gather"); }
c10::Symbol reshard() { return c10::Symbol::fromQualString("fsdp::reshard"); }
c10::Symbol checkRank() { return c10::Symbol::fromQualString("fsdp::check_rank"); }
c10::Symbol releaseAll() { return c10::Symbol::fromQualString("fsdp::release_all"); }
c10::Symbol gatherStart() { return c10::Symbol::fromQualString("fsdp::all_gather_start"); }
c10::Symbol gatherWait() { return c10::Symbol::fromQualString("fsdp::all_gather_wait"); }
bool isGatherResult(const torch::jit::Node* node) {
  return node->kind() == allGather() || node->kind() == gatherWait();
}
bool isFsdpOp(const torch::jit::Node* node) {
  return std::string(node->kind().ns().toUnqualString()) == "fsdp";
}
}  // namespace ops

void addUnitPathAttributes(torch::jit::Module& root, const FsdpPlan& plan) {
  ModuleIndex index(root);
  for (const auto& unit : plan.units) {
    auto module = index.find(unit.path);
    if (!module) continue;
    // Instances share types: the attribute may already be on the type but not in this object.
    if (module->type()->hasAttribute(kUnitPathAttr)) {
      module->_ivalue()->setAttr(kUnitPathAttr, displayPath(unit.path));
    } else {
      module->register_attribute(kUnitPathAttr, c10::StringType::get(), displayPath(unit.path));
    }
  }
}

torch::jit::Node* insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule,
                                   const Unit& unit, std::optional<c10::ScalarType> paramDtype) {
  std::vector<torch::jit::Value*> params;
  std::vector<int64_t> fullRows;
  for (const auto& param : unit.params) {
    for (const auto& slot : param.slots) {
      torch::jit::Value* read = insertGetAttrChain(graph, unitModule, relativePath(slot.path(), unit.path));
      // Optional parameters (a Conv2d's bias) read as Optional[Tensor]; the plan only lists
      // slots that hold a tensor, so the cast cannot fail.
      if (!read->type()->isSubtypeOf(*c10::TensorType::get())) {
        read = graph.insertUncheckedCast(read, c10::TensorType::get());
      }
      params.push_back(read);
      fullRows.push_back(param.rows());
    }
  }
  auto* list = graph.insertNode(graph.createList(c10::TensorType::get(), params))->output();
  auto* unitPath = graph.insertGetAttr(unitModule, kUnitPathAttr);
  auto* rows = graph.insertConstant(c10::IValue(fullRows));
  std::vector<torch::jit::Value*> operands{list, rows, unitPath};
  if (paramDtype) operands.push_back(graph.insertConstant(c10::IValue(static_cast<int64_t>(*paramDtype))));
  auto* gather = graph.insertNode(graph.create(ops::allGather(), operands, 1));
  gather->output()->setType(c10::ListType::ofTensors());
  return gather;
}

torch::jit::Node* insertUnitReshard(torch::jit::Graph& graph, torch::jit::Node* gather) {
  return graph.insertNode(graph.create(ops::reshard(), {gather->output(), gather->input(2)}, 0));
}

}  // namespace fsdp_opt

namespace fsdp_opt {

torch::jit::Node* reshardOf(torch::jit::Node* gather) {
  for (const torch::jit::Use& use : gather->output()->uses()) {
    if (use.user->kind() == ops::reshard()) return use.user;
  }
  return nullptr;
}

torch::jit::Value* gatheredModule(torch::jit::Node* gather) {
  torch::jit::Node* unitPath = gather->input(2)->node();
  if (unitPath->kind() != c10::prim::GetAttr || unitPath->s(c10::attr::name) != kUnitPathAttr) return nullptr;
  return unitPath->input(0);
}

std::string moduleChainKey(torch::jit::Value* module) {
  std::string path;
  while (module->node()->kind() == c10::prim::GetAttr) {
    path = "." + module->node()->s(c10::attr::name) + path;
    module = module->node()->input(0);
  }
  return "%" + std::to_string(module->unique()) + path;
}

std::optional<std::string> pathFromSelf(torch::jit::Value* value, torch::jit::Value* self) {
  std::string path;
  while (value != self) {
    torch::jit::Node* node = value->node();
    if (node->kind() != c10::prim::GetAttr) return std::nullopt;
    path = path.empty() ? node->s(c10::attr::name) : node->s(c10::attr::name) + "." + path;
    value = node->input(0);
  }
  return path;
}

std::vector<const Unit*> unitsOfGather(torch::jit::Node* gather, torch::jit::Graph& graph,
                                       const std::string& representative, const FsdpPlan& plan) {
  std::vector<const Unit*> units;
  torch::jit::Node* operands = gather->kind() == ops::gatherWait() ? gather->input(0)->node() : gather;
  torch::jit::Node* list = operands->input(0)->node();
  if (list->kind() != c10::prim::ListConstruct) return units;
  for (torch::jit::Value* element : list->inputs()) {
    if (element->node()->kind() == c10::prim::unchecked_cast) element = element->node()->input(0);
    if (element->node()->kind() != c10::prim::GetAttr) continue;
    auto owner = pathFromSelf(element->node()->input(0), graph.inputs().at(0));
    if (!owner) continue;
    const Unit* unit = plan.unitOfParam(joinPath(joinPath(representative, *owner), element->node()->s(c10::attr::name)));
    if (unit && std::find(units.begin(), units.end(), unit) == units.end()) units.push_back(unit);
  }
  return units;
}

int64_t gatheredBytes(torch::jit::Node* gather, torch::jit::Graph& graph,
                      const std::string& representative, const FsdpPlan& plan) {
  int64_t bytes = 0;
  for (const Unit* unit : unitsOfGather(gather, graph, representative, plan)) bytes += unit->bytes();
  return bytes;
}

int64_t openGatheredBytesAt(torch::jit::Node* anchor, torch::jit::Graph& graph,
                            const std::string& representative, const FsdpPlan& plan) {
  int64_t bytes = 0;
  for (torch::jit::Node* at = anchor; at; at = at->owningBlock()->owningNode()) {
    for (torch::jit::Node* node : at->owningBlock()->nodes()) {
      if (node == at) break;
      if (!ops::isGatherResult(node)) continue;
      torch::jit::Node* reshard = reshardOf(node);
      if (reshard && at->isBefore(reshard)) bytes += gatheredBytes(node, graph, representative, plan);
    }
  }
  return bytes;
}

}  // namespace fsdp_opt
