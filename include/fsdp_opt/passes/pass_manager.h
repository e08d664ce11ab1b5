// Pass registry and pipeline runner. Every pass is a function over a PassContext returning whether
// it changed the module; it reports through the context's DiagnosticSink and never prints.
#pragma once

#include <fsdp_opt/passes/diagnostics.h>
#include <fsdp_opt/passes/options.h>
#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {

// Named counters and facts for --stats, in insertion order.
class Statistics {
 public:
  void set(const std::string& name, const std::string& value);
  void add(const std::string& name, int64_t delta);
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

class PassContext {
 public:
  PassContext(torch::jit::Module module, PipelineOptions options, DiagnosticSink& diagnostics);

  torch::jit::Module& module() { return module_; }
  // Type specialization may build a new root object.
  void replaceModule(torch::jit::Module module) { module_ = std::move(module); }
  const PipelineOptions& options() const { return options_; }
  DiagnosticSink& diagnostics() { return diagnostics_; }
  Statistics& statistics() { return statistics_; }

  // The plan, computed on first use from the module as it is then. Its errors go to the sink;
  // returns nullptr when the plan could not be built.
  const FsdpPlan* plan();

 private:
  torch::jit::Module module_;
  PipelineOptions options_;
  DiagnosticSink& diagnostics_;
  Statistics statistics_;
  std::optional<FsdpPlan> plan_;
  bool planAttempted_ = false;
};

using PassFunction = std::function<bool(PassContext&)>;

struct PassInfo {
  std::string name;     // the flag: --passes=name, --print-ir-after=name
  std::string summary;  // one line, shown by --list-passes
  PassFunction run;
};

class PassRegistry {
 public:
  static PassRegistry& global();
  // A second registration of a name is an error reported by `find` users, never silently ignored.
  void add(PassInfo info);
  const PassInfo* find(const std::string& name) const;
  std::vector<const PassInfo*> list() const;  // sorted by name
  std::vector<std::string> duplicates() const { return duplicates_; }

 private:
  std::vector<std::unique_ptr<PassInfo>> passes_;
  std::vector<std::string> duplicates_;
};

// A pass plugin is a shared library that exports this function; loadPassPlugin calls it once
// with the global registry. Registration is explicit: nothing runs when the library is merely
// mapped, and a library that is not a plugin is refused instead of silently adding nothing.
//   extern "C" void fsdp_opt_register_passes(fsdp_opt::PassRegistry& registry) {
//     registry.add({"my-pass", "one-line summary", myPass});
//   }
constexpr const char* kPluginEntryPoint = "fsdp_opt_register_passes";
using PluginEntryPoint = void (*)(PassRegistry&);

// Loads a pass plugin (dlopen) and calls its entry point; loading one path again does nothing.
// Returns "" or one line naming the library and the cause. fsdp-opt's --load-pass-plugin,
// fsdp_opt.load_plugin() in Python and C++ programs all load plugins through it.
std::string loadPassPlugin(const std::string& path);

// Registers the built-in passes (idempotent). fsdp-opt and the plugin API both call it.
void registerAllPasses();

// The default pipeline, in order; it ends with the verifier.
std::vector<std::string> defaultPipeline();

struct PipelineHooks {
  // Called after each pass with its name (for --print-ir-after).
  std::function<void(const std::string& pass, torch::jit::Module& module)> afterPass;
};

// Runs the named passes in order. Stops at the first pass that reports an error. Unknown names
// are an error listing the known ones. With options.verifyEach, the verifier runs after each pass.
bool runPipeline(PassContext& context, const std::vector<std::string>& passNames,
                 const PipelineHooks& hooks = {});

// The rewritten graph of every method of every distinct module type, without source ranges.
// With `method`, only methods of that name.
std::string printModuleIR(const torch::jit::Module& module, const std::string& method = "");

}  // namespace fsdp_opt
