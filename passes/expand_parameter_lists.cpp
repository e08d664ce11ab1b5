// Pass expand-parameter-lists: a list attribute that holds parameters is read as those parameters.
//
// A scripted nn.LSTM / nn.GRU / nn.RNN keeps its weights twice: in their parameter slots and in
// `_flat_weights`, a `Tensor[]` attribute holding the same tensors, which its forward passes to
// aten::lstm. Sharding replaces the slots only, so the list would carry every whole weight into
// every rank file, the call would compute with those instead of the gathered ones, and training
// would give the sharded parameters no gradient. This pass makes such a list's reads explicit, as
// if the source had written `[self.weight_ih_l0, self.weight_hh_l0, ...]` at each of them, and
// empties the attribute; the rest of the pipeline then treats those reads as any other parameter
// read.
// Assumes: nothing; runs first, before any type is cloned. A list qualifies when every element is
// a parameter of its module or of a module below it (the same tensor, not a view), at the same
// paths in every instance of the module's type, and every read of it only reads it: no method
// assigns the attribute, writes the list (append, setitem) or passes the list itself on to
// anything that could keep it (a call, a tuple, a return). A list that does not qualify is left as it is, with a remark saying why;
// parameter-groups then refuses the model if it holds a parameter that a unit shards.
// Guarantees: no method reads a qualifying attribute, and every instance holds an empty list in
// it; idempotent (an empty list is left alone).
//
//   before: %w : Tensor[] = prim::GetAttr[name="_flat_weights"](%self)
//           %out = aten::lstm(%x, %hx, %w, ...)
//   after:  %a : Tensor = prim::GetAttr[name="weight_ih_l0"](%self)  ... one per element
//           %w : Tensor[] = prim::ListConstruct(%a, ...)
//           %out = aten::lstm(%x, %hx, %w, ...)
#include <fsdp_opt/passes/passes.h>

#include "ir/module_tree.h"

#include <algorithm>
#include <map>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "expand-parameter-lists";
using torch::jit::Node;
using torch::jit::Value;

bool isTensorList(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::TensorType;
}

// Paths below `module` of the parameters the list holds, in its order, with "" for an element
// that is not one of them (a view of a parameter is not one).
std::vector<std::string> parameterPaths(const torch::jit::Module& module, const c10::IValue& list) {
  std::map<c10::TensorImpl*, std::string> byImpl;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.value.defined()) byImpl.emplace(item.value.unsafeGetTensorImpl(), item.name);
  }
  std::vector<std::string> paths;
  for (const c10::IValue& element : list.toListRef()) {
    auto it = element.isTensor() && element.toTensor().defined()
                  ? byImpl.find(element.toTensor().unsafeGetTensorImpl())
                  : byImpl.end();
    paths.push_back(it == byImpl.end() ? "" : it->second);
  }
  return paths;
}

// Why a use of the list may write it or let it escape, or "" when it only reads it. After the
// rewrite each read is a fresh list, so what matters is the list object itself: an element taken
// out of it (aten::__getitem__ returns an alias of an element) is the parameter either way.
std::string useThatMayWrite(const torch::jit::Use& use) {
  Node* user = use.user;
  if (user->kind() == c10::prim::ListUnpack) return "";
  const c10::FunctionSchema* schema = user->maybeSchema();
  if (!schema) return "it is used by " + std::string(user->kind().toQualString());
  const c10::AliasInfo* list = schema->arguments().at(use.offset).alias_info();
  if (!list) return "";
  if (list->isWrite()) return std::string(user->kind().toQualString()) + " writes it";
  for (const auto& result : schema->returns()) {
    const c10::AliasInfo* returned = result.alias_info();
    if (!returned) continue;
    for (const auto& set : returned->beforeSets()) {
      if (list->beforeSets().count(set)) return std::string(user->kind().toQualString()) + " returns it";
    }
  }
  return "";
}

// One list attribute of one module type, over all of the type's instances.
struct ListAttribute {
  std::string name;
  std::vector<std::pair<std::string, torch::jit::Module>> instances;  // path, module
  std::vector<std::vector<std::string>> paths;                        // per instance
  bool holdsParameters = false;
  std::string refusal;  // why it is left as it is
  std::vector<std::pair<std::shared_ptr<torch::jit::Graph>, Node*>> reads;
};

std::string attributePath(const std::string& modulePath, const std::string& name) {
  return modulePath.empty() ? name : modulePath + "." + name;
}

