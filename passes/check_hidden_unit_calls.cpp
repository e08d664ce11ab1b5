// Pass check-hidden-unit-calls: refuses calls of modules that the rewrite cannot see.
//
// Every gather goes in a caller's graph, around a prim::CallMethod whose callee is known from its
// class type. Two ways of calling a module hide the callee from that, so the call would run on
// the unit's shards: with a shard's rows LayerNorm and Linear fail on a shape, but an embedding
// looks up the wrong rows on every rank but the first, silently.
//  - torch.jit.fork (and torch.jit._awaitable): the forked call is in a subgraph that runs as a
//    task of its own, where no gather of the caller's can be placed around it;
//  - a call through a module interface: an attribute declared with an interface type, a method
//    argument of one, a ModuleList or ModuleDict element chosen when it runs (`b: MyInterface =
//    self.blocks[i]`) that lower-indexed-module-calls could not rewrite because it is used other
//    than as a callee. The call names the interface, not the module.
// So a module handed to a forked task, or called through an interface, is an error when it may be
// one whose subtree holds a unit's parameters (at --world-size=1, where nothing is sharded, a
// warning). Which modules a call through an interface may reach: the attribute's module, the
// indexed container's children, otherwise every module whose class implements the interface.
// A forked function of tensors read in the caller is fine: the reads are the caller's.
// Assumes: the plan is built. Changes nothing.
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/module_tree.h"

#include <optional>
#include <set>
#include <utility>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "check-hidden-unit-calls";

// The first parameter slot of a unit's group at or below `path`; empty when none.
std::string firstUnitParameterWithin(const FsdpPlan& plan, const std::string& path) {
  for (const auto& unit : plan.units) {
    for (const auto& param : unit.params) {
      for (const auto& slot : param.slots) {
        if (isWithin(slot.ownerPath, path)) return slot.path();
      }
    }
  }
  return "";
}

class HiddenCallCheck {
 public:
  HiddenCallCheck(const torch::jit::Module& root, const FsdpPlan& plan, DiagnosticSink& diagnostics, bool sharded)
      : index_(root), plan_(plan), diagnostics_(diagnostics), sharded_(sharded) {}

  void check(const VisitedMethod& method) {
    callerPaths_.clear();
    for (const auto& [path, module] : index_.modules()) {
      if (module.type() == method.type) callerPaths_.push_back(path);
    }
    visitBlock(method.graph->block(), method);
  }

 private:
  void visitBlock(torch::jit::Block* block, const VisitedMethod& method) {
    forEachNode(block, [&](torch::jit::Node* node) {
      if (node->kind() == c10::prim::CallMethod) checkInterfaceCall(node, method);
      if (!node->hasAttribute(c10::attr::Subgraph)) return;
      for (torch::jit::Value* input : node->inputs()) checkHandedOver(input, node, method);
      visitBlock(node->g(c10::attr::Subgraph)->block(), method);
    });
  }

  // The module instances `value` may be, when the graph says (a GetAttr chain from `self`, for
  // every instance of the method's type); empty otherwise.
  std::vector<std::string> instancesFromSelf(torch::jit::Value* value, const VisitedMethod& method) const {
    std::vector<std::string> paths;
    auto graph = value->owningGraph();
    if (graph != method.graph.get()) return paths;  // inside a subgraph: `self` is not in scope
    if (auto relative = pathFromSelf(value, graph->inputs().at(0))) {
      for (const std::string& caller : callerPaths_) paths.push_back(joinPath(caller, *relative));
    }
    return paths;
  }

  std::vector<std::string> instancesOfType(const c10::TypePtr& type) const {
    std::vector<std::string> paths;
    for (const auto& [path, module] : index_.modules()) {
      if (module.type()->isSubtypeOf(*type)) paths.push_back(path);
    }
    return paths;
  }

  // The first of `candidates` that holds a unit's parameter, with that parameter.
  std::optional<std::pair<std::string, std::string>> holdingUnitParameter(const std::vector<std::string>& candidates) const {
    for (const std::string& path : candidates) {
      std::string param = firstUnitParameterWithin(plan_, path);
      if (!param.empty()) return std::make_pair(path, param);
    }
    return std::nullopt;
  }

  void checkInterfaceCall(torch::jit::Node* call, const VisitedMethod& method) {
    torch::jit::Value* callee = call->input(0);
    auto interface = callee->type()->cast<c10::InterfaceType>();
    if (!interface || !interface->is_module()) return;
    std::vector<std::string> candidates = instancesFromSelf(callee, method);
    std::string how = "an attribute of interface type";
    if (candidates.empty() && callee->node()->kind() == c10::prim::ModuleContainerIndex) {
      how = "a module container indexed when the call runs";
      for (const std::string& container : instancesFromSelf(callee->node()->input(0), method)) {
        for (const auto& [path, module] : index_.modules()) {
          if (parentPath(path) == container) candidates.push_back(path);
        }
      }
    }
    if (candidates.empty()) {
      how = "a value of interface type";
      candidates = instancesOfType(interface);
    }
    auto held = holdingUnitParameter(candidates);
    if (!held) return;
    report(where(method) + " calls '" + call->s(c10::attr::name) + "' through the module interface " +
           interface->name()->qualifiedName() + " (" + how + "), which may reach module '" + displayPath(held->first) +
           "', and it holds parameter '" + held->second + "' of unit '" + unitName(held->second) +
           "'; fsdp-opt cannot place a gather around a call whose module it cannot name, so the call would run on "
           "shards: call the module through its own class");
  }

  // A module value given to a subgraph that runs as a task of its own.
  void checkHandedOver(torch::jit::Value* input, torch::jit::Node* node, const VisitedMethod& method) {
    auto type = input->type();
    auto moduleClass = type->cast<c10::ClassType>();
    auto interface = type->cast<c10::InterfaceType>();
    if (!(moduleClass && moduleClass->is_module()) && !(interface && interface->is_module())) return;
    std::vector<std::string> candidates = instancesFromSelf(input, method);
    if (candidates.empty()) candidates = instancesOfType(type);
    auto held = holdingUnitParameter(candidates);
    if (!held) return;
    report(where(method) + " hands module '" + displayPath(held->first) + "' to " + node->kind().toQualString() +
           " (torch.jit.fork or an awaitable), and it holds parameter '" + held->second + "' of unit '" +
           unitName(held->second) + "'; the forked call runs apart from its caller, where fsdp-opt cannot gather "
           "around it, so it would run on shards: call the module directly");
  }

  static std::string where(const VisitedMethod& method) {
    return "method '" + method.function->name() + "' of '" + displayPath(method.modulePath) + "'";
  }

  std::string unitName(const std::string& param) const {
    const Unit* unit = plan_.unitOfParam(param);
    return unit ? displayPath(unit->path) : "?";
  }

  void report(const std::string& message) {
    if (reported_.insert(message).second) diagnostics_.errorWhenSharded(kPassName, message, sharded_);
  }

  ModuleIndex index_;
  const FsdpPlan& plan_;
  DiagnosticSink& diagnostics_;
  bool sharded_;
  std::vector<std::string> callerPaths_;  // the instances of the method being checked
  std::set<std::string> reported_;
};

}  // namespace

bool checkHiddenUnitCalls(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  HiddenCallCheck check(context.module(), *plan, context.diagnostics(), context.options().worldSize > 1);
  forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& method) {
    check.check(method);
    return 0;
  });
  return false;
}

PassInfo checkHiddenUnitCallsPass() {
  return {kPassName, "refuse units called through torch.jit.fork or a module interface, which the rewrite cannot see",
          checkHiddenUnitCalls};
}

}  // namespace fsdp_opt
