// Pass check-parameter-aliases: refuses what a model does with a unit's parameters that would
// not survive sharding.
//
// Between a gather and its reshard a unit's parameters are full tensors that exist only until
// the reshard. Two things an unsharded model may do with its parameters then go wrong:
//  - writing one in place (`self.weight.mul_(s)`, `w.data.clamp_()`, nn.Embedding's max_norm
//    renormalisation). The write lands on the gathered copy, which the reshard drops, so the next
//    call and every training step start from the unwritten shards and differ from the original,
//    silently;
//  - letting a value that may alias one (the parameter itself, a view of it, a list holding it)
//    outlive the gather: returned by an entry method, returned by a unit's forward method to its
//    caller, or stored in a module attribute or a list held by one. After the reshard the
//    parameter is its shard again (the caller holds the shard), and a view's storage is freed
//    when the call ran in grad mode (reading it crashes).
// This pass follows every value that may alias a unit parameter, by the ops' alias annotations,
// through the methods reachable from the root's methods, instance by instance, and reports each
// such write and escape as an error naming the method, the parameter and the op; at
// --world-size=1, where nothing is sharded, as a warning.
// Assumes: the plan is built; runs before the rewrite. Changes nothing. Each method is read from a
// copy with its function calls inlined and its constants propagated, so code that the module's
// constants rule out (nn.Embedding's renormalisation when max_norm is None) does not count.
// Conservative where the annotations are: an op that may return its input (`reshape`, `to`,
// `contiguous`) aliases it, a tuple aliases what any element does, and an element taken from a
// list aliases whatever the list holds. A method called through an interface is not followed.
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/inline_calls.h"
#include "ir/module_tree.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <map>
#include <optional>
#include <set>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "check-parameter-aliases";
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;
using Params = std::set<std::string>;  // paths of the unit parameters a value may alias

bool mayHoldTensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (mayHoldTensor(contained)) return true;
  }
  return false;
}