// Why the instances' lists cannot all be read as the same parameter paths, or "".
std::string sameParametersEverywhere(const ListAttribute& list) {
  for (size_t i = 0; i < list.instances.size(); ++i) {
    const std::string shown = attributePath(list.instances[i].first, list.name);
    if (std::find(list.paths[i].begin(), list.paths[i].end(), "") != list.paths[i].end()) {
      return "an element of '" + shown + "' is not a parameter of that module or of a module below it";
    }
    if (list.paths[i] != list.paths.front()) {
      return "'" + shown + "' holds other parameters than '" +
             attributePath(list.instances.front().first, list.name) + "', of the same type";
    }
  }
  return "";
}

}  // namespace

bool expandParameterLists(PassContext& context) {
  const torch::jit::Module& root = context.module();
  // In pre-order of each type's first instance, so that remarks follow the model's order.
  std::vector<ListAttribute> lists;
  std::map<std::pair<c10::ClassType*, std::string>, size_t> indexOf;
  for (const auto& item : root.named_modules()) {
    const auto& type = item.value.type();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      if (type->is_parameter(i) || type->is_buffer(i) || !isTensorList(type->getAttribute(i))) continue;
      const c10::IValue value = item.value._ivalue()->getSlot(i);
      if (!value.isList()) continue;
      auto [at, added] = indexOf.emplace(std::make_pair(type.get(), type->getAttributeName(i)), lists.size());
      if (added) lists.emplace_back();
      ListAttribute& list = lists[at->second];
      list.name = type->getAttributeName(i);
      list.instances.emplace_back(item.name, item.value);
      list.paths.push_back(parameterPaths(item.value, value));
    }
  }
  // Lists of other tensors are no concern of this pass, and an empty list (this pass's own
  // result, on a second run) holds nothing to expand.
  for (auto& list : lists) {
    for (const auto& paths : list.paths) {
      for (const auto& path : paths) list.holdsParameters = list.holdsParameters || !path.empty();
    }
    list.refusal = sameParametersEverywhere(list);
  }

  forEachMethod(root, MethodScope::kEveryType, [&](const VisitedMethod& m) {
    forEachNode(m.graph->block(), [&](Node* node) {
      const bool get = node->kind() == c10::prim::GetAttr;
      if (!get && node->kind() != c10::prim::SetAttr) return;
      auto owner = node->input(0)->type()->cast<c10::ClassType>();
      if (!owner) return;
      auto at = indexOf.find({owner.get(), node->s(c10::attr::name)});
      if (at == indexOf.end()) return;
      ListAttribute& list = lists[at->second];
      if (!list.holdsParameters || !list.refusal.empty()) return;
      if (!get) {
        list.refusal = m.label + " assigns it";
        return;
      }
      for (const auto& use : node->output()->uses()) {
        std::string why = useThatMayWrite(use);
        if (!why.empty()) {
          list.refusal = "in " + m.label + ", " + why;
          return;
        }
      }
      list.reads.emplace_back(m.graph, node);
    });
    return 0;
  });

  int expanded = 0;
  for (auto& list : lists) {
    if (!list.holdsParameters) continue;
    const std::string shown = attributePath(list.instances.front().first, list.name);
    if (!list.refusal.empty()) {
      context.diagnostics().remark(kPassName, "list '" + shown + "' left as it is: " + list.refusal);
      continue;
    }
    const std::vector<std::string>& paths = list.paths.front();
    for (auto& [graph, read] : list.reads) {
      torch::jit::WithInsertPoint before(read);
      std::vector<Value*> elements;
      for (const auto& path : paths) elements.push_back(insertGetAttrChain(*graph, read->input(0), path));
      Node* construct = graph->insertNode(graph->createList(c10::TensorType::get(), elements));
      read->output()->replaceAllUsesWith(construct->output());
      read->destroy();
    }
    for (auto& [path, instance] : list.instances) {
      instance._ivalue()->setAttr(list.name, c10::IValue(c10::List<at::Tensor>()));
    }
    context.diagnostics().remark(kPassName, "list '" + shown + "' is read as its " + std::to_string(paths.size()) +
                                                " parameters (" + std::to_string(list.reads.size()) +
                                                " read(s), " + std::to_string(list.instances.size()) +
                                                " instance(s)); the attribute is emptied");
    ++expanded;
  }
  return expanded > 0;
}

PassInfo expandParameterListsPass() {
  return {kPassName, "reads of a list attribute that holds parameters (nn.LSTM's _flat_weights) become reads of the parameters",
          expandParameterLists};
}

}  // namespace fsdp_opt
