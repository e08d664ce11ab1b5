// Pass verify-fsdp: the invariants of SPEC section 5 on the rewritten module.
//
// 1. Pairing: every fsdp::all_gather output is used by exactly one fsdp::reshard, later in the
//    same block, and every reshard consumes a gather. Blocks in TorchScript have one exit (a
//    raise leaves through fsdp::release_all), so this means matched on every path.
// 2. Survival: TorchScript's own dead-code elimination keeps every fsdp:: op (their schemas are
//    conservative, i.e. side-effecting).
// 3. No sharded reads: walking from every entry method with the IR's own gathers, no parameter of
//    a unit is read while the unit is sharded, and none is reassigned (prim::SetAttr: the new
//    tensor would be taken for a shard). Only at world sizes above 1; at 1 nothing is sharded
//    and lint-sharded-reads has already warned.
// 4. The budget: the program's static peak of unsharded bytes is within --max-unsharded-bytes
//    (check-unsharded-budget refused a budget below the least peak; this catches a schedule
//    that went over it).
// Changes nothing; runs after the default pipeline and, with --verify-each, after every pass.
#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/instance_walk.h"
#include "ir/module_tree.h"

#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "verify-fsdp";

int countFsdpOps(torch::jit::Block* block) {
  int count = 0;
  forEachNode(block, [&](torch::jit::Node* node) { count += ops::isFsdpOp(node) ? 1 : 0; });
  return count;
}

// A result used exactly once, by a node of `kind` later in the same block.
void checkSingleLaterUse(const std::string& where, torch::jit::Node* node, c10::Symbol kind,
                         const std::string& what, DiagnosticSink& diagnostics) {
  int uses = 0;
  for (const torch::jit::Use& use : node->output()->uses()) {
    if (use.user->kind() != kind) continue;
    ++uses;
    if (use.user->owningBlock() != node->owningBlock() || !node->isBefore(use.user)) {
      diagnostics.error(kPassName, where + ": " + what + " is not in the block of its producer, after it");
    }
  }
  if (uses != 1) {
    diagnostics.error(kPassName, where + ": " + std::to_string(uses) + " " + what + " (expected exactly 1)");
  }
}

void checkPairing(const std::string& where, torch::jit::Graph& graph, DiagnosticSink& diagnostics) {
  forEachNode(graph.block(), [&](torch::jit::Node* node) {
    if (node->kind() == ops::gatherStart()) {
      checkSingleLaterUse(where, node, ops::gatherWait(), "fsdp::all_gather_wait for an fsdp::all_gather_start", diagnostics);
    } else if (node->kind() == ops::gatherWait()) {
      if (node->input(0)->node()->kind() != ops::gatherStart()) {
        diagnostics.error(kPassName, where + ": an fsdp::all_gather_wait does not consume an fsdp::all_gather_start");
      }
      checkSingleLaterUse(where, node, ops::reshard(), "fsdp::reshard for an fsdp::all_gather_wait", diagnostics);
    } else if (node->kind() == ops::allGather()) {
      int reshards = 0;
      for (const torch::jit::Use& use : node->output()->uses()) {
        if (use.user->kind() != ops::reshard()) continue;
        ++reshards;
        if (use.user->owningBlock() != node->owningBlock() || !node->isBefore(use.user)) {
          diagnostics.error(kPassName, where + ": a reshard is not in the block of its gather, after it");
        }
      }
      if (reshards != 1) {
        diagnostics.error(kPassName, where + ": an fsdp::all_gather has " + std::to_string(reshards) +
                                         " matching fsdp::reshard (expected exactly 1)");
      }
    } else if (node->kind() == ops::reshard()) {
      auto gather = GatherOp::of(node->input(0)->node());
      if (!gather || gather->result() != node->input(0)->node()) {
        diagnostics.error(kPassName, where + ": an fsdp::reshard does not consume an fsdp::all_gather");
      }
    }
  });
}

