#include "module_tree.h"

#include <fsdp_opt/passes/pattern.h>

#include <torch/csrc/jit/api/function_impl.h>

#include <set>

namespace fsdp_opt {

ModuleIndex::ModuleIndex(const torch::jit::Module& root) {
  for (const auto& item : root.named_modules()) {
    byPath_[item.name] = modules_.size();
    modules_.emplace_back(item.name, item.value);
  }
}

std::optional<torch::jit::Module> ModuleIndex::find(const std::string& path) const {
  auto it = byPath_.find(path);
  if (it == byPath_.end()) return std::nullopt;
  return modules_[it->second].second;
}

bool isWithin(const std::string& path, const std::string& ancestor) {
  if (ancestor.empty()) return true;
  if (path.size() < ancestor.size() || path.compare(0, ancestor.size(), ancestor) != 0) return false;
  return path.size() == ancestor.size() || path[ancestor.size()] == '.';
}

std::string relativePath(const std::string& path, const std::string& ancestor) {
  if (ancestor.empty()) return path;
  if (path.size() == ancestor.size()) return "";
  return path.substr(ancestor.size() + 1);
}

std::optional<std::string> parentPath(const std::string& path) {
  if (path.empty()) return std::nullopt;
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

torch::jit::Value* insertGetAttrChain(torch::jit::Graph& graph, torch::jit::Value* module,
                                      const std::string& relPath) {
  torch::jit::Value* current = module;
  size_t start = 0;
  while (start <= relPath.size() && !relPath.empty()) {
    size_t dot = relPath.find('.', start);
    std::string field = relPath.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    current = graph.insertGetAttr(current, field);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

std::shared_ptr<torch::jit::Graph> graphOf(torch::jit::Function* function) {
  return torch::jit::toGraphFunction(*function).graph();
}

std::vector<std::pair<c10::ClassTypePtr, std::string>> distinctModuleTypes(
    const torch::jit::Module& root) {
  std::vector<std::pair<c10::ClassTypePtr, std::string>> types;
  std::set<c10::ClassType*> seen;
  for (const auto& item : root.named_modules()) {
    auto type = item.value.type();
    if (seen.insert(type.get()).second) types.emplace_back(type, item.name);
  }
  return types;
}

int forEachMethod(const torch::jit::Module& root, MethodScope scope,
                  const std::function<int(const VisitedMethod&)>& visit) {
  const auto types = scope == MethodScope::kRootMethods
                         ? std::vector<std::pair<c10::ClassTypePtr, std::string>>{{root.type(), ""}}
                         : distinctModuleTypes(root);
  int total = 0;
  for (const auto& [type, path] : types) {
    for (torch::jit::Function* function : type->methods()) {
      total += visit(VisitedMethod{type, path, function, graphOf(function),
                                   type->name()->qualifiedName() + "::" + function->name()});
    }
  }
  return total;
}

void forEachNode(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& visit) {
  for (torch::jit::Node* node : block->nodes()) {
    visit(node);
    for (torch::jit::Block* nested : node->blocks()) forEachNode(nested, visit);
  }
}

}  // namespace fsdp_opt
