// The fsdp:: ops as the passes see them: names, one model of a gather (its forms, its named
// operands, the units and bytes it covers) and the builders that make and reshape gathers.
// The op schemas are in docs/design.md; their operand positions are written here and nowhere
// else.
#pragma once

#include <fsdp_opt/format.h>
#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fsdp_opt {

namespace ops {
c10::Symbol allGather();     // fsdp::all_gather
c10::Symbol reshard();       // fsdp::reshard
c10::Symbol checkRank();     // fsdp::check_rank
c10::Symbol releaseAll();    // fsdp::release_all
c10::Symbol gatherStart();   // fsdp::all_gather_start
c10::Symbol gatherWait();    // fsdp::all_gather_wait
c10::Symbol rankAny();       // fsdp::rank_any: whether any rank's flag is set
c10::Symbol backwardHook();  // fsdp::backward_hook: a unit call's backward gathers it again
c10::Symbol replicatedParams();  // fsdp::replicated_params: their gradients averaged
c10::Symbol unitCall();          // fsdp::unit_call: where a call of a unit held from outside starts
bool isFsdpOp(const torch::jit::Node* node);
// An op that communicates with the other ranks: a gather of either form, or an agreement.
bool isCollective(const torch::jit::Node* node);
}  // namespace ops

// Registers `_fsdp_unit_path` on every unit instance (idempotent).
void addUnitPathAttributes(torch::jit::Module& root, const FsdpPlan& plan);

// One gather, whichever IR form it has: an fsdp::all_gather, or the fsdp::all_gather_start /
// fsdp::all_gather_wait pair prefetch-gathers splits one into. Both forms take the same
// operands: the parameter list, their full dim-0 sizes, the unit name(s) and an optional dtype.
class GatherOp {
 public:
  // The gather `node` is part of (any of the three ops), or nullopt.
  static std::optional<GatherOp> of(torch::jit::Node* node);

  // Where the collective is issued: the all_gather, or the start of a split gather.
  torch::jit::Node* issue() const { return issue_; }
  // What the reshard consumes, the unsharded list: the all_gather, or the wait (nullptr for a
  // start whose wait is missing, which verify-fsdp reports).
  torch::jit::Node* result() const { return result_; }
  bool isSplit() const { return issue_ != result_; }
  torch::jit::Node* reshard() const;  // the reshard of the result, or nullptr

  torch::jit::Value* paramList() const { return issue_->input(kParams); }
  // The list's elements, each a prim::GetAttr of a parameter (Optional ones unwrapped from
  // their prim::unchecked_cast); empty when the list is not a prim::ListConstruct.
  std::vector<torch::jit::Value*> paramReads() const;
  torch::jit::Value* fullRows() const { return issue_->input(kFullRows); }
  torch::jit::Value* unitName() const { return issue_->input(kUnitName); }
  torch::jit::Value* paramDtype() const {  // nullptr when the gather keeps the params' dtype
    return issue_->inputs().size() > kParamDtype ? issue_->input(kParamDtype) : nullptr;
  }
  // The module value whose `_fsdp_unit_path` names the gather: set for one unit's gather, nullptr
  // for a bucket (whose name is computed).
  torch::jit::Value* unitModule() const;

 private:
  GatherOp(torch::jit::Node* issue, torch::jit::Node* result) : issue_(issue), result_(result) {}
  static constexpr size_t kParams = 0, kFullRows = 1, kUnitName = 2, kParamDtype = 3;
  torch::jit::Node* issue_;
  torch::jit::Node* result_;
};

// The gathers a graph holds, in node order, nested blocks included.
std::vector<GatherOp> gathersIn(torch::jit::Block* block);

// A node that only reads what a gather takes as operands (prim::GetAttr chains, the lists and
// constants built from them, a bucket's joined unit names): such nodes may move with their gather.
bool isOperandRead(const torch::jit::Node* node);
// What moving `node` (a gather) out of a region must move with it: the nodes it depends on
// among those `inRegion` picks, when every one of them is an operand read in the node's own
// block; nullopt when it depends on anything else computed in the region.
std::optional<std::set<torch::jit::Node*>> operandReadsIn(torch::jit::Node* node,
                                                          const std::function<bool(torch::jit::Node*)>& inRegion);
// An fsdp::backward_hook, or a tuple built only for one: it neither reads a parameter nor
// changes what forward computes, so schedules treat it as absent.
bool isBackwardHookPart(const torch::jit::Node* node);

