// Pass specialize-no-grad: a call made without grad mode runs none of training's ops.
//
// Training needs, after every unit call, fsdp::backward_hook on the call's outputs and inputs
// (and fsdp::unit_call where the call's own gather was dropped, fsdp::replicated_params on
// entry). Without grad mode they return at once, but their operands are still built on every
// call (the unit's parameter list, tuples of its outputs and inputs) and they keep those values
// alive and opaque to TorchScript's optimiser: bench/hook_cost.py measures a decoding loop some
// 4 % slower with them than without, and 4 % slower again with them behind a grad-mode check.
// So every entry method that reaches such an op gets a copy without them, and chooses on entry:
//
//   graph(%self, %x):
//     %grad : bool = aten::is_grad_enabled()
//     %out = prim::If(%grad)
//       block0():
//         ... the method as it was ...
//         -> (%y)
//       block1():
//         %z = prim::CallMethod[name="_fsdp_no_grad_forward"](%self, %x)
//         -> (%z)
//     return (%out)
//
// The copy is the method with every call it makes inlined (so that the training ops of the
// methods it calls go too), the training ops and the operands only they used removed, and the
// rank checks that inlined entry methods bring along dropped after the first. Its gathers,
// reshards and agreements are the method's, in the same order: ranks that call with and
// without grad mode still issue the same collectives.
// Assumes: the schedule is final (after every pass that adds, moves or removes gathers and
// agreements; verify-fsdp then checks the copies as it checks every root method). A method whose
// inlined body changes grad mode itself (`with torch.no_grad():`, `torch.enable_grad()`,
// `torch.set_grad_enabled`) keeps one path: a choice made on entry would not hold for the
// whole call. Guarantees: every root method that reaches a training op, and does not change grad
// mode, starts with the choice above; idempotent.
#include <fsdp_opt/passes/passes.h>

#include "ir/fsdp_ops.h"
#include "ir/inline_calls.h"
#include "ir/module_tree.h"

#include <set>
#include <string>
#include <vector>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "specialize-no-grad";

bool isTrainingOp(const torch::jit::Node* node) {
  const auto kind = node->kind();
  return kind == ops::backwardHook() || kind == ops::unitCall() || kind == ops::replicatedParams();
}

bool changesGradMode(const torch::jit::Node* node) {
  const auto kind = node->kind();
  return kind == c10::prim::Enter || kind == c10::prim::Exit ||
         kind == c10::Symbol::fromQualString("aten::set_grad_enabled");
}

// What builds a training op's operands: the reads a gather's operands are made of, and the
// tuples of a call's outputs and inputs a backward hook takes. Once unused they can go.
bool isOperandBuilder(const torch::jit::Node* node) {
  return isOperandRead(node) || node->kind() == c10::prim::TupleConstruct;
}

bool unused(const torch::jit::Node* node) {
  for (const torch::jit::Value* output : node->outputs()) {
    if (output->hasUses()) return false;
  }
  return true;
}

// Removes the training ops, then the builders of their operands that nothing else uses.
void removeTrainingOps(torch::jit::Graph& graph) {
  std::vector<torch::jit::Node*> trainingOps;
  forEachNode(graph.block(), [&](torch::jit::Node* node) {
    if (isTrainingOp(node)) trainingOps.push_back(node);
  });
  std::vector<torch::jit::Node*> producers;
  for (torch::jit::Node* op : trainingOps) {
    for (torch::jit::Value* input : op->inputs()) producers.push_back(input->node());
    op->destroy();
  }
  std::set<torch::jit::Node*> removed;
  while (!producers.empty()) {
    torch::jit::Node* node = producers.back();
    producers.pop_back();
    if (removed.count(node) || !isOperandBuilder(node) || !unused(node)) continue;
    for (torch::jit::Value* input : node->inputs()) producers.push_back(input->node());
    removed.insert(node);
    node->destroy();
  }
}

// Moves the body of `graph` into the first arm of a branch on grad mode; the second arm calls
// `copyName` on the same arguments.
void chooseOnEntry(torch::jit::Graph& graph, const std::string& copyName, const torch::jit::Graph& copy) {
  std::vector<torch::jit::Node*> body(graph.block()->nodes().begin(), graph.block()->nodes().end());
  torch::jit::WithInsertPoint top(graph.block()->nodes().front());
  torch::jit::Value* grad = graph.insert(isGradEnabledSymbol(), {});
  torch::jit::Node* choice = graph.insertNode(graph.create(c10::prim::If, {grad}, graph.outputs().size()));
  torch::jit::Block* withGrad = choice->addBlock();
  torch::jit::Block* withoutGrad = choice->addBlock();
  for (torch::jit::Node* node : body) node->moveBefore(withGrad->return_node());

  torch::jit::Node* call = graph.create(c10::prim::CallMethod, graph.inputs(), copy.outputs().size());
  call->s_(c10::attr::name, copyName);
  withoutGrad->appendNode(call);
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    call->output(i)->setType(copy.outputs()[i]->type());
    choice->output(i)->setType(graph.outputs()[i]->type());
    withGrad->registerOutput(graph.outputs()[i]);
    withoutGrad->registerOutput(call->output(i));
    graph.return_node()->replaceInput(i, choice->output(i));
  }
}

}  // namespace

bool specializeNoGrad(PassContext& context) {
  torch::jit::Module& root = context.module();
  const c10::ClassTypePtr& type = root.type();
  auto unit = root._ivalue()->compilation_unit();
  const std::vector<torch::jit::Function*> methods(type->methods().begin(), type->methods().end());
  int specialized = 0;
  for (torch::jit::Function* method : methods) {
    const std::string copyName = kNoGradCopyPrefix + method->name();
    if (isNoGradCopy(method->name()) || type->findMethod(copyName)) continue;
    auto graph = graphOf(method);
    auto copy = graph->copy();
    inlineCalls(copy->block(), [](torch::jit::Node*) { return true; });
    bool training = false, gradModeChanges = false;
    forEachNode(copy->block(), [&](torch::jit::Node* node) {
      training = training || isTrainingOp(node);
      gradModeChanges = gradModeChanges || changesGradMode(node);
    });
    if (!training) continue;
    if (gradModeChanges) {
      context.diagnostics().remark(kPassName, type->name()->qualifiedName() + "::" + method->name() +
                                                  " sets grad mode itself: it keeps one path");
      continue;
    }
    removeTrainingOps(*copy);
    removeRepeatedRankChecks(*copy);
    auto* copied = unit->create_function(c10::QualifiedName(*type->name(), copyName), copy);
    copied->setSchema(method->getSchema().cloneWithName(copyName, ""));
    type->addMethod(copied);
    chooseOnEntry(*graph, copyName, *copy);
    ++specialized;
  }
  if (specialized > 0) {
    context.diagnostics().remark(kPassName, std::to_string(specialized) +
                                                " entry method(s) get a path without training ops for calls without grad mode");
  }
  return specialized > 0;
}

PassInfo specializeNoGradPass() {
  return {kPassName, "give entry methods a copy without training ops, taken when grad mode is off",
          specializeNoGrad};
}

}  // namespace fsdp_opt
