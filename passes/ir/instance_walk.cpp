#include "instance_walk.h"

#include "fsdp_ops.h"
#include "module_tree.h"

#include <fsdp_opt/passes/pattern.h>

#include <algorithm>
#include <map>
#include <set>

namespace fsdp_opt {
namespace {

using Counts = std::map<const Unit*, int>;  // unit -> depth; a unit back at zero leaves the map

// What is unsharded at a point of the walk. It is copied into every call and nested block, so it
// holds only what is open, never every unit ever gathered.
struct UnitState {
  Counts unsharded;  // gathered (all_gather, or a start's wait), not resharded yet
  Counts inFlight;   // started, not waited for yet: their full buffers already exist

  bool isUnsharded(const Unit* unit) const { return unsharded.count(unit) > 0; }
};

void release(Counts& counts, const Unit* unit) {
  auto open = counts.find(unit);
  if (open != counts.end() && --open->second <= 0) counts.erase(open);
}

// A parameter read whose value only goes into fsdp:: ops, directly (an agreement's device
// witness, read for its device alone) or through the lists a gather or reshard takes: those
// ops handle the shard themselves.
bool onlyFeedsFsdpOps(torch::jit::Value* value) {
  for (const torch::jit::Use& use : value->uses()) {
    if (ops::isFsdpOp(use.user)) continue;
    if (use.user->kind() == c10::prim::unchecked_cast) {  // an Optional[Tensor] parameter
      if (!onlyFeedsFsdpOps(use.user->output())) return false;
      continue;
    }
    if (use.user->kind() != c10::prim::ListConstruct) return false;
    for (const torch::jit::Use& listUse : use.user->output()->uses()) {
      if (!ops::isFsdpOp(listUse.user)) return false;
    }
  }
  return !value->uses().empty();
}

class Walker {
 public:
  Walker(const torch::jit::Module& root, const FsdpPlan& plan, GatherModel model,
         const WalkObserver& observer, Revisits revisits)
      : index_(root), plan_(plan), model_(model), observer_(observer), revisits_(revisits) {}

  void walkEntry(const std::string& method) {
    visited_.clear();
    UnitState state;
    const Unit* rootUnit = plan_.unitAt("");
    if (model_ == GatherModel::EagerHooks && rootUnit && rootUnit->hasForwardMethod(method)) {
      state.unsharded[rootUnit] = 1;
    }
    walkMethod("", method, state, 0);
  }

 private:
  struct Scope {
    std::map<torch::jit::Value*, std::string> modules;  // value -> instance path
    std::map<torch::jit::Value*, std::string> params;   // value -> parameter path
    std::map<torch::jit::Node*, std::vector<const Unit*>> gathers;  // issue node -> units
  };

  static std::string key(const std::string& path, const std::string& method, const UnitState& state,
                         int loopDepth) {
    std::string k = path + "::" + method + "|" + std::to_string(loopDepth > 0);
    for (const auto& [unit, depth] : state.unsharded) k += "|" + unit->path;
    k += "|>";
    for (const auto& [unit, depth] : state.inFlight) k += "|" + unit->path;
    return k;
  }

  void walkMethod(const std::string& path, const std::string& method, UnitState state, int loopDepth) {
    auto module = index_.find(path);
    if (!module) return;
    auto found = module->find_method(method);
    if (!found) return;
    if (!visited_.insert(key(path, method, state, loopDepth)).second && revisits_ == Revisits::Skip) return;
    stack_.push_back({path, method});
    auto graph = found->graph();
    Scope scope;
    scope.modules[graph->inputs().at(0)] = path;
    walkBlock(graph->block(), scope, state, loopDepth);
    stack_.pop_back();
  }

  void walkBlock(torch::jit::Block* block, Scope& scope, UnitState& state, int loopDepth) {
    for (torch::jit::Node* node : block->nodes()) {
      auto kind = node->kind();
      if (kind == c10::prim::GetAttr) {
        visitGetAttr(node, scope, state);
      } else if (kind == c10::prim::SetAttr) {
        visitSetAttr(node, scope);
      } else if (kind == c10::prim::CallMethod) {
        visitCall(node, scope, state, loopDepth);
      } else if (model_ == GatherModel::ExplicitOps && GatherOp::of(node)) {
        visitGather(*GatherOp::of(node), node, scope, state, loopDepth);
      } else if (model_ == GatherModel::ExplicitOps && kind == ops::reshard()) {
        auto gather = GatherOp::of(node->input(0)->node());
        auto units = gather ? scope.gathers.find(gather->issue()) : scope.gathers.end();
        if (units != scope.gathers.end()) {
          for (const Unit* unit : units->second) release(state.unsharded, unit);
        }
      }
      const bool isLoop = kind == c10::prim::Loop;
      int nestedDepth = loopDepth + (isLoop ? 1 : 0);
      if (isLoop) loops_.push_back(node);
      bool isBranch = kind == c10::prim::If && observer_.onBranch;
      for (size_t arm = 0; arm < node->blocks().size(); ++arm) {
        if (isBranch) observer_.onBranch(node, static_cast<int>(arm));
        UnitState branch = state;
        walkBlock(node->blocks()[arm], scope, branch, nestedDepth);
      }
      if (isBranch) observer_.onBranch(node, -1);
      if (isLoop) loops_.pop_back();
    }
  }

