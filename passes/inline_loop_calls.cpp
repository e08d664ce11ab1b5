// Pass inline-loop-calls: makes the gathers a loop runs visible in the loop's own graph.
//
// `generate` calls `self.forward` inside its decoding loop; the per-layer gathers live in
// forward's graph, where no loop is in sight. This pass inlines, into the body of every
// prim::Loop, each method call whose callee (directly or through its own calls) contains an
// fsdp::all_gather, repeating until no such call is left or a depth limit is reached. The callee's
// `self` becomes the caller's module value, so every prim::GetAttr chain keeps naming the same
// instance: inlining is instance-correct even where types are shared. The callee stays as it
// is for its other callers.
// Assumes: insert-unit-gathers and wrap-entry-methods ran. Guarantees: semantics unchanged;
// the inlined copy keeps its check_rank and gathers (eliminate-redundant-gathers removes those
// made redundant by the caller's own).
//
//   before: prim::Loop: %y = prim::CallMethod[name="forward"](%self, %x)
//   after:  prim::Loop: fsdp::check_rank(...); %g = fsdp::all_gather(...block 0...); ...
#include <fsdp_opt/passes.h>

#include "support/fsdp_ops.h"
#include "support/module_tree.h"

#include <torch/csrc/jit/api/function_impl.h>

#include <map>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "inline-loop-calls";
constexpr int kMaxRounds = 8;

torch::jit::Function* calleeOf(torch::jit::Node* call) {
  auto type = call->input(0)->type()->cast<c10::ClassType>();
  return type ? type->findMethod(call->s(c10::attr::name)) : nullptr;
}

class GatherReach {
 public:
  // Whether calling `function` can run an fsdp::all_gather.
  bool reachesGather(torch::jit::Function* function) {
    auto known = memo_.find(function);
    if (known != memo_.end()) return known->second;
    memo_[function] = false;  // TorchScript has no recursion; this only guards the walk
    bool found = false;
    forEachNode(graphOf(function)->block(), [&](torch::jit::Node* node) {
      if (found) return;
      if (GatherOp::of(node)) found = true;
      if (node->kind() == c10::prim::CallMethod) {
        if (torch::jit::Function* callee = calleeOf(node)) found = reachesGather(callee);
      }
    });
    return memo_[function] = found;
  }

 private:
  std::map<torch::jit::Function*, bool> memo_;
};

bool insideLoop(torch::jit::Node* node) {
  for (torch::jit::Block* block = node->owningBlock(); block->owningNode(); block = block->owningNode()->owningBlock()) {
    if (block->owningNode()->kind() == c10::prim::Loop) return true;
  }
  return false;
}

}  // namespace

bool inlineLoopCalls(PassContext& context) {
  GatherReach reach;
  int inlined = 0;
  for (const auto& [type, path] : distinctModuleTypes(context.module())) {
    for (torch::jit::Function* function : type->methods()) {
      auto graph = graphOf(function);
      for (int round = 0; round < kMaxRounds; ++round) {
        std::vector<torch::jit::Node*> calls;
        forEachNode(graph->block(), [&](torch::jit::Node* node) {
          if (node->kind() != c10::prim::CallMethod || !insideLoop(node)) return;
          // A rewritten call site keeps its call: the gather around it is already in this graph.
          if (node->next() && node->next()->kind() == ops::reshard()) return;
          torch::jit::Function* callee = calleeOf(node);
          if (callee && reach.reachesGather(callee)) calls.push_back(node);
        });
        if (calls.empty()) break;
        for (torch::jit::Node* call : calls) {
          torch::jit::Function* callee = calleeOf(call);
          context.diagnostics().remark(kPassName, "inlined " + callee->qualname().qualifiedName() +
                                                      " into the loop of " + type->name()->qualifiedName() +
                                                      "::" + function->name());
          // The callee's own graph, not its optimized (fully inlined) one: the calls it makes
          // stay calls, and the inlined IR reads as the source did.
          auto& graphFunction = torch::jit::toGraphFunction(*callee);
          torch::jit::inlineCallTo(call, &graphFunction, graphFunction.graph().get());
          ++inlined;
        }
      }
    }
  }
  return inlined > 0;
}

PassInfo inlineLoopCallsPass() {
  return {kPassName, "inline method calls in loop bodies that reach a gather", inlineLoopCalls};
}

}  // namespace fsdp_opt
