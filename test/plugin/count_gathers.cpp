// A pass plugin for the tests and docs/plugin.md: `count-gathers` reports, as one remark, how
// many fsdp::all_gather nodes the module's graphs hold. It only reads the module, so it can sit
// anywhere in a pipeline: `fsdp-opt --load-pass-plugin=libfsdp_test_plugin.so
// --passes=...,insert-unit-gathers,count-gathers --remarks`.
//
// fsdp_opt::loadPassPlugin (fsdp-opt's --load-pass-plugin, fsdp_opt.load_plugin in Python, or a
// C++ program) calls the exported fsdp_opt_register_passes below once, with the registry that
// libfsdp_passes.so holds.
#include <fsdp_opt/passes/pass_manager.h>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <set>
#include <string>

namespace {

int64_t countInBlock(torch::jit::Block* block, c10::Symbol kind) {
  int64_t count = 0;
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == kind) ++count;
    for (torch::jit::Block* inner : node->blocks()) count += countInBlock(inner, kind);
  }
  return count;
}

bool countGathers(fsdp_opt::PassContext& context) {
  const c10::Symbol allGather = c10::Symbol::fromQualString("fsdp::all_gather");
  int64_t gathers = 0, methods = 0;
  // Graphs belong to class types: visit each type once, however many instances share it.
  std::set<c10::ClassType*> seen;
  for (const auto& item : context.module().named_modules()) {
    c10::ClassTypePtr type = item.value.type();
    if (!seen.insert(type.get()).second) continue;
    for (torch::jit::Function* method : type->methods()) {
      int64_t n = countInBlock(torch::jit::toGraphFunction(*method).graph()->block(), allGather);
      if (n > 0) ++methods;
      gathers += n;
    }
  }
  context.diagnostics().remark("count-gathers", std::to_string(gathers) + " fsdp::all_gather node(s) in " +
                                                    std::to_string(methods) + " method(s)");
  context.statistics().set("fsdp::all_gather nodes", std::to_string(gathers));
  return false;  // reads only
}

}  // namespace

extern "C" void fsdp_opt_register_passes(fsdp_opt::PassRegistry& registry) {
  registry.add({"count-gathers", "(test plugin) remark with the number of fsdp::all_gather nodes", countGathers});
}