  // The module path a module-typed value denotes and the slot `node` reads or writes on it.
  std::optional<std::pair<std::string, size_t>> slotOf(torch::jit::Node* node, Scope& scope) {
    auto owner = scope.modules.find(node->input(0));
    if (owner == scope.modules.end()) return std::nullopt;
    auto slot = index_.find(owner->second)->type()->findAttributeSlot(node->s(c10::attr::name));
    if (!slot) return std::nullopt;
    return std::make_pair(joinPath(owner->second, node->s(c10::attr::name)), *slot);
  }

  void visitGetAttr(torch::jit::Node* node, Scope& scope, const UnitState& state) {
    auto slot = slotOf(node, scope);
    if (!slot) return;
    auto type = index_.find(scope.modules.at(node->input(0)))->type();
    auto attribute = type->getAttribute(slot->second)->cast<c10::ClassType>();
    if (attribute && attribute->is_module()) {
      scope.modules[node->output()] = slot->first;
      return;
    }
    if (!type->is_parameter(slot->second)) return;
    scope.params[node->output()] = slot->first;
    if (onlyFeedsFsdpOps(node->output())) return;  // the gather's own operand list
    const Unit* unit = plan_.unitOfParam(slot->first);
    if (observer_.onParamRead) observer_.onParamRead({slot->first, unit, unit && state.isUnsharded(unit), node, stack_});
  }

  void visitSetAttr(torch::jit::Node* node, Scope& scope) {
    auto slot = slotOf(node, scope);
    if (!slot || !index_.find(scope.modules.at(node->input(0)))->type()->is_parameter(slot->second)) return;
    if (observer_.onParamWrite) observer_.onParamWrite({slot->first, plan_.unitOfParam(slot->first), node, stack_});
  }

  void visitCall(torch::jit::Node* node, Scope& scope, const UnitState& state, int loopDepth) {
    auto callee = scope.modules.find(node->input(0));
    if (callee == scope.modules.end()) return;
    const std::string& method = node->s(c10::attr::name);
    UnitState inside = state;
    if (model_ == GatherModel::EagerHooks) {
      const Unit* unit = plan_.unitAt(callee->second);
      if (unit && unit->hasForwardMethod(method)) ++inside.unsharded[unit];
    }
    walkMethod(callee->second, method, inside, loopDepth);
  }

  // A gather unshards every unit whose parameters are in its list (several for a bucket): an
  // all_gather at once, a split one at its wait, with its buffers in flight from its start.
  void visitGather(const GatherOp& gather, torch::jit::Node* node, Scope& scope, UnitState& state, int loopDepth) {
    if (node == gather.issue()) {
      scope.gathers[node] = unitsOf(gather, plan_, [&](torch::jit::Value* read) -> std::optional<std::string> {
        auto param = scope.params.find(read);
        if (param == scope.params.end()) return std::nullopt;
        return param->second;
      });
    }
    const std::vector<const Unit*>& units = scope.gathers[gather.issue()];
    if (units.empty()) return;
    bool opensBuffers = node == gather.issue();
    if (gather.isSplit() && node == gather.issue()) {
      for (const Unit* unit : units) ++state.inFlight[unit];
    } else {
      bool issuesCollective = false;
      for (const Unit* unit : units) {
        issuesCollective = issuesCollective || !state.isUnsharded(unit);
        if (gather.isSplit()) release(state.inFlight, unit);
        ++state.unsharded[unit];
      }
      if (observer_.onGather) observer_.onGather({units, issuesCollective, loopDepth, stack_, loops_});
    }
    if (opensBuffers && observer_.onUnitsOpened) {
      std::set<const Unit*> open;
      for (const auto& [unit, depth] : state.unsharded) open.insert(unit);
      for (const auto& [unit, depth] : state.inFlight) open.insert(unit);
      std::vector<const Unit*> sorted(open.begin(), open.end());
      std::sort(sorted.begin(), sorted.end(), [](const Unit* a, const Unit* b) { return a->path < b->path; });
      observer_.onUnitsOpened({sorted, stack_, loops_});
    }
  }

  ModuleIndex index_;
  const FsdpPlan& plan_;
  GatherModel model_;
  const WalkObserver& observer_;
  Revisits revisits_;
  std::vector<Frame> stack_;
  std::vector<torch::jit::Node*> loops_;
  std::set<std::string> visited_;
};

}  // namespace

void walkFromEntryMethods(const torch::jit::Module& root, const FsdpPlan& plan, GatherModel model,
                          const WalkObserver& observer, const std::string& entryMethod, Revisits revisits) {
  Walker walker(root, plan, model, observer, revisits);
  for (torch::jit::Function* function : root.type()->methods()) {
    if (!entryMethod.empty() && function->name() != entryMethod) continue;
    walker.walkEntry(function->name());
  }
}

}  // namespace fsdp_opt