void checkSurvivesDce(const std::string& where, torch::jit::Graph& graph,
                      DiagnosticSink& diagnostics) {
  auto copy = graph.copy();
  int before = countFsdpOps(copy->block());
  torch::jit::EliminateDeadCode(copy);
  int after = countFsdpOps(copy->block());
  if (after != before) {
    diagnostics.error(kPassName, where + ": TorchScript's dead-code elimination removes " +
                                     std::to_string(before - after) + " fsdp:: op(s)");
  }
}

}  // namespace

bool verifyFsdp(PassContext& context) {
  DiagnosticSink& diagnostics = context.diagnostics();
  forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    checkPairing(m.label, *m.graph, diagnostics);
    checkSurvivesDce(m.label, *m.graph, diagnostics);
    return 0;
  });
  // Reads are guarded only once the rewrite is complete: call sites (insert-unit-gathers) and
  // entry methods (wrap-entry-methods, which puts fsdp::check_rank in every root method). Under
  // --verify-each, earlier pipeline states are only checked for pairing and DCE survival.
  const bool entriesWrapped =
      forEachMethod(context.module(), MethodScope::kRootMethods, [&](const VisitedMethod& m) {
        // A method specialize-no-grad split is wrapped where its grad-mode path starts.
        torch::jit::Block* body = m.graph->block();
        if (torch::jit::Node* choice = noGradChoiceOf(*m.graph)) body = choice->blocks()[0];
        for (torch::jit::Node* node : body->nodes()) {
          if (node->kind() == ops::checkRank()) return 0;
        }
        return 1;  // not wrapped
      }) == 0;
  const FsdpPlan* plan = context.plan();
  if (plan && entriesWrapped && context.options().worldSize > 1) {
    std::set<std::string> reported;
    // specialize-no-grad's copies repeat their method's code, and with it any fault: theirs are
    // reported only when the methods themselves showed none (then the copy is at fault).
    std::vector<std::string> errors, copyErrors;
    auto report = [&](const std::vector<Frame>& stack, std::string message) {
      bool inCopy = std::any_of(stack.begin(), stack.end(), [](const Frame& f) { return isNoGradCopy(f.method); });
      (inCopy ? copyErrors : errors).push_back(std::move(message));
    };
    WalkObserver observer;
    observer.onParamRead = [&](const ParamRead& read) {
      if (!read.unit || read.unsharded) return;
      const Frame& frame = read.stack.back();
      if (!reported.insert(read.paramPath + "@" + frame.modulePath + "::" + frame.method).second) return;
      report(read.stack, "parameter '" + read.paramPath + "' of unit '" + displayPath(read.unit->path) +
                             "' is read while sharded in method '" + frame.method + "' of '" +
                             displayPath(frame.modulePath) + "' (entry method '" + read.stack.front().method + "')");
    };
    observer.onParamWrite = [&](const ParamWrite& write) {
      if (!write.unit) return;
      const Frame& frame = write.stack.back();
      report(write.stack, "method '" + frame.method + "' of '" + displayPath(frame.modulePath) +
                              "' assigns parameter '" + write.paramPath + "' of unit '" +
                              displayPath(write.unit->path) +
                              "' (prim::SetAttr): fsdp-opt cannot shard a parameter the model reassigns");
    };
    walkFromEntryMethods(context.module(), *plan, GatherModel::ExplicitOps, observer);
    for (const std::string& message : errors.empty() ? copyErrors : errors) diagnostics.error(kPassName, message);
  }
  auto budget = context.options().maxUnshardedBytes;
  if (plan && budget) {
    UnshardedPeak peak = staticUnshardedPeak(context.module(), *plan);
    if (peak.bytes > *budget) {
      diagnostics.error(kPassName, "the program holds " + describePeak(peak) + ", over --max-unsharded-bytes=" +
                                       std::to_string(*budget));
    }
  }
  return false;
}

PassInfo verifyFsdpPass() {
  return {kPassName, "check gather/reshard pairing, DCE survival, no sharded reads", verifyFsdp};
}

}  // namespace fsdp_opt
