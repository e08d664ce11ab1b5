// Helpers over a module tree and its graphs, shared by the analyses and passes.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

// Every module instance below (and including) the root, in named_modules() pre-order.
class ModuleIndex {
 public:
  explicit ModuleIndex(const torch::jit::Module& root);
  const std::vector<std::pair<std::string, torch::jit::Module>>& modules() const { return modules_; }
  std::optional<torch::jit::Module> find(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, torch::jit::Module>> modules_;
  std::map<std::string, size_t> byPath_;
};

// True when `path` is `ancestor` or below it; every path is below the root "".
bool isWithin(const std::string& path, const std::string& ancestor);
// `path` relative to its ancestor ("blocks.0.fc.weight" in "blocks.0" -> "fc.weight").
std::string relativePath(const std::string& path, const std::string& ancestor);
// Parent path of a module path ("a.b" -> "a", "a" -> ""). The root has none.
std::optional<std::string> parentPath(const std::string& path);

// Inserts prim::GetAttr nodes walking `relPath` from `module` at the current insertion point.
torch::jit::Value* insertGetAttrChain(torch::jit::Graph& graph, torch::jit::Value* module,
                                      const std::string& relPath);

// The graph of a TorchScript method (every module method is a GraphFunction).
std::shared_ptr<torch::jit::Graph> graphOf(torch::jit::Function* function);

// Distinct module types of the tree with one instance path each, in pre-order.
std::vector<std::pair<c10::ClassTypePtr, std::string>> distinctModuleTypes(
    const torch::jit::Module& root);

// Which methods a pass rewrites or checks.
enum class MethodScope {
  // Every method of every distinct module type: a unit's methods are rewritten once for all its
  // instances (specialize-unit-types gave each unit instance a type of its own).
  kEveryType,
  // The root's methods only: the entry methods, the only graphs that see every gather their
  // callers hold open, so that a peak over the whole call can be bounded.
  kRootMethods,
};

// One method as a pass visits it.
struct VisitedMethod {
  c10::ClassTypePtr type;
  std::string modulePath;  // an instance of the type (its first in pre-order; "" for the root)
  torch::jit::Function* function = nullptr;
  std::shared_ptr<torch::jit::Graph> graph;
  std::string label;  // "Type::method", as diagnostics name it
};

// Calls `visit` for each method in `scope`, types in pre-order and methods in definition order;
// returns the sum of what it returned (what the pass counts: gathers merged, loops changed).
int forEachMethod(const torch::jit::Module& root, MethodScope scope,
                  const std::function<int(const VisitedMethod&)>& visit);

// Visits every node of a block and of its nested blocks, in order. Collect before mutating.
void forEachNode(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& visit);

}  // namespace fsdp_opt
