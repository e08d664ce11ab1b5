// Pass check-unsharded-budget: a budget no schedule can keep is an error, not a silent excess.
//
// Right after the rewrite every unit is gathered only around its own calls, so the program's
// static peak of unsharded bytes (staticUnshardedPeak) is the least any schedule can hold: the
// scheduling passes only widen gathers, and only while they stay within --max-unsharded-bytes.
// A budget below it could not be kept; instead of producing a program that exceeds it, this
// pass fails, naming the smallest budget that works and the method and units that need it.
// Without a budget it only remarks the peak.
// Assumes: insert-unit-gathers and wrap-entry-methods ran, nothing else moved gathers yet.
// Changes nothing.
#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/passes/passes.h>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "check-unsharded-budget";

}  // namespace

bool checkUnshardedBudget(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  UnshardedPeak peak = staticUnshardedPeak(context.module(), *plan);
  auto budget = context.options().maxUnshardedBytes;
  if (budget && peak.bytes > *budget) {
    context.diagnostics().error(kPassName, "--max-unsharded-bytes=" + std::to_string(*budget) +
                                               " cannot be kept: the smallest budget any schedule can keep is " +
                                               describePeak(peak));
  } else {
    context.diagnostics().remark(kPassName, "least peak of unsharded parameters: " + describePeak(peak) +
                                                (budget ? " (budget " + std::to_string(*budget) + ")" : ""));
  }
  return false;
}

PassInfo checkUnshardedBudgetPass() {
  return {kPassName, "fail when --max-unsharded-bytes is below the least peak any schedule can keep",
          checkUnshardedBudget};
}

}  // namespace fsdp_opt
