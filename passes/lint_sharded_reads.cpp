// Pass lint-sharded-reads: what eager FSDP would silently compute on shards.
//
// Eager FSDP unshards a unit only around its registered forward methods. A parent that calls
// another method of a unit (a ViT's `forward_features`, a torchvision `_forward_impl`, a
// `generate` that is not registered) runs it on sharded parameters. Walking the call graph from
// the root's entry methods with eager FSDP's semantics, this pass warns at each such read,
// naming the method, the unit and the parameter, and the --forward-method flag that fixes it.
// The root unit is the exception: every root method is an entry method, and wrap-entry-methods
// gathers the root in each one that reads the root's group, so such a read is only a remark
// (FSDP2 would need register_fsdp_forward_method for it).
// Assumes: the plan is built; runs before the rewrite. Changes nothing.
// At --world-size=1 the warning is all (nothing is sharded); at larger world sizes the verifier
// rejects the same reads after the rewrite, since the output would compute on shards.
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/instance_walk.h"

#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "lint-sharded-reads";

}  // namespace

bool lintShardedReads(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  std::set<std::string> reported;
  WalkObserver observer;
  observer.onParamRead = [&](const ParamRead& read) {
    if (!read.unit || read.unsharded) return;
    const Frame& innermost = read.stack.back();
    const Frame* onUnit = nullptr;
    for (const Frame& frame : read.stack) {
      if (frame.modulePath == read.unit->path) onUnit = &frame;
    }
    std::string unitName = displayPath(read.unit->path);
    std::string where = "method '" + innermost.method + "' of '" + displayPath(innermost.modulePath) + "'";
    std::string message;
    if (onUnit && read.unit->path.empty()) {
      if (!reported.insert("::" + onUnit->method).second) return;
      context.diagnostics().remark(
          kPassName, "root method '" + onUnit->method + "' is not a forward method, but reads parameter '" +
                                    read.paramPath + "' (in " + where + ") that eager FSDP keeps sharded there; "
                                    "wrap-entry-methods gathers the root unit in its body");
      return;
    }
    if (onUnit) {
      if (!reported.insert(read.unit->path + "::" + onUnit->method).second) return;
      message = "method '" + onUnit->method + "' of unit '" + unitName +
                "' is not a forward method, but reads parameter '" + read.paramPath + "' (in " +
                where + ") while eager FSDP keeps it sharded; register it with --forward-method=" +
                unitName + ":" + onUnit->method;
    } else {
      if (!reported.insert(read.unit->path + "@" + innermost.modulePath + "::" + innermost.method).second) return;
      message = where + " reads parameter '" + read.paramPath + "' of unit '" + unitName +
                "' from outside the unit, where it is sharded; call a forward method of '" +
                unitName + "' instead, or do not make it a unit";
    }
    context.diagnostics().warning(kPassName, message);
  };
  walkFromEntryMethods(context.module(), *plan, GatherModel::EagerHooks, observer);
  return false;
}

PassInfo lintShardedReadsPass() {
  return {kPassName, "warn where a non-forward method reads a unit's parameters while sharded", lintShardedReads};
}

}  // namespace fsdp_opt