bool isTensorArgument(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

// Alias sets an annotation names, its contained types' included.
void collectSets(const c10::AliasInfo& info, std::set<c10::Symbol>& sets, bool& wildcard) {
  for (const c10::Symbol& set : info.beforeSets()) sets.insert(set);
  wildcard = wildcard || info.isWildcardBefore();
  for (const c10::AliasInfo& contained : info.containedTypes()) collectSets(contained, sets, wildcard);
}

// Whether the argument's annotation writes a tensor (not only a container holding tensors).
bool writesTensor(const c10::Argument& argument) {
  const c10::AliasInfo* info = argument.alias_info();
  if (!info) return false;
  if (info->isWrite() && isTensorArgument(argument.type())) return true;
  for (const c10::AliasInfo& contained : info->containedTypes()) {
    if (contained.isWrite()) return true;
  }
  return false;
}

// Whether the argument's annotation writes a container (a list appended to, a dict set).
bool writesContainer(const c10::Argument& argument) {
  const c10::AliasInfo* info = argument.alias_info();
  return info && info->isWrite() && !isTensorArgument(argument.type());
}

// Writes that change a tensor's autograd flags only, not its values.
bool writesMetadataOnly(const Node* node) {
  return node->kind() == c10::Symbol::fromQualString("aten::requires_grad_");
}

// `function`'s graph with its function calls inlined, constants propagated and dead code gone.
std::shared_ptr<torch::jit::Graph> preparedGraph(torch::jit::Function* function) {
  std::shared_ptr<torch::jit::Graph> graph = graphOf(function)->copy();
  for (int round = 0; round < 32; ++round) {
    std::vector<std::pair<Node*, torch::jit::GraphFunction*>> calls;
    forEachNode(graph->block(), [&](Node* node) {
      if (node->kind() != c10::prim::CallFunction) return;
      auto type = node->input(0)->type()->cast<c10::FunctionType>();
      torch::jit::GraphFunction* callee = type ? torch::jit::tryToGraphFunction(*type->function()) : nullptr;
      if (callee) calls.emplace_back(node, callee);
    });
    if (calls.empty()) break;
    for (auto& [node, callee] : calls) {
      node->removeInput(0);  // the function itself; the callee's inputs are the arguments
      torch::jit::inlineCallTo(node, callee);
    }
  }
  // Best effort: without it an arm the constants rule out only adds findings, never hides one.
  try {
    torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
  } catch (const std::exception&) {
  }
  return graph;
}

class AliasWalk {
 public:
  AliasWalk(const torch::jit::Module& root, const FsdpPlan& plan, DiagnosticSink& diagnostics, bool sharded)
      : index_(root), plan_(plan), diagnostics_(diagnostics), sharded_(sharded) {}

  void entry(const std::string& method) {
    std::vector<Params> returned = walkMethod("", method, {});
    for (const Params& params : returned) {
      for (const std::string& param : params) {
        report("entry method '" + method + "' returns a value that may alias parameter '" + param + "' of unit '" +
               unitName(param) + "'; after the call the parameter is sharded again, so the caller would hold its shard or freed "
               "memory; return a copy (.clone())");
      }
    }
  }

 private:
  struct Frame {
    std::string path;
    std::string method;
    std::map<Value*, Params> aliases;
    std::map<Value*, std::string> modules;  // module-typed value -> instance path
    std::map<Value*, std::string> state;    // container read from a module attribute -> its path
  };

  // What each output of the method may alias, given what its arguments (after self) may.
  std::vector<Params> walkMethod(const std::string& path, const std::string& method, const std::vector<Params>& args) {
    std::string key = path + "::" + method;
    for (const Params& arg : args) {
      key += "|";
      for (const std::string& param : arg) key += param + ",";
    }
    auto known = memo_.find(key);
    if (known != memo_.end()) return known->second;
    memo_[key] = {};  // guards the walk only: TorchScript has no recursion
    auto module = index_.find(path);
    torch::jit::Function* function = module ? module->type()->findMethod(method) : nullptr;
    if (!function) return {};
    auto prepared = prepared_.find(function);
    if (prepared == prepared_.end()) prepared = prepared_.emplace(function, preparedGraph(function)).first;
    const std::shared_ptr<torch::jit::Graph>& graph = prepared->second;

    Frame frame{path, method, {}, {}, {}};
    frame.modules[graph->inputs().at(0)] = path;
    for (size_t i = 0; i < args.size() && i + 1 < graph->inputs().size(); ++i) {
      if (!args[i].empty()) frame.aliases[graph->inputs()[i + 1]] = args[i];
    }
    walkBlock(graph->block(), frame);
    std::vector<Params> returned;
    for (Value* output : graph->outputs()) returned.push_back(aliasesOf(frame, output));
    return memo_[key] = returned;
  }

  // By reference, as every input of every node is looked up (std::map keeps references valid
  // while merge() inserts).
  static const Params& aliasesOf(const Frame& frame, Value* value) {
    static const Params kNone;
    auto it = frame.aliases.find(value);
    return it == frame.aliases.end() ? kNone : it->second;
  }

  // Adds `params` to what `value` may alias; whether that grew.
  static bool merge(Frame& frame, Value* value, const Params& params) {
    if (params.empty()) return false;
    Params& into = frame.aliases[value];
    size_t before = into.size();
    into.insert(params.begin(), params.end());
    return into.size() != before;
  }

  std::string where(const Frame& frame) const {
    return "method '" + frame.method + "' of '" + displayPath(frame.path) + "'";
  }

  std::string unitName(const std::string& param) const { return displayPath(plan_.unitOfParam(param)->path); }

  void report(const std::string& message) {
    if (reported_.insert(message).second) diagnostics_.errorWhenSharded(kPassName, message, sharded_);
  }

  void walkBlock(Block* block, Frame& frame) {
    for (Node* node : block->nodes()) walkNode(node, frame);
  }

  void walkNode(Node* node, Frame& frame) {
    const auto kind = node->kind();
    if (kind == c10::prim::GetAttr) return visitGetAttr(node, frame);
    if (kind == c10::prim::SetAttr) return visitSetAttr(node, frame);
    if (kind == c10::prim::CallMethod) return visitCall(node, frame);
    if (kind == c10::prim::If) return visitIf(node, frame);
    if (kind == c10::prim::Loop) return visitLoop(node, frame);
    if (const c10::FunctionSchema* schema = node->maybeSchema()) return visitOp(node, *schema, frame);
    // Constructors, unpacking, casts: an output that can hold a tensor may hold any input.
    Params all;
    for (Value* input : node->inputs()) {
      const Params& in = aliasesOf(frame, input);
      all.insert(in.begin(), in.end());
    }
    for (Value* output : node->outputs()) {
      if (mayHoldTensor(output->type())) merge(frame, output, all);
    }
  }

  // The attribute a prim::GetAttr or prim::SetAttr names: its path, its owner's type, its slot.
  struct Attribute {
    std::string path;
    c10::ClassTypePtr owner;
    size_t slot = 0;
  };
  std::optional<Attribute> attributeOf(Node* node, const Frame& frame) const {
    auto owner = frame.modules.find(node->input(0));
    if (owner == frame.modules.end()) return std::nullopt;
    auto module = index_.find(owner->second);
    if (!module) return std::nullopt;
    const std::string& name = node->s(c10::attr::name);
    auto slot = module->type()->findAttributeSlot(name);
    if (!slot) return std::nullopt;
    return Attribute{joinPath(owner->second, name), module->type(), *slot};
  }

  void visitGetAttr(Node* node, Frame& frame) {
    auto attribute = attributeOf(node, frame);
    if (!attribute) return;
    auto type = attribute->owner->getAttribute(attribute->slot)->cast<c10::ClassType>();
    if (type && type->is_module()) {
      frame.modules[node->output()] = attribute->path;
    } else if (attribute->owner->is_parameter(attribute->slot)) {
      if (plan_.unitOfParam(attribute->path)) frame.aliases[node->output()] = {attribute->path};
    } else if (mayHoldTensor(node->output()->type()) && !isTensorArgument(node->output()->type())) {
      frame.state[node->output()] = attribute->path;
    }
  }

  void visitSetAttr(Node* node, Frame& frame) {
    auto attribute = attributeOf(node, frame);
    // Assigning a parameter slot is verify-fsdp's error, whatever the value.
    if (!attribute || attribute->owner->is_parameter(attribute->slot)) return;
    reportStored(frame, aliasesOf(frame, node->input(1)), attribute->path);
  }

  void reportStored(const Frame& frame, const Params& params, const std::string& attributePath) {
    for (const std::string& param : params) {
      report(where(frame) + " stores a value that may alias parameter '" + param + "' of unit '" + unitName(param) +
             "' in attribute '" + attributePath +
             "', where it outlives the gather (after it the parameter is sharded again); store a copy (.clone())");
    }
  }

  void visitCall(Node* node, Frame& frame) {
    auto callee = frame.modules.find(node->input(0));
    std::vector<Params> args;
    for (size_t i = 1; i < node->inputs().size(); ++i) args.push_back(aliasesOf(frame, node->input(i)));
    if (callee == frame.modules.end()) {  // an interface: not followed, its outputs may alias its arguments
      Params all;
      for (const Params& arg : args) all.insert(arg.begin(), arg.end());
      for (Value* output : node->outputs()) merge(frame, output, all);
      return;
    }
    const std::string& method = node->s(c10::attr::name);
    std::vector<Params> returned = walkMethod(callee->second, method, args);
    // A call of a unit's forward method from outside it is resharded right after it returns.
    const Unit* unit = plan_.unitAt(callee->second);
    const bool resharded = unit && !unit->path.empty() && callee->second != frame.path && unit->hasForwardMethod(method);
    for (size_t i = 0; i < node->outputs().size() && i < returned.size(); ++i) {
      Params outlives;
      for (const std::string& param : returned[i]) {
        if (resharded && plan_.unitOfParam(param) == unit) {
          report("method '" + method + "' of unit '" + displayPath(unit->path) +
                 "' returns a value that may alias its parameter '" + param + "' to " + where(frame) +
                 ", where it outlives the unit's gather around the call; return a copy (.clone())");
        } else {
          outlives.insert(param);
        }
      }
      merge(frame, node->output(i), outlives);
    }
  }

  void visitIf(Node* node, Frame& frame) {
    for (Block* arm : node->blocks()) {
      walkBlock(arm, frame);
      for (size_t i = 0; i < node->outputs().size(); ++i) merge(frame, node->output(i), aliasesOf(frame, arm->outputs()[i]));
    }
  }

  // Inputs (trip count, condition, carried...), body inputs (iteration, carried...), body outputs
  // (condition, carried...), outputs (carried...): walked until what the carried values may
  // alias stops growing.
  void visitLoop(Node* node, Frame& frame) {
    Block* body = node->blocks().at(0);
    const size_t carried = node->outputs().size();
    for (int round = 0; round < 4; ++round) {
      bool grew = false;
      for (size_t k = 0; k < carried; ++k) {
        grew = merge(frame, body->inputs()[k + 1], aliasesOf(frame, node->input(k + 2))) || grew;
        grew = merge(frame, body->inputs()[k + 1], aliasesOf(frame, body->outputs()[k + 1])) || grew;
      }
      if (round > 0 && !grew) break;
      walkBlock(body, frame);
    }
    for (size_t k = 0; k < carried; ++k) merge(frame, node->output(k), aliasesOf(frame, body->inputs()[k + 1]));
  }

  void visitOp(Node* node, const c10::FunctionSchema& schema, Frame& frame) {
    const auto& arguments = schema.arguments();
    Params others;  // what the op's inputs may alias, for a container it writes into
    for (size_t i = 0; i < node->inputs().size() && i < arguments.size(); ++i) {
      const Params& in = aliasesOf(frame, node->input(i));
      if (in.empty()) continue;
      others.insert(in.begin(), in.end());
      if (writesTensor(arguments[i]) && !writesMetadataOnly(node)) {
        for (const std::string& param : in) reportWrite(frame, param, node->kind().toQualString());
      }
    }
    for (size_t i = 0; i < node->inputs().size() && i < arguments.size(); ++i) {
      if (!writesContainer(arguments[i])) continue;
      Params into = others;
      for (const std::string& param : aliasesOf(frame, node->input(i))) into.erase(param);
      merge(frame, node->input(i), into);
      auto held = frame.state.find(node->input(i));
      if (held != frame.state.end()) reportStored(frame, into, held->second);
    }
    const auto& returns = schema.returns();
    for (size_t j = 0; j < node->outputs().size() && j < returns.size(); ++j) {
      const c10::AliasInfo* out = returns[j].alias_info();
      std::set<c10::Symbol> outSets;
      bool outWildcard = false;
      if (out) collectSets(*out, outSets, outWildcard);
      const bool outContainer = mayHoldTensor(node->output(j)->type()) && !isTensorArgument(node->output(j)->type());
      for (size_t i = 0; i < node->inputs().size() && i < arguments.size(); ++i) {
        const Params& in = aliasesOf(frame, node->input(i));
        if (in.empty()) continue;
        const bool inContainer = !isTensorArgument(node->input(i)->type());
        std::set<c10::Symbol> inSets;
        bool inWildcard = false;
        if (const c10::AliasInfo* info = arguments[i].alias_info()) collectSets(*info, inSets, inWildcard);
        bool shared = std::any_of(inSets.begin(), inSets.end(), [&](const c10::Symbol& s) { return outSets.count(s); });
        // An element out of a container (t(*)), or a container made from one without annotations
        // (aten::list, list slicing): the elements are the same tensors.
        bool element = inContainer && (outWildcard || (!out && outContainer));
        if (shared || element) merge(frame, node->output(j), in);
      }
    }
  }

  void reportWrite(const Frame& frame, const std::string& param, const std::string& op) {
    std::string why = op == "aten::embedding_renorm_" ? " (nn.Embedding's max_norm renormalises its weight in place)" : "";
    report(where(frame) + " writes parameter '" + param + "' of unit '" + unitName(param) + "' in place (" + op + ")" +
           why + "; the write would land on the gathered copy, which the reshard drops, so later calls and training "
           "would differ from the original; write to a copy, or keep the parameter out of every unit");
  }

  ModuleIndex index_;
  const FsdpPlan& plan_;
  DiagnosticSink& diagnostics_;
  bool sharded_;
  std::map<torch::jit::Function*, std::shared_ptr<torch::jit::Graph>> prepared_;
  std::map<std::string, std::vector<Params>> memo_;
  std::set<std::string> reported_;
};

}  // namespace

bool checkParameterAliases(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  AliasWalk walk(context.module(), *plan, context.diagnostics(), context.options().worldSize > 1);
  for (torch::jit::Function* function : context.module().type()->methods()) walk.entry(function->name());
  return false;
}

PassInfo checkParameterAliasesPass() {
  return {kPassName, "refuse in-place writes to unit parameters and aliases of them that outlive their gather",
          checkParameterAliases};
}

}  // namespace fsdp_opt
