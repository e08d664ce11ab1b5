// Pass lower-indexed-module-calls: a call on a ModuleList or ModuleDict element chosen when the
// program runs becomes one branch per element, each calling its module by class.
//
// TorchScript compiles `b: MyInterface = self.blocks[i]; b.forward(x)` (the only way it lets a
// container be indexed with a value that is not a constant) to prim::ModuleContainerIndex, whose
// result is typed as the module interface, and a prim::CallMethod on that interface. No gather
// can be placed around such a call: which unit it reaches is known only when it runs. But the
// container's elements are fixed by its class type, so the call means
//   if key == "0": r = self.blocks.0.forward(x) elif key == "1": ... else: raise
// and written so, every later pass sees ordinary calls in prim::If arms: the planner holds what
// fits for the whole entry call, and rank-uniform-control-flow makes ranks that pick different
// elements issue the same collectives.
// Assumes: nothing; runs before specialize-unit-types, which gives the elements' types the
// per-instance identity the new calls need.
// Guarantees: a ModuleContainerIndex whose result is only ever the callee of CallMethods is gone,
// with its calls; a key that names no element still raises (IndexError / KeyError, where the
// interpreter raised a RuntimeError). Any other use of the element (passed to a method, returned)
// is left for check-hidden-unit-calls to refuse when it may reach a unit.
//
//   before: %b : InterfaceType<Lookup> = prim::ModuleContainerIndex(%tables, %i)
//           %y : Tensor = prim::CallMethod[name="forward"](%b, %ids)
//   after:  %y : Tensor = prim::If(aten::eq(%i, 0))
//             block0(): %t0 = prim::GetAttr[name="0"](%tables)
//                       -> (prim::CallMethod[name="forward"](%t0, %ids))
//             block1(): -> (prim::If(aten::eq(%i, 1)) ... innermost else: prim::RaiseException)
#include <fsdp_opt/passes/passes.h>

#include "ir/module_tree.h"

#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "lower-indexed-module-calls";

// A container's elements: (attribute name, class type), in the container's order.
using Elements = std::vector<std::pair<std::string, c10::ClassTypePtr>>;

Elements elementsOf(const c10::ClassType& container) {
  Elements elements;
  for (size_t i = 0; i < container.numAttributes(); ++i) {
    auto element = container.getAttribute(i)->cast<c10::ClassType>();
    if (element && element->is_module()) elements.emplace_back(container.getAttributeName(i), element);
  }
  return elements;
}

// Whether every use of `element` is as the callee of a method that every element has.
bool onlyCalled(torch::jit::Value* element, const Elements& elements) {
  for (const torch::jit::Use& use : element->uses()) {
    torch::jit::Node* user = use.user;
    // The element passed as an argument too is a use of its own, at another offset.
    if (user->kind() != c10::prim::CallMethod || use.offset != 0) return false;
    for (const auto& [name, type] : elements) {
      if (!type->findMethod(user->s(c10::attr::name))) return false;
    }
  }
  return !element->uses().empty();
}

class CallLowering {
 public:
  CallLowering(torch::jit::Graph& graph, torch::jit::Node* index, torch::jit::Node* call, Elements elements,
               bool byName)
      : graph_(graph), index_(index), call_(call), elements_(std::move(elements)), byName_(byName) {}

  void run() {
    std::vector<torch::jit::Value*> results;
    {
      torch::jit::WithInsertPoint before(call_);
      results = branch(0);
    }
    for (size_t i = 0; i < results.size(); ++i) call_->output(i)->replaceAllUsesWith(results[i]);
    call_->destroy();
  }

