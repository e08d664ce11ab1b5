// fsdp-opt: the `opt` of fsdp-opt. Parses flags, builds the pipeline, runs it, writes the output,
// and maps the outcome to an exit code (0 ok, 1 bad input or failed pass, 2 bad usage).
#include <fsdp_opt/passes/deferred_load.h>
#include <fsdp_opt/passes/diagnostics.h>
#include <fsdp_opt/fsdp_opt.h>
#include <fsdp_opt/runtime/op_library.h>
#include <fsdp_opt/runtime/runtime.h>
#include <fsdp_opt/passes/output.h>
#include <fsdp_opt/passes/pass_manager.h>
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include <CLI/CLI.hpp>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace {

using namespace fsdp_opt;

struct Flags {
  std::string input;
  // Pipeline options (options.h) by name, as given; applyOption parses them.
  std::map<std::string, std::vector<std::string>> repeated;
  std::map<std::string, std::optional<std::string>> single;
  std::string output;
  bool printIr = false;
  std::string method;
  std::string passes;
  bool listPasses = false;
  std::vector<std::string> plugins;
  std::vector<std::string> opLibraries;
  std::vector<std::string> printIrAfter;
  bool printIrAfterAll = false;
  bool verifyEach = false;
  bool remarks = false;
  bool stats = false;
};

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 1;
}

std::vector<std::string> splitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

