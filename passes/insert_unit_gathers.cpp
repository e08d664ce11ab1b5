// Pass insert-unit-gathers: explicit unshard/reshard around calls of units' forward methods.
//
// For every prim::CallMethod whose callee is an FSDP unit and whose method is one of the unit's
// forward methods, in any method graph and at any block depth (prim::Loop and prim::If bodies,
// unrolled ModuleList/Sequential calls), inserts in the CALLER's graph:
//   - before the call: prim::GetAttr chains to every parameter of the unit's group, a list, and
//     ONE fsdp::all_gather (one collective per unit);
//   - right after the call: the matching fsdp::reshard, then fsdp::backward_hook on the call's
//     outputs and inputs (what a backward through the call needs; nothing without grad mode).
// A call on `self` from a forward method of the same unit is left alone: the unit is already
// unsharded there, so `generate` calling `self.forward` gathers once, not twice.
// Assumes: specialize-unit-types ran (unit-ness is a function of the class type); otherwise a
// type shared by a unit and a plain instance is reported as an error.
// Guarantees: every rewritten call is immediately followed by its reshard; idempotent.
//
//   before: %y = prim::CallMethod[name="forward"](%block, %x)
//   after:  %w = prim::GetAttr[name="weight"](%fc) ...
//           %full : Tensor[] = fsdp::all_gather(%params, %rows, %unit_path)
//           %y = prim::CallMethod[name="forward"](%block, %x)
//           fsdp::reshard(%full, %unit_path)
//           fsdp::backward_hook(%params, %rows, %unit_path, %y, (%x))
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/module_tree.h"

#include <map>
#include <sstream>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "insert-unit-gathers";

// The unit every instance of a class type stands for, or an error when instances disagree.
bool unitsByType(torch::jit::Module& root, const FsdpPlan& plan, DiagnosticSink& diagnostics,
                 std::map<c10::ClassType*, const Unit*>& units) {
  std::map<c10::ClassType*, std::string> firstPath;
  bool ok = true;
  ModuleIndex index(root);
  for (const auto& [path, module] : index.modules()) {
    auto type = module.type().get();
    const Unit* unit = plan.unitAt(path);
    auto seen = firstPath.find(type);
    if (seen == firstPath.end()) {
      firstPath[type] = path;
      units[type] = unit;
      continue;
    }
    const Unit* other = units[type];
    bool differ = (unit == nullptr) != (other == nullptr);
    if (!differ && unit) {
      differ = unit->forwardMethods != other->forwardMethods || unit->params.size() != other->params.size();
      for (size_t i = 0; !differ && i < unit->params.size(); ++i) {
        differ = unit->params[i].shape != other->params[i].shape;
      }
    }
    if (differ) {
      diagnostics.error(kPassName, "modules '" + displayPath(seen->second) + "' and '" +
                                       displayPath(path) + "' share type " +
                                       type->name()->qualifiedName() +
                                       " but need different rewrites; run specialize-unit-types first");
      ok = false;
    }
  }
  return ok;
}

bool alreadyWrapped(torch::jit::Node* call) {
  torch::jit::Node* next = call->next();
  return next && next->kind() == ops::reshard();
}

}  // namespace

bool insertUnitGathers(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  torch::jit::Module& root = context.module();
  std::map<c10::ClassType*, const Unit*> units;
  if (!unitsByType(root, *plan, context.diagnostics(), units)) return false;
  addUnitPathAttributes(root, *plan);

  const int rewritten = forEachMethod(root, MethodScope::kEveryType, [&](const VisitedMethod& m) {
    const Unit* callerUnit = units[m.type.get()];
    torch::jit::Function* function = m.function;
    const std::shared_ptr<torch::jit::Graph>& graph = m.graph;
    const std::string& representative = m.modulePath;
    int count = 0;
    bool callerIsForward = callerUnit && callerUnit->hasForwardMethod(function->name());
    std::vector<torch::jit::Node*> calls;
    forEachNode(graph->block(), [&](torch::jit::Node* node) {
      if (node->kind() == c10::prim::CallMethod) calls.push_back(node);
    });
    for (torch::jit::Node* call : calls) {
      auto calleeType = call->input(0)->type()->cast<c10::ClassType>();
      if (!calleeType) continue;
      auto found = units.find(calleeType.get());
      if (found == units.end() || !found->second) continue;
      const Unit& unit = *found->second;
      const std::string& method = call->s(c10::attr::name);
      if (!unit.hasForwardMethod(method)) continue;
      bool onSelf = call->input(0) == graph->inputs().at(0);
      if (onSelf && callerIsForward) continue;
      if (alreadyWrapped(call)) continue;
      GatherOp gather = [&] {
        torch::jit::WithInsertPoint before(call);
        return insertUnitGather(*graph, call->input(0), unit, context.options().paramDtype);
      }();
      {
        torch::jit::WithInsertPoint after(call->next());
        insertReshard(*graph, gather);
        insertBackwardHook(*graph, gather, call->outputs(), call->inputs().slice(1),
                           context.options().maxUnshardedBytes);
      }
      ++count;
      auto relative = pathFromSelf(call->input(0), graph->inputs().at(0));
      std::string callee = relative ? displayPath(joinPath(representative, *relative)) : "?";
      std::ostringstream where;
      where << "call site rewritten: unit '" << callee << "' method " << method << " in "
            << m.label
            << (call->owningBlock() != graph->block() ? " (nested block)" : "");
      context.diagnostics().remark(kPassName, where.str());
    }
    return count;
  });
  context.statistics().add("call sites rewritten", rewritten);
  return rewritten > 0;
}

PassInfo insertUnitGathersPass() {
  return {kPassName, "fsdp::all_gather/fsdp::reshard around calls of units' forward methods", insertUnitGathers};
}

}  // namespace fsdp_opt