 private:
  // The values of the call when the key is one of elements_[first..]: a prim::If per element.
  std::vector<torch::jit::Value*> branch(size_t first) {
    if (first == elements_.size()) return raiseNoSuchElement();
    const auto& [name, type] = elements_[first];
    torch::jit::Value* key = index_->input(1);
    torch::jit::Value* named = byName_ ? graph_.insertConstant(name) : graph_.insertConstant(static_cast<int64_t>(std::stoll(name)));
    torch::jit::Value* matches = graph_.insert(c10::aten::eq, {key, named});
    torch::jit::Node* choice = graph_.insertNode(graph_.create(c10::prim::If, {matches}, call_->outputs().size()));
    for (size_t i = 0; i < call_->outputs().size(); ++i) choice->output(i)->setType(call_->output(i)->type());
    torch::jit::Block* taken = choice->addBlock();
    torch::jit::Block* notTaken = choice->addBlock();
    {
      torch::jit::WithInsertPoint inTaken(taken);
      torch::jit::Value* element = graph_.insertGetAttr(index_->input(0), name);
      std::vector<torch::jit::Value*> inputs{element};
      for (size_t i = 1; i < call_->inputs().size(); ++i) inputs.push_back(call_->input(i));
      torch::jit::Node* direct = graph_.insertNode(graph_.create(c10::prim::CallMethod, inputs, call_->outputs().size()));
      direct->s_(c10::attr::name, call_->s(c10::attr::name));
      const auto& returns = type->getMethod(call_->s(c10::attr::name)).getSchema().returns();
      for (size_t i = 0; i < direct->outputs().size(); ++i) direct->output(i)->setType(returns.at(i).type());
      for (torch::jit::Value* output : direct->outputs()) taken->registerOutput(output);
    }
    {
      torch::jit::WithInsertPoint inNotTaken(notTaken);
      for (torch::jit::Value* output : branch(first + 1)) notTaken->registerOutput(output);
    }
    return {choice->outputs().begin(), choice->outputs().end()};
  }

  std::vector<torch::jit::Value*> raiseNoSuchElement() {
    const std::string container = index_->input(0)->type()->cast<c10::ClassType>()->name()->name();
    torch::jit::Value* message = graph_.insertConstant(
        std::string(byName_ ? "key not found in " : "index out of range of ") + container + " (fsdp-opt " + kPassName + ")");
    torch::jit::Value* kind = graph_.insertConstant(std::string(byName_ ? "builtins.KeyError" : "builtins.IndexError"));
    graph_.insertNode(graph_.create(c10::prim::RaiseException, {message, kind}, 0));
    std::vector<torch::jit::Value*> unreachable;
    for (torch::jit::Value* output : call_->outputs()) {
      unreachable.push_back(graph_.insertNode(graph_.createUninitialized(output->type()))->output());
    }
    return unreachable;
  }

  torch::jit::Graph& graph_;
  torch::jit::Node* index_;
  torch::jit::Node* call_;
  Elements elements_;
  bool byName_;
};

}  // namespace

bool lowerIndexedModuleCalls(PassContext& context) {
  const int lowered = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    std::vector<torch::jit::Node*> indexes;
    forEachNode(m.graph->block(), [&](torch::jit::Node* node) {
      if (node->kind() == c10::prim::ModuleContainerIndex) indexes.push_back(node);
    });
    int count = 0;
    for (torch::jit::Node* index : indexes) {
      auto container = index->input(0)->type()->cast<c10::ClassType>();
      if (!container) continue;
      const Elements elements = elementsOf(*container);
      const bool byName = index->input(1)->type()->kind() == c10::TypeKind::StringType;
      if (elements.empty() || !onlyCalled(index->output(), elements)) {
        context.diagnostics().remark(kPassName, "in " + m.label + ", an element of " + container->name()->name() +
                                                    " chosen when it runs is used other than as a callee; left as it is");
        continue;
      }
      std::vector<torch::jit::Node*> calls;
      for (const torch::jit::Use& use : index->output()->uses()) calls.push_back(use.user);
      for (torch::jit::Node* call : calls) {
        CallLowering(*m.graph, index, call, elements, byName).run();
        ++count;
      }
      index->destroy();
      context.diagnostics().remark(kPassName, "in " + m.label + ", " + std::to_string(calls.size()) +
                                                  " call(s) on an element of " + container->name()->name() +
                                                  " chosen when it runs became one branch per element (" +
                                                  std::to_string(elements.size()) + ")");
    }
    return count;
  });
  // Counted only where it happened: most models have none, and --stats lists what matters.
  if (lowered > 0) context.statistics().add("indexed module calls lowered", lowered);
  return lowered > 0;
}

PassInfo lowerIndexedModuleCallsPass() {
  return {kPassName, "calls on a ModuleList/ModuleDict element chosen at run time become one branch per element",
          lowerIndexedModuleCalls};
}

}  // namespace fsdp_opt