int run(const Flags& flags) {
  registerAllPasses();
  for (const auto& plugin : flags.plugins) {
    std::string error = loadPassPlugin(plugin);
    if (!error.empty()) return fail(error);
  }
  if (!PassRegistry::global().duplicates().empty()) {
    return fail("pass '" + PassRegistry::global().duplicates().front() + "' is registered twice");
  }
  if (flags.listPasses) {
    const auto passes = PassRegistry::global().list();
    size_t width = 0;
    for (const PassInfo* pass : passes) width = std::max(width, pass->name.size());
    for (const PassInfo* pass : passes) {
      std::cout << "  " << pass->name << std::string(width + 2 - pass->name.size(), ' ') << pass->summary << "\n";
    }
    return 0;
  }
  if (flags.input.empty()) return fail("no input file (usage: fsdp-opt INPUT.pt [options])");
  for (const auto& library : flags.opLibraries) {
    if (std::string error = fsdp_opt::runtime::loadOpLibrary(library); !error.empty()) return fail(error);
  }
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(flags.input)) return fail("cannot read input '" + flags.input + "': no such file");
  if (!flags.output.empty()) {
    std::error_code same;
    if (fs::exists(flags.output) && fs::equivalent(flags.output, flags.input, same)) {
      return fail("output '" + flags.output + "' is the input; fsdp-opt never modifies its input");
    }
  }

  PipelineOptions options;
  for (const OptionInfo& info : pipelineOptions()) {
    std::vector<std::string> values;
    if (auto many = flags.repeated.find(info.name); many != flags.repeated.end()) values = many->second;
    if (auto one = flags.single.find(info.name); one != flags.single.end() && one->second) values.push_back(*one->second);
    for (const auto& value : values) {
      std::string error = applyOption(options, info.name, value);
      if (!error.empty()) return fail(error);
    }
  }
  if (std::string error = checkOptions(options); !error.empty()) return fail(error);
  options.verifyEach = flags.verifyEach;
  options.printIrAfter.insert(flags.printIrAfter.begin(), flags.printIrAfter.end());
  options.printIrAfterAll = flags.printIrAfterAll;
  std::vector<std::string> pipeline = flags.passes.empty() ? defaultPipeline() : splitCommas(flags.passes);
  for (const auto& name : options.printIrAfter) {
    if (!PassRegistry::global().find(name)) return fail("--print-ir-after names unknown pass '" + name + "'");
  }

  // The input's hash (for the manifest) is read beside the load, the pipeline and the first
  // rank file's tensors: on a large model it costs more than the load and the pipeline together.
  std::shared_future<std::string> inputSha256;
  if (!flags.output.empty()) inputSha256 = std::async(std::launch::async, sha256OfFile, flags.input).share();
  auto hashError = [&] {
    if (!inputSha256.valid()) return std::string();
    try {
      inputSha256.get();
      return std::string();
    } catch (const std::exception& e) {
      return fsdp_opt::runtime::oneLineMessage(e);
    }
  };
  auto cannotLoad = [&](const std::string& why) {
    return fail("cannot load '" + flags.input + "' as a TorchScript module: " +
                fsdp_opt::runtime::withMissingOpLibraryHint(why));
  };
  torch::jit::Module module;
  // Parameters stay on disk until the writer cuts each rank's rows (deferred_load.h).
  std::shared_ptr<ParameterBytes> parameterBytes;
  torch::jit::ExtraFilesMap extraFiles;  // carried into every file written
  try {
    DeferredLoad loaded = loadDeferringParameters(flags.input);
    extraFiles = readExtraFiles(flags.input);
    module = std::move(loaded.module);
    parameterBytes = std::move(loaded.parameters);
    // Said when it matters: a model too small to defer anything (64 KiB records) gets no line.
    if (flags.remarks && (!parameterBytes || parameterBytes->deferredCount() > 0)) {
      std::string message = parameterBytes
          ? std::to_string(parameterBytes->deferredCount()) + " parameter records (" +
                std::to_string(parameterBytes->deferredBytes()) + " bytes) stay on disk until each rank's rows are written"
          : "the module is loaded whole: " + loaded.loadedWholeBecause;
      std::cerr << formatDiagnostic({Severity::Remark, "load", message}) << "\n";
    }
  } catch (const std::exception& e) {
    const std::string unreadable = hashError();
    return cannotLoad(unreadable.empty() ? fsdp_opt::runtime::oneLineMessage(e) : unreadable);
  }

  PipelineHooks hooks;
  hooks.afterPass = [&](const std::string& pass, torch::jit::Module& current) {
    if (options.printIrAfterAll || options.printIrAfter.count(pass)) {
      std::cerr << "// *** IR after " << pass << " ***\n" << printModuleIR(current, flags.method);
    }
  };
  TransformResult result = transform(module, options, pipeline, hooks, InputModule::Consume);
  bool errorShown = false;
  for (const auto& diagnostic : result.diagnostics) {
    if (diagnostic.severity == Severity::Remark && !flags.remarks) continue;
    if (diagnostic.severity == Severity::Error) {
      std::cerr << (errorShown ? "note: " + diagnostic.message : formatDiagnostic(diagnostic)) << "\n";
      errorShown = true;
    } else {
      std::cerr << formatDiagnostic(diagnostic) << "\n";
    }
  }
  if (!result.ok) return 1;

  if (!flags.method.empty() && !result.module.find_method(flags.method)) {
    bool anywhere = false;
    for (const auto& item : result.module.named_modules()) anywhere = anywhere || item.value.find_method(flags.method);
    if (!anywhere) return fail("--method: no module has a method '" + flags.method + "'");
  }
  if (flags.printIr) std::cout << printModuleIR(result.module, flags.method);
  if (flags.stats) {
    std::cout << "stats:\n";
    for (const auto& [name, value] : result.statistics) std::cout << "  " << name << ": " << value << "\n";
  }
  if (!flags.output.empty()) {
    try {
      writeOutput(result, options, flags.output, {flags.input, "", parameterBytes, inputSha256, std::move(extraFiles)});
    } catch (const std::exception& e) {
      return fail("cannot write '" + flags.output + "': " + fsdp_opt::runtime::oneLineMessage(e));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"fsdp-opt: insert and optimise FSDP collectives in TorchScript models", "fsdp-opt"};
  app.add_option("input", flags.input, "TorchScript model (.pt)");
  for (const OptionInfo& info : pipelineOptions()) {
    std::string flag = std::string("--") + info.name;
    CLI::Option* option = info.repeatable
                              ? app.add_option(flag, flags.repeated[info.name], std::string(info.help) + " (repeatable)")
                              : app.add_option(flag, flags.single[info.name], info.help);
    option->type_name(info.metavar);
  }
  app.add_option("-o", flags.output, "output: a .pt file (world size 1) or a directory");
  app.add_flag("--print-ir", flags.printIr, "print the rewritten graphs to stdout");
  app.add_option("--method", flags.method, "with --print-ir*: only methods of this name");
  app.add_option("--passes", flags.passes, "comma-separated pipeline to run instead of the default");
  app.add_flag("--list-passes", flags.listPasses, "list registered passes");
  app.add_option("--load-pass-plugin", flags.plugins, "load a shared library that registers passes");
  app.add_option("--load-op-library", flags.opLibraries,
                 "load a shared library that registers ops the model calls (torchvision's _C*.so, a C++ "
                 "extension), as torch.ops.load_library does (repeatable)")
      ->type_name("LIB");
  app.add_option("--print-ir-after", flags.printIrAfter, "print the IR after PASS to stderr (repeatable)");
  app.add_flag("--print-ir-after-all", flags.printIrAfterAll, "print the IR after every pass to stderr");
  app.add_flag("--verify-each", flags.verifyEach, "run the verifier after each pass");
  app.add_flag("--remarks", flags.remarks, "one line per decision, to stderr");
  app.add_flag("--stats", flags.stats, "print counts to stdout");
  app.set_version_flag("--version", std::string("fsdp-opt ") + FSDP_OPT_VERSION + " (torch " + FSDP_OPT_TORCH_VERSION + ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "error: " << fsdp_opt::runtime::oneLineMessage(e) << "\n";
    return 1;
  }
}
