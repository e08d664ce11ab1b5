#include "instance_walk.h"

#include "fsdp_ops.h"
#include "module_tree.h"

#include <fsdp_opt/pattern.h>

#include <algorithm>
#include <map>
#include <set>

namespace fsdp_opt {
namespace {

using Unsharded = std::map<const Unit*, int>;  // unit -> gather depth

// A parameter read whose value only goes into lists consumed by fsdp:: ops: the operands of a
// gather or reshard, which handle the shard themselves.
bool onlyFeedsFsdpOps(torch::jit::Value* value) {
  for (const torch::jit::Use& use : value->uses()) {
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
         const WalkObserver& observer)
      : index_(root), plan_(plan), model_(model), observer_(observer) {}

  void walkEntry(const std::string& method) {
    visited_.clear();
    Unsharded unsharded;
    const Unit* rootUnit = plan_.unitAt("");
    if (model_ == GatherModel::EagerHooks && rootUnit && rootUnit->hasForwardMethod(method)) {
      unsharded[rootUnit] = 1;
    }
    walkMethod("", method, unsharded, 0);
  }

 private:
  struct Scope {
    std::map<torch::jit::Value*, std::string> modules;  // value -> instance path
    std::map<torch::jit::Value*, std::string> params;   // value -> parameter path
    std::map<torch::jit::Value*, std::vector<const Unit*>> gathers;  // all_gather output -> units
  };

  static std::string key(const std::string& path, const std::string& method,
                         const Unsharded& unsharded, int loopDepth) {
    std::string k = path + "::" + method + "|" + std::to_string(loopDepth > 0);
    for (const auto& [unit, depth] : unsharded) {
      if (depth > 0) k += "|" + unit->path;
    }
    return k;
  }

  void walkMethod(const std::string& path, const std::string& method, Unsharded unsharded,
                  int loopDepth) {
    auto module = index_.find(path);
    if (!module) return;
    auto found = module->find_method(method);
    if (!found) return;
    if (!visited_.insert(key(path, method, unsharded, loopDepth)).second) return;
    stack_.push_back({path, method});
    auto graph = found->graph();
    Scope scope;
    scope.modules[graph->inputs().at(0)] = path;
    walkBlock(graph->block(), scope, unsharded, loopDepth);
    stack_.pop_back();
  }

  void walkBlock(torch::jit::Block* block, Scope& scope, Unsharded& unsharded, int loopDepth) {
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::prim::GetAttr) {
        visitGetAttr(node, scope, unsharded);
      } else if (node->kind() == c10::prim::CallMethod) {
        visitCall(node, scope, unsharded, loopDepth);
      } else if (model_ == GatherModel::ExplicitOps && ops::isGatherResult(node)) {
        visitGather(node, scope, unsharded, loopDepth);
      } else if (model_ == GatherModel::ExplicitOps && node->kind() == ops::reshard()) {
        auto gather = scope.gathers.find(node->input(0));
        if (gather != scope.gathers.end()) {
          // A unit back at zero leaves the map: it is copied into every call and nested block,
          // and must stay as small as what is open (not every unit ever gathered).
          for (const Unit* unit : gather->second) {
            auto open = unsharded.find(unit);
            if (open != unsharded.end() && --open->second <= 0) unsharded.erase(open);
          }
        }
      }
      int nestedDepth = loopDepth + (node->kind() == c10::prim::Loop ? 1 : 0);
      for (torch::jit::Block* nested : node->blocks()) {
        Unsharded branch = unsharded;
        walkBlock(nested, scope, branch, nestedDepth);
      }
    }
  }

  void visitGetAttr(torch::jit::Node* node, Scope& scope, const Unsharded& unsharded) {
    auto owner = scope.modules.find(node->input(0));
    if (owner == scope.modules.end()) return;
    auto module = index_.find(owner->second);
    const std::string& field = node->s(c10::attr::name);
    auto type = module->type();
    auto slot = type->findAttributeSlot(field);
    if (!slot) return;
    std::string path = joinPath(owner->second, field);
    if (type->getAttribute(*slot)->cast<c10::ClassType>() &&
        type->getAttribute(*slot)->cast<c10::ClassType>()->is_module()) {
      scope.modules[node->output()] = path;
      return;
    }
    if (!type->is_parameter(*slot)) return;
    scope.params[node->output()] = path;
    if (onlyFeedsFsdpOps(node->output())) return;  // the gather's own operand list
    const Unit* unit = plan_.unitOfParam(path);
    bool isUnsharded = unit && unsharded.count(unit) && unsharded.at(unit) > 0;
    if (observer_.onParamRead) observer_.onParamRead({path, unit, isUnsharded, node, stack_});
  }

  void visitCall(torch::jit::Node* node, Scope& scope, const Unsharded& unsharded, int loopDepth) {
    auto callee = scope.modules.find(node->input(0));
    if (callee == scope.modules.end()) return;
    const std::string& method = node->s(c10::attr::name);
    Unsharded inside = unsharded;
    if (model_ == GatherModel::EagerHooks) {
      const Unit* unit = plan_.unitAt(callee->second);
      if (unit && unit->hasForwardMethod(method)) ++inside[unit];
    }
    walkMethod(callee->second, method, inside, loopDepth);
  }

  // A gather unshards every unit whose parameters are in its list (several for a bucket).
  void visitGather(torch::jit::Node* node, Scope& scope, Unsharded& unsharded, int loopDepth) {
    std::vector<const Unit*> units;
    // A split gather's parameters are the operands of the start its wait completes.
    torch::jit::Node* operands = node->kind() == ops::gatherWait() ? node->input(0)->node() : node;
    torch::jit::Node* list = operands->input(0)->node();
    if (list->kind() == c10::prim::ListConstruct) {
      for (torch::jit::Value* element : list->inputs()) {
        if (element->node()->kind() == c10::prim::unchecked_cast) element = element->node()->input(0);
        auto param = scope.params.find(element);
        const Unit* unit = param == scope.params.end() ? nullptr : plan_.unitOfParam(param->second);
        if (unit && std::find(units.begin(), units.end(), unit) == units.end()) units.push_back(unit);
      }
    }
    scope.gathers[node->output()] = units;
    bool issuesCollective = false;
    for (const Unit* unit : units) {
      issuesCollective = issuesCollective || unsharded[unit] == 0;
      ++unsharded[unit];
    }
    if (!units.empty() && observer_.onGather) observer_.onGather({units, issuesCollective, loopDepth, stack_});
  }

  ModuleIndex index_;
  const FsdpPlan& plan_;
  GatherModel model_;
  const WalkObserver& observer_;
  std::vector<Frame> stack_;
  std::set<std::string> visited_;
};

}  // namespace

void walkFromEntryMethods(const torch::jit::Module& root, const FsdpPlan& plan, GatherModel model,
                          const WalkObserver& observer, const std::string& entryMethod) {
  Walker walker(root, plan, model, observer);
  for (torch::jit::Function* function : root.type()->methods()) {
    if (!entryMethod.empty() && function->name() != entryMethod) continue;
    walker.walkEntry(function->name());
  }
}

}  // namespace fsdp_opt
