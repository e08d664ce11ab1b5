#include <fsdp_opt/passes/analysis.h>
#include <fsdp_opt/passes/pass_manager.h>
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include <dlfcn.h>

#include "ir/module_tree.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>

namespace fsdp_opt {

void Statistics::set(const std::string& name, const std::string& value) {
  for (auto& entry : entries_) {
    if (entry.first == name) {
      entry.second = value;
      return;
    }
  }
  entries_.emplace_back(name, value);
}

void Statistics::add(const std::string& name, int64_t delta) {
  for (auto& entry : entries_) {
    if (entry.first == name) {
      entry.second = std::to_string(std::stoll(entry.second) + delta);
      return;
    }
  }
  entries_.emplace_back(name, std::to_string(delta));
}

PassContext::PassContext(torch::jit::Module module, PipelineOptions options,
                         DiagnosticSink& diagnostics)
    : module_(std::move(module)), options_(std::move(options)), diagnostics_(diagnostics) {}

const FsdpPlan* PassContext::plan() {
  if (!planAttempted_) {
    planAttempted_ = true;
    FsdpPlan plan;
    if (findUnits(module_, options_, diagnostics_, plan) &&
        collectParameterGroups(module_, diagnostics_, plan) &&
        checkSomethingIsSharded(module_, options_.worldSize, plan, diagnostics_)) {
      plan_ = std::move(plan);
    }
  }
  return plan_ ? &*plan_ : nullptr;
}

PassRegistry& PassRegistry::global() {
  static PassRegistry registry;
  return registry;
}

void PassRegistry::add(PassInfo info) {
  if (find(info.name)) {
    duplicates_.push_back(info.name);
    return;
  }
  passes_.push_back(std::make_unique<PassInfo>(std::move(info)));
}

const PassInfo* PassRegistry::find(const std::string& name) const {
  for (const auto& pass : passes_) {
    if (pass->name == name) return pass.get();
  }
  return nullptr;
}

std::vector<const PassInfo*> PassRegistry::list() const {
  std::vector<const PassInfo*> sorted;
  for (const auto& pass : passes_) sorted.push_back(pass.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const PassInfo* a, const PassInfo* b) { return a->name < b->name; });
  return sorted;
}

std::string loadPassPlugin(const std::string& path) {
  static std::mutex mutex;
  static std::set<void*> registered;
  std::lock_guard<std::mutex> lock(mutex);
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!library) return "cannot load pass plugin '" + path + "': " + dlerror();
  if (registered.count(library)) return "";
  auto entry = reinterpret_cast<PluginEntryPoint>(dlsym(library, kPluginEntryPoint));
  if (!entry) {
    dlclose(library);
    return "'" + path + "' is not a pass plugin: it does not export " + kPluginEntryPoint + "()";
  }
  registerAllPasses();  // built-ins first: a plugin reusing their names is the duplicate
  entry(PassRegistry::global());
  registered.insert(library);
  return "";
}

bool runPipeline(PassContext& context, const std::vector<std::string>& passNames,
                 const PipelineHooks& hooks) {
  auto& registry = PassRegistry::global();
  // A name registered twice (two plugins, or a plugin reusing a built-in's name, in whichever
  // order they were loaded) would run whichever came first: refuse instead, for every caller of
  // the pipeline, not only the CLI.
  if (!registry.duplicates().empty()) {
    context.diagnostics().error("pipeline", "pass '" + registry.duplicates().front() +
                                                "' is registered twice (a pass plugin reuses its name)");
    return false;
  }
  std::vector<const PassInfo*> passes;
  for (const auto& name : passNames) {
    const PassInfo* pass = registry.find(name);
    if (!pass) {
      std::string known;
      for (const PassInfo* p : registry.list()) known += (known.empty() ? "" : ", ") + p->name;
      context.diagnostics().error("pipeline", "unknown pass '" + name + "' (known passes: " + known + ")");
      return false;
    }
    passes.push_back(pass);
  }
  const PassInfo* verifier = registry.find(verifyFsdpPass().name);
  for (const PassInfo* pass : passes) {
    pass->run(context);
    if (context.diagnostics().hasErrors()) return false;
    if (hooks.afterPass) hooks.afterPass(pass->name, context.module());
    if (context.options().verifyEach && verifier && pass != verifier) {
      verifier->run(context);
      if (context.diagnostics().hasErrors()) {
        context.diagnostics().error("pipeline", "verification failed after pass '" + pass->name + "'");
        return false;
      }
    }
  }
  return true;
}

namespace {

// Nodes in nested blocks print their source location (" # file:line:col") whatever the flag;
// drop it, so the text is the same wherever the model was scripted.
std::string withoutSourceComments(const std::string& text) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line;
  while (std::getline(in, line)) {
    size_t comment = line.find(" # ");
    if (comment != std::string::npos) line.erase(comment);
    out << line << "\n";
  }
  return out.str();
}

}  // namespace

std::string printModuleIR(const torch::jit::Module& module, const std::string& method) {
  std::ostringstream out;
  forEachMethod(module, MethodScope::kEveryType, [&](const VisitedMethod& m) {
    if (!method.empty() && m.function->name() != method) return 0;
    out << "// " << displayPath(m.modulePath) << " : " << m.type->name()->qualifiedName()
        << " :: " << m.function->name() << "\n";
    out << withoutSourceComments(m.graph->toString(/*print_source_locations=*/false)) << "\n";
    return 0;
  });
  return out.str();
}

}  // namespace fsdp_opt
