#include "fsdp_ops.h"

#include "module_tree.h"

#include <fsdp_opt/passes/pattern.h>

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <map>

namespace fsdp_opt {

namespace ops {
c10::Symbol allGather() { return c10::Symbol::fromQualString("fsdp::all_gather"); }
c10::Symbol reshard() { return c10::Symbol::fromQualString("fsdp::reshard"); }
c10::Symbol checkRank() { return c10::Symbol::fromQualString("fsdp::check_rank"); }
c10::Symbol releaseAll() { return c10::Symbol::fromQualString("fsdp::release_all"); }
c10::Symbol gatherStart() { return c10::Symbol::fromQualString("fsdp::all_gather_start"); }
c10::Symbol gatherWait() { return c10::Symbol::fromQualString("fsdp::all_gather_wait"); }
c10::Symbol rankAny() { return c10::Symbol::fromQualString("fsdp::rank_any"); }
c10::Symbol backwardHook() { return c10::Symbol::fromQualString("fsdp::backward_hook"); }
c10::Symbol replicatedParams() { return c10::Symbol::fromQualString("fsdp::replicated_params"); }
c10::Symbol unitCall() { return c10::Symbol::fromQualString("fsdp::unit_call"); }
bool isCollective(const torch::jit::Node* node) {
  auto kind = node->kind();
  return kind == allGather() || kind == gatherStart() || kind == gatherWait() || kind == rankAny();
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

// ---- GatherOp --------------------------------------------------------------------------------

std::optional<GatherOp> GatherOp::of(torch::jit::Node* node) {
  if (node->kind() == ops::allGather()) return GatherOp(node, node);
  if (node->kind() == ops::gatherWait()) return GatherOp(node->input(0)->node(), node);
  if (node->kind() == ops::gatherStart()) {
    for (const torch::jit::Use& use : node->output()->uses()) {
      if (use.user->kind() == ops::gatherWait()) return GatherOp(node, use.user);
    }
    return GatherOp(node, nullptr);
  }
  return std::nullopt;
}

torch::jit::Node* GatherOp::reshard() const {
  if (!result_) return nullptr;
  for (const torch::jit::Use& use : result_->output()->uses()) {
    if (use.user->kind() == ops::reshard()) return use.user;
  }
  return nullptr;
}

std::vector<torch::jit::Value*> GatherOp::paramReads() const {
  std::vector<torch::jit::Value*> reads;
  torch::jit::Node* list = paramList()->node();
  if (list->kind() != c10::prim::ListConstruct) return reads;
  for (torch::jit::Value* element : list->inputs()) {
    if (element->node()->kind() == c10::prim::unchecked_cast) element = element->node()->input(0);
    reads.push_back(element);
  }
  return reads;
}

torch::jit::Value* GatherOp::unitModule() const {
  torch::jit::Node* name = unitName()->node();
  if (name->kind() != c10::prim::GetAttr || name->s(c10::attr::name) != kUnitPathAttr) return nullptr;
  return name->input(0);
}

std::vector<GatherOp> gathersIn(torch::jit::Block* block) {
  std::vector<GatherOp> gathers;
  forEachNode(block, [&](torch::jit::Node* node) {
    // A split gather is listed once, at its start.
    if (node->kind() == ops::allGather() || node->kind() == ops::gatherStart()) gathers.push_back(*GatherOp::of(node));
  });
  return gathers;
}

bool isOperandRead(const torch::jit::Node* node) {
  auto kind = node->kind();
  return kind == c10::prim::GetAttr || kind == c10::prim::ListConstruct || kind == c10::prim::Constant ||
         kind == c10::prim::unchecked_cast || kind == c10::Symbol::fromQualString("aten::join");
}

std::optional<std::set<torch::jit::Node*>> operandReadsIn(torch::jit::Node* node,
                                                          const std::function<bool(torch::jit::Node*)>& inRegion) {
  std::set<torch::jit::Node*> reads;
  std::vector<torch::jit::Value*> work(node->inputs().begin(), node->inputs().end());
  while (!work.empty()) {
    torch::jit::Node* producer = work.back()->node();
    work.pop_back();
    if (!inRegion(producer)) continue;
    if (!isOperandRead(producer) || producer->owningBlock() != node->owningBlock()) return std::nullopt;
    if (reads.insert(producer).second) {
      for (torch::jit::Value* input : producer->inputs()) work.push_back(input);
    }
  }
  return reads;
}

bool isNoGradCopy(const std::string& methodName) { return methodName.rfind(kNoGradCopyPrefix, 0) == 0; }

c10::Symbol isGradEnabledSymbol() { return c10::Symbol::fromQualString("aten::is_grad_enabled"); }

torch::jit::Node* noGradChoiceOf(torch::jit::Graph& graph) {
  auto nodes = graph.block()->nodes();
  auto it = nodes.begin();
  if (it == nodes.end() || it->kind() != isGradEnabledSymbol()) return nullptr;
  torch::jit::Node* choice = *std::next(it);
  if (choice->kind() != c10::prim::If || choice->input() != it->output() || choice->blocks().size() != 2) return nullptr;
  for (torch::jit::Node* node : choice->blocks()[1]->nodes()) {
    if (node->kind() == c10::prim::CallMethod && isNoGradCopy(node->s(c10::attr::name))) return choice;
  }
  return nullptr;
}

bool isBackwardHookPart(const torch::jit::Node* node) {
  if (node->kind() == ops::backwardHook()) return true;
  if (node->kind() != c10::prim::TupleConstruct) return false;
  const auto& uses = node->output()->uses();
  return !uses.empty() && std::all_of(uses.begin(), uses.end(),
                                      [](const torch::jit::Use& use) { return use.user->kind() == ops::backwardHook(); });
}

// ---- builders --------------------------------------------------------------------------------

namespace {

// An all_gather of ready operands, at the insertion point.
GatherOp insertAllGather(torch::jit::Graph& graph, std::vector<torch::jit::Value*> operands) {
  torch::jit::Node* gather = graph.insertNode(graph.create(ops::allGather(), operands, 1));
  gather->output()->setType(c10::ListType::ofTensors());
  return *GatherOp::of(gather);
}

}  // namespace

GatherOp insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule, const Unit& unit,
                          std::optional<c10::ScalarType> paramDtype) {
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
  return insertAllGather(graph, operands);
}

torch::jit::Node* insertReshard(torch::jit::Graph& graph, const GatherOp& gather) {
  return graph.insertNode(graph.create(ops::reshard(), {gather.result()->output(), gather.unitName()}, 0));
}

void insertBackwardHook(torch::jit::Graph& graph, const GatherOp& gather, at::ArrayRef<torch::jit::Value*> outputs,
                        at::ArrayRef<torch::jit::Value*> inputs, std::optional<int64_t> maxUnshardedBytes) {
  if (outputs.empty()) return;
  torch::jit::Value* out = outputs.size() == 1 ? outputs[0] : graph.insertNode(graph.createTuple(outputs))->output();
  torch::jit::Value* in = graph.insertNode(graph.createTuple(inputs))->output();
  // At the top of the graph, where it dominates every block, out of the way of the call site.
  torch::jit::Value* budget = [&] {
    torch::jit::WithInsertPoint top(graph.block()->nodes().front());
    return graph.insertConstant(c10::IValue(maxUnshardedBytes.value_or(-1)));
  }();
  graph.insertNode(
      graph.create(ops::backwardHook(), {gather.paramList(), gather.fullRows(), gather.unitName(), out, in, budget}, 0));
}

GatherOp mergeGathers(torch::jit::Graph& graph, const GatherOp& first, const GatherOp& second) {
  std::vector<torch::jit::Value*> params;
  std::vector<int64_t> rows;
  for (const GatherOp* gather : {&first, &second}) {
    for (torch::jit::Value* param : gather->paramList()->node()->inputs()) params.push_back(param);
    for (int64_t r : torch::jit::toIValue(gather->fullRows())->toIntVector()) rows.push_back(r);
  }
  torch::jit::Node* firstReshard = first.reshard();
  torch::jit::Node* secondReshard = second.reshard();
  torch::jit::Node* lastReshard = firstReshard->isBefore(secondReshard) ? secondReshard : firstReshard;
  GatherOp merged = [&] {
    torch::jit::WithInsertPoint at(second.issue());
    auto* list = graph.insertNode(graph.createList(c10::TensorType::get(), params))->output();
    auto* rowsValue = graph.insertConstant(c10::IValue(rows));
    auto* separator = graph.insertConstant(c10::IValue(std::string(", ")));
    auto* names = graph.insertNode(graph.createList(c10::StringType::get(), {first.unitName(), second.unitName()}))->output();
    auto* unitNames = graph.insert(c10::Symbol::fromQualString("aten::join"), {separator, names});
    std::vector<torch::jit::Value*> operands{list, rowsValue, unitNames};
    if (first.paramDtype()) operands.push_back(first.paramDtype());
    return insertAllGather(graph, operands);
  }();
  {
    torch::jit::WithInsertPoint at(lastReshard);
    insertReshard(graph, merged);
  }
  firstReshard->destroy();
  secondReshard->destroy();
  second.issue()->destroy();
  first.issue()->destroy();
  return merged;
}

GatherOp splitGather(torch::jit::Graph& graph, const GatherOp& gather, torch::jit::Node* startAfter) {
  torch::jit::Node* allGather = gather.issue();
  std::vector<torch::jit::Value*> operands(allGather->inputs().begin(), allGather->inputs().end());
  torch::jit::Node* start = graph.create(ops::gatherStart(), operands, 1);
  start->output()->setType(c10::IntType::get());
  start->insertAfter(startAfter);
  torch::jit::Node* wait = graph.create(ops::gatherWait(), {start->output()}, 1);
  wait->output()->setType(c10::ListType::ofTensors());
  wait->insertBefore(allGather);
  allGather->output()->replaceAllUsesWith(wait->output());
  allGather->destroy();
  return *GatherOp::of(wait);
}

// ---- units -----------------------------------------------------------------------------------

std::vector<const Unit*> unitsOf(const GatherOp& gather, const FsdpPlan& plan, const ParamPathOf& pathOf) {
  std::vector<const Unit*> units;
  for (torch::jit::Value* read : gather.paramReads()) {
    auto path = pathOf(read);
    const Unit* unit = path ? plan.unitOfParam(*path) : nullptr;
    if (unit && std::find(units.begin(), units.end(), unit) == units.end()) units.push_back(unit);
  }
  return units;
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

GraphGathers::GraphGathers(torch::jit::Graph& graph, std::string representative, const FsdpPlan& plan)
    : graph_(graph), representative_(std::move(representative)), plan_(plan) {}

std::vector<const Unit*> GraphGathers::units(const GatherOp& gather) const {
  torch::jit::Value* self = graph_.inputs().at(0);
  return unitsOf(gather, plan_, [&](torch::jit::Value* read) -> std::optional<std::string> {
    if (read->node()->kind() != c10::prim::GetAttr) return std::nullopt;
    auto owner = pathFromSelf(read->node()->input(0), self);
    if (!owner) return std::nullopt;
    return joinPath(joinPath(representative_, *owner), read->node()->s(c10::attr::name));
  });
}

const Unit* GraphGathers::unit(const GatherOp& gather) const {
  auto found = units(gather);
  return found.size() == 1 ? found.front() : nullptr;
}

int64_t GraphGathers::bytes(const GatherOp& gather) const {
  int64_t total = 0;
  for (const Unit* unit : units(gather)) total += unit->bytes();
  return total;
}

int64_t GraphGathers::openBytesAt(torch::jit::Node* anchor) const {
  int64_t total = 0;
  for (torch::jit::Node* at = anchor; at; at = at->owningBlock()->owningNode()) {
    for (torch::jit::Node* node : at->owningBlock()->nodes()) {
      if (node == at) break;
      if (node->kind() != ops::allGather() && node->kind() != ops::gatherWait()) continue;
      GatherOp gather = *GatherOp::of(node);
      torch::jit::Node* reshard = gather.reshard();
      if (reshard && at->isBefore(reshard)) total += bytes(gather);
    }
  }
  return total;
}

// ---- covered gathers ---------------------------------------------------------------------------

namespace {

// Unit -> the reshards of the gathers that hold it open at this point (in this block or one
// around it).
using OpenGathers = std::map<const Unit*, std::vector<torch::jit::Node*>>;

// Whether an open gather of `unit` stays open until after `reshard`: its own reshard is in a
// block around reshard's (so after all of it), or later in the same block.
bool heldThrough(const OpenGathers& open, const Unit* unit, torch::jit::Node* reshard) {
  auto found = open.find(unit);
  if (found == open.end()) return false;
  for (torch::jit::Node* outer : found->second) {
    if (outer->owningBlock() != reshard->owningBlock() || reshard->isBefore(outer)) return true;
  }
  return false;
}

void opens(OpenGathers& open, const std::vector<const Unit*>& units, torch::jit::Node* reshard) {
  for (const Unit* unit : units) open[unit].push_back(reshard);
}

void closes(OpenGathers& open, const std::vector<const Unit*>& units, torch::jit::Node* reshard) {
  for (const Unit* unit : units) {
    auto& reshards = open[unit];
    reshards.erase(std::remove(reshards.begin(), reshards.end(), reshard), reshards.end());
  }
}

void collectCovered(torch::jit::Block* block, const GraphGathers& gathers, OpenGathers open,
                    std::vector<GatherOp>& covered) {
  std::map<torch::jit::Node*, std::vector<const Unit*>> waits;  // a split gather's wait -> units
  std::map<torch::jit::Node*, std::vector<const Unit*>> reshards;  // reshard -> units it closes
  for (torch::jit::Node* node : block->nodes()) {
    auto kind = node->kind();
    if (kind == ops::allGather() || kind == ops::gatherStart()) {
      GatherOp gather = *GatherOp::of(node);
      std::vector<const Unit*> units = gathers.units(gather);
      torch::jit::Node* reshard = gather.reshard();
      // Only the reshard may read a covered gather's list: nothing else needs rewiring.
      bool isCovered = !units.empty() && reshard && gather.result()->output()->uses().size() == 1;
      for (const Unit* unit : units) isCovered = isCovered && heldThrough(open, unit, reshard);
      // A unit without parameters (`--fsdp-unit='**'` makes a Dropout one) gathers nothing and
      // the runtime issues nothing for it, wherever it is.
      torch::jit::Node* list = gather.paramList()->node();
      if (reshard && list->kind() == c10::prim::ListConstruct && list->inputs().empty() &&
          gather.result()->output()->uses().size() == 1) {
        isCovered = true;
      }
      if (isCovered) {
        covered.push_back(gather);
      } else if (reshard && kind == ops::allGather()) {
        opens(open, units, reshard);
        reshards[reshard] = units;
      } else if (reshard) {
        waits[gather.result()] = units;
        reshards[reshard] = units;
      }
    } else if (kind == ops::gatherWait()) {
      auto units = waits.find(node);
      if (units != waits.end()) opens(open, units->second, GatherOp::of(node)->reshard());
    } else if (kind == ops::reshard()) {
      auto units = reshards.find(node);
      if (units != reshards.end()) closes(open, units->second, node);
    }
    for (torch::jit::Block* nested : node->blocks()) collectCovered(nested, gathers, open, covered);
  }
}

}  // namespace

std::vector<GatherOp> coveredGathers(torch::jit::Block* block, const GraphGathers& gathers) {
  std::vector<GatherOp> covered;
  collectCovered(block, gathers, {}, covered);
  return covered;
}

void removeGather(const GatherOp& gather) {
  const auto& listUses = gather.paramList()->uses();
  bool trained = std::any_of(listUses.begin(), listUses.end(),
                             [](const torch::jit::Use& use) { return use.user->kind() == ops::backwardHook(); });
  if (trained) {
    torch::jit::Graph& graph = *gather.issue()->owningGraph();
    torch::jit::WithInsertPoint at(gather.result() ? gather.result() : gather.issue());  // right before the call
    graph.insertNode(graph.create(ops::unitCall(), {gather.unitName()}, 0));
  }
  if (torch::jit::Node* reshard = gather.reshard()) reshard->destroy();
  if (gather.isSplit() && gather.result()) gather.result()->destroy();
  gather.issue()->destroy();
}

}  // namespace fsdp_opt
