// Pass specialize-unit-types: one class type per distinct FSDP role.
//
// TorchScript gives identical submodules one class type, and a method's graph belongs to the
// type. The rewrite edits graphs, so two instances of one type that need different rewrites
// (a unit and a plain instance; units whose groups have different shapes, which become
// constants in the callers' graphs) must first get different types. This pass computes for
// every instance a signature of what the rewrite depends on (unit or not, forward methods,
// group shapes, and its children's signatures) and clones a type for each signature of a type
// that has several, plus every ancestor whose child types changed, much as TorchScript's
// quantization passes clone types per configuration.
// Assumes: the plan is built; no forward hooks or properties on types that must be cloned.
// Guarantees: afterwards, unit-ness and group shapes are functions of the class type.
//
//   before: blocks.0 : __torch__.Block (unit)    blocks.1 : __torch__.Block (plain)
//   after:  blocks.0 : __torch__.Block__fsdp1    blocks.1 : __torch__.Block__fsdp2
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/module_tree.h"

#include <torch/csrc/jit/api/function_impl.h>

#include <map>
#include <set>
#include <sstream>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "specialize-unit-types";
using torch::jit::Module;

class TypeSpecializer {
 public:
  TypeSpecializer(PassContext& context, const FsdpPlan& plan)
      : context_(context), plan_(plan), cu_(context.module()._ivalue()->compilation_unit()) {}

  bool run() {
    Module root = context_.module();
    signature(root, "");
    Module rebuilt = rebuild(root, "");
    if (failed_) return false;
    if (rebuilt._ivalue() == root._ivalue()) return false;
    context_.replaceModule(rebuilt);
    return true;
  }

 private:
  std::string signature(const Module& module, const std::string& path) {
    std::ostringstream sig;
    if (const Unit* unit = plan_.unitAt(path)) {
      sig << "U(";
      for (const auto& method : unit->forwardMethods) sig << method << ",";
      sig << ";";
      for (const auto& param : unit->params) {
        for (const auto& slot : param.slots) sig << relativePath(slot.path(), path) << "|";
        sig << "[";
        for (int64_t dim : param.shape) sig << dim << ",";
        sig << "]";
      }
      sig << ")";
    } else {
      sig << "N";
    }
    for (const auto& child : module.named_children()) {
      sig << "{" << child.name << "=" << signature(child.value, joinPath(path, child.name)) << "}";
    }
    std::string result = sig.str();
    signaturesOfType_[module.type().get()].insert(result);
    signatureOfPath_[path] = result;
    return result;
  }

  Module rebuild(const Module& module, const std::string& path) {
    std::map<std::string, Module> children;
    bool childChanged = false;
    for (const auto& child : module.named_children()) {
      Module rebuiltChild = rebuild(child.value, joinPath(path, child.name));
      childChanged = childChanged || !(rebuiltChild._ivalue() == child.value._ivalue());
      children.emplace(child.name, rebuiltChild);
    }
    auto type = module.type();
    bool split = signaturesOfType_[type.get()].size() > 1;
    if (!split && !childChanged) return module;

    auto key = std::make_pair(type.get(), signatureOfPath_[path]);
    auto known = clonedTypes_.find(key);
    c10::ClassTypePtr newType = known != clonedTypes_.end() ? known->second : declareType(type, children, path);
    auto object = c10::ivalue::Object::create(c10::StrongTypePtr(cu_, newType), type->numAttributes());
    for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
      auto child = children.find(type->getAttributeName(slot));
      object->setSlot(slot, child != children.end() ? c10::IValue(child->second._ivalue())
                                                    : module._ivalue()->getSlot(slot));
    }
    Module rebuilt(object);
    if (known == clonedTypes_.end()) {
      clonedTypes_[key] = newType;
      cloneMethods(type, newType, rebuilt);
      context_.diagnostics().remark(kPassName, "instance '" + displayPath(path) + "' of " +
                                                   type->name()->qualifiedName() + " gets type " +
                                                   newType->name()->qualifiedName());
    }
    return rebuilt;
  }

  c10::ClassTypePtr declareType(const c10::ClassTypePtr& type,
                                const std::map<std::string, Module>& children,
                                const std::string& path) {
    if (!type->getForwardHooks().empty() || !type->getForwardPreHooks().empty() ||
        !type->properties().empty()) {
      context_.diagnostics().error(kPassName, "module '" + displayPath(path) + "' (" +
                                                  type->name()->qualifiedName() +
                                                  ") needs its own type, but types with forward "
                                                  "hooks or properties cannot be specialized");
      failed_ = true;
    }
    c10::QualifiedName original = *type->name();
    c10::QualifiedName name;
    do {
      name = c10::QualifiedName(original.prefix(), original.name() + "__fsdp" + std::to_string(++counter_));
    } while (cu_->get_type(name));
    auto newType = c10::ClassType::create(name, cu_, /*is_module=*/true, type->doc_string());
    for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
      const std::string& attr = type->getAttributeName(slot);
      auto child = children.find(attr);
      c10::TypePtr attrType = child != children.end() ? c10::TypePtr(child->second.type())
                                                      : type->getAttribute(slot);
      newType->addAttribute(attr, attrType, type->is_parameter(slot), type->is_buffer(slot));
    }
    for (size_t i = 0; i < type->numConstants(); ++i) {
      newType->addConstant(type->getConstantName(i), type->getConstant(i));
    }
    cu_->register_type(newType);
    return newType;
  }

  // Copies every method, giving each module-typed value the type of the instance it denotes.
  void cloneMethods(const c10::ClassTypePtr& oldType, const c10::ClassTypePtr& newType,
                    const Module& instance) {
    for (torch::jit::Function* function : oldType->methods()) {
      auto graph = graphOf(function)->copy();
      std::map<torch::jit::Value*, Module> instances;
      torch::jit::Value* self = graph->inputs().at(0);
      self->setType(newType);
      instances.emplace(self, instance);
      forEachNode(graph->block(), [&](torch::jit::Node* node) {
        if (node->kind() != c10::prim::GetAttr) return;
        auto owner = instances.find(node->input(0));
        if (owner == instances.end()) return;
        const std::string& field = node->s(c10::attr::name);
        auto value = owner->second.attr(field);
        if (!value.isObject() || !value.toObject()->type()->is_module()) return;
        Module child(value.toObject());
        node->output()->setType(child.type());
        instances.emplace(node->output(), child);
      });
      auto* clone = cu_->create_function(c10::QualifiedName(*newType->name(), function->name()), graph);
      clone->setSchema(function->getSchema().cloneWithRemappedTypes(
          [&](c10::TypePtr t) { return t == oldType ? c10::TypePtr(newType) : t; }));
      newType->addMethod(clone);
    }
  }

  PassContext& context_;
  const FsdpPlan& plan_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  std::map<c10::ClassType*, std::set<std::string>> signaturesOfType_;
  std::map<std::string, std::string> signatureOfPath_;
  std::map<std::pair<c10::ClassType*, std::string>, c10::ClassTypePtr> clonedTypes_;
  int counter_ = 0;
  bool failed_ = false;
};

}  // namespace

bool specializeUnitTypes(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  return TypeSpecializer(context, *plan).run();
}

PassInfo specializeUnitTypesPass() {
  return {kPassName, "clone class types shared by instances that need different rewrites", specializeUnitTypes};
}

}  // namespace fsdp_opt