// specialize-no-grad's copies of the root's entry methods, taken when grad mode is off, are
// root methods named with this prefix. Reports of what a user calls (--stats) leave them out.
constexpr const char* kNoGradCopyPrefix = "_fsdp_no_grad_";
bool isNoGradCopy(const std::string& methodName);
c10::Symbol isGradEnabledSymbol();  // aten::is_grad_enabled, what the copy is chosen on
// The branch on aten::is_grad_enabled() that a method specialize-no-grad split starts with (its
// first arm the method as it was, its second the call of the copy), or nullptr.
torch::jit::Node* noGradChoiceOf(torch::jit::Graph& graph);

// --- Builders. Each inserts at the graph's insertion point unless it says otherwise. ---

// Reads the unit's group through prim::GetAttr chains from `unitModule` and gathers it with one
// fsdp::all_gather; with `paramDtype`, full parameters in that dtype.
GatherOp insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule, const Unit& unit,
                          std::optional<c10::ScalarType> paramDtype = std::nullopt);
// The reshard of `gather`.
torch::jit::Node* insertReshard(torch::jit::Graph& graph, const GatherOp& gather);
// What training needs after a call of the unit `gather` unshards (docs/design.md "Training"):
// fsdp::backward_hook on the call's outputs and inputs, with the gather's parameters, rows and
// name, and the budget backward prefetching must keep (-1: none). Nothing when the call returns
// nothing.
void insertBackwardHook(torch::jit::Graph& graph, const GatherOp& gather, at::ArrayRef<torch::jit::Value*> outputs,
                        at::ArrayRef<torch::jit::Value*> inputs, std::optional<int64_t> maxUnshardedBytes);
// One all_gather of both gathers' parameters (named "a, b"), where `second` was, and one reshard
// where the later of theirs was; both originals are removed. Their dtypes must agree.
GatherOp mergeGathers(torch::jit::Graph& graph, const GatherOp& first, const GatherOp& second);
// An all_gather split into a start right after `startAfter` (same block, before the gather)
// and a wait where the gather was.
GatherOp splitGather(torch::jit::Graph& graph, const GatherOp& gather, torch::jit::Node* startAfter);

// --- Which units a gather covers. ---

// Resolves a value read by prim::GetAttr to the path of the attribute slot it reads
// ("blocks.0.fc.weight"), or nullopt when unknown.
using ParamPathOf = std::function<std::optional<std::string>(torch::jit::Value*)>;
// The units whose parameters the gather unshards, in list order, each once: one, or several
// for a bucket.
std::vector<const Unit*> unitsOf(const GatherOp& gather, const FsdpPlan& plan, const ParamPathOf& pathOf);

// The path of a module value reached from `self` through prim::GetAttr nodes, relative to self.
std::optional<std::string> pathFromSelf(torch::jit::Value* value, torch::jit::Value* self);

// The gathers of one method graph of a class type, resolved against the plan. `representative`
// is the path of an instance of the type: specialize-unit-types made unit-ness a function of
// the type, and parameters are read through prim::GetAttr chains from the graph's `self`.
class GraphGathers {
 public:
  GraphGathers(torch::jit::Graph& graph, std::string representative, const FsdpPlan& plan);
  std::vector<const Unit*> units(const GatherOp& gather) const;
  const Unit* unit(const GatherOp& gather) const;  // the single unit, or nullptr (bucket, unknown)
  int64_t bytes(const GatherOp& gather) const;     // its units' own bytes
  // Bytes of the gathers still open where `anchor` runs: in anchor's block and each block
  // enclosing it up to the graph's top, gather results before the node on the way to `anchor`
  // whose reshard comes after it. Linear in the nodes before `anchor`.
  int64_t openBytesAt(torch::jit::Node* anchor) const;

 private:
  torch::jit::Graph& graph_;
  std::string representative_;
  const FsdpPlan& plan_;
};

// The gathers of `block` (nested blocks included) whose units are all unsharded already where
// they are issued, by gathers of the same graph around them: gathers and reshards pair within one
// block, so the enclosing gather covers every path. Removing them changes no value and no
// collective: the runtime would count them as nested. Both forms; a split gather opens its
// units at its wait. `block` is walked from its first node with nothing open before it. A gather
// of an empty list (a unit without parameters) is covered wherever it is: it moves nothing.
std::vector<GatherOp> coveredGathers(torch::jit::Block* block, const GraphGathers& gathers);
// Destroys a gather: its reshard, its wait (split form) and its issue. Its operand reads stay
// for dead-code elimination. A gather whose list a backward hook reads (a unit's call site,
// trained through) leaves an fsdp::unit_call in its place: TorchScript's autodiff must not merge
// the call's first operations with the code before it, or backward would reach the call's
// inputs (where a frozen unit is let go) before the call's own backward ran.
void removeGather(const GatherOp& gather);


}  // namespace fsdp_opt
