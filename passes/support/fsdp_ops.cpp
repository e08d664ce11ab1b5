#include "fsdp_ops.h"

#include "module_tree.h"


namespace fsdp_opt {

namespace ops {
c10::Symbol allGather() { return c10::Symbol::fromQualString("fsdp::all_gather"); }
c10::Symbol reshard() { return c10::Symbol::fromQualString("fsdp::reshard"); }
c10::Symbol checkRank() { return c10::Symbol::fromQualString("fsdp::check_rank"); }
c10::Symbol releaseAll() { return c10::Symbol::fromQualString("fsdp::release_all"); }
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
      module->_ivalue()->setAttr(kUnitPathAttr, unit.path);
    } else {
      module->register_attribute(kUnitPathAttr, c10::StringType::get(), unit.path);
    }
  }
}

torch::jit::Node* insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule,
                                   const Unit& unit) {
  std::vector<torch::jit::Value*> params;
  std::vector<int64_t> fullRows;
  for (const auto& param : unit.params) {
    for (const auto& slot : param.slots) {
      params.push_back(insertGetAttrChain(graph, unitModule, relativePath(slot.path(), unit.path)));
      fullRows.push_back(param.rows());
    }
  }
  auto* list = graph.insertNode(graph.createList(c10::TensorType::get(), params))->output();
  auto* unitPath = graph.insertGetAttr(unitModule, kUnitPathAttr);
  auto* rows = graph.insertConstant(c10::IValue(fullRows));
  auto* gather = graph.insertNode(graph.create(ops::allGather(), {list, rows, unitPath}, 1));
  gather->output()->setType(c10::ListType::ofTensors());
  return gather;
}

torch::jit::Node* insertUnitReshard(torch::jit::Graph& graph, torch::jit::Node* gather) {
  return graph.insertNode(graph.create(ops::reshard(), {gather->output(), gather->input(2)}, 0));
}

}  // namespace fsdp_opt
