// cpp-pipeline: fsdp-opt's passes in a program's own TorchScript pipeline.
//
// A serving binary that already loads TorchScript models and runs its own graph cleanups can
// add FSDP sharding with one call, fsdp_opt::transform, instead of going through the fsdp-opt
// command line. This example:
//   1. loads MODEL.pt and the method's arguments (a tuple saved with torch.save);
//   2. runs its own cleanup passes, TorchScript's, on a copy of the model: dead-code
//      elimination, constant propagation over immutable types, constant pooling and common
//      subexpression elimination. None of them freezes: parameters stay module attributes,
//      which is what fsdp-opt shards;
//   3. runs fsdp-opt's default pipeline (and, after it, passes of loaded plugins) through the
//      C++ API, which returns diagnostics instead of printing them;
//   4. runs TorchScript's dead-code elimination once more on the rewritten graphs, to show that
//      the fsdp:: ops survive it;
//   5. for a world size above 1 (torchrun's RANK/WORLD_SIZE environment), replaces the units'
//      parameters by this rank's shards in process;
//   6. calls the method on the original and on the rewritten model and compares the outputs
//      bit for bit (fsdp_opt::bitwiseDifference, the comparison fsdp-run --check makes).
//
// usage: cpp-pipeline MODEL.pt ARGS.pt [--method NAME] [--load-pass-plugin LIB.so]...
//                     [--extra-pass NAME]... [--remarks] [fsdp-opt's pipeline options]...
// The pipeline options (--fsdp-unit PATTERN, --fsdp-unit-type NAME, --forward-method
// PATTERN:METHOD, ...) are fsdp-opt's, parsed by fsdp_opt::applyOption.
// Exit status: 0 when the outputs match, 1 on a mismatch or any error.
#include <fsdp_opt/runtime/compare.h>
#include <fsdp_opt/fsdp_opt.h>
#include <fsdp_opt/runtime/runtime.h>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Args {
  std::string model, inputs, method = "forward";
  std::vector<std::string> plugins, extraPasses;
  std::vector<std::pair<std::string, std::string>> pipelineOptions;  // (name, value)
  bool remarks = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "error: " << problem << "\n"
            << "usage: cpp-pipeline MODEL.pt ARGS.pt [--method NAME] [--load-pass-plugin LIB.so]...\n"
            << "       [--extra-pass NAME]... [--remarks] [--fsdp-unit PATTERN]... [--fsdp-unit-type NAME]...\n"
            << "       [--forward-method PATTERN:METHOD]... (any option of fsdp-opt's pipeline)\n";
  std::exit(1);
}

Args parseArgs(int argc, char** argv) {
  Args args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    auto isPipelineOption = [&] {
      for (const auto& info : fsdp_opt::pipelineOptions()) {
        if (arg == std::string("--") + info.name) return true;
      }
      return false;
    };
    if (arg == "--method") args.method = value();
    else if (isPipelineOption()) args.pipelineOptions.emplace_back(arg.substr(2), value());
    else if (arg == "--load-pass-plugin") args.plugins.push_back(value());
    else if (arg == "--extra-pass") args.extraPasses.push_back(value());
    else if (arg == "--remarks") args.remarks = true;
    else if (arg.rfind("--", 0) == 0) usage("unknown option " + arg);
    else positional.push_back(arg);
  }
  if (positional.size() != 2) usage("expected MODEL.pt and ARGS.pt");
  args.model = positional[0];
  args.inputs = positional[1];
  return args;
}

// Every graph of every distinct module type (graphs belong to types, not instances).
std::vector<std::shared_ptr<torch::jit::Graph>> allGraphs(const torch::jit::Module& module) {
  std::vector<std::shared_ptr<torch::jit::Graph>> graphs;
  std::set<c10::ClassType*> seen;
  for (const auto& item : module.named_modules()) {
    if (!seen.insert(item.value.type().get()).second) continue;
    for (torch::jit::Function* method : item.value.type()->methods()) {
      graphs.push_back(torch::jit::toGraphFunction(*method).graph());
    }
  }
  return graphs;
}

int64_t countNodes(torch::jit::Block* block, c10::Symbol kind) {
  int64_t n = 0;
  for (torch::jit::Node* node : block->nodes()) {
    n += node->kind() == kind;
    for (torch::jit::Block* inner : node->blocks()) n += countNodes(inner, kind);
  }
  return n;
}

int64_t countGathers(const torch::jit::Module& module) {
  static const c10::Symbol allGather = c10::Symbol::fromQualString("fsdp::all_gather");
  int64_t n = 0;
  for (const auto& graph : allGraphs(module)) n += countNodes(graph->block(), allGather);
  return n;
}

// The program's own cleanups: TorchScript passes that keep parameters as module attributes.
void cleanup(torch::jit::Module& module) {
  for (std::shared_ptr<torch::jit::Graph> graph : allGraphs(module)) {
    torch::jit::EliminateDeadCode(graph);
    torch::jit::ConstantPropagationImmutableTypes(graph);
    torch::jit::ConstantPooling(graph);
    torch::jit::EliminateCommonSubexpression(graph);
  }
}

std::vector<c10::IValue> loadArgs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value = torch::jit::pickle_load(bytes);
  if (!value.isTuple()) throw std::runtime_error(path + " does not hold a tuple of arguments");
  return value.toTupleRef().elements().vec();
}

int64_t envInt(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::stoll(value) : fallback;
}

int run(const Args& args) {
  for (const auto& plugin : args.plugins) {
    // The plugin's fsdp_opt_register_passes() adds its passes to the registry.
    std::string error = fsdp_opt::loadPassPlugin(plugin);
    if (!error.empty()) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }
  }
  const int64_t worldSize = envInt("WORLD_SIZE", 1), rank = envInt("RANK", 0);
  const std::string who = "cpp-pipeline: rank " + std::to_string(rank) + ": ";

  torch::jit::Module original = torch::jit::load(args.model);
  original.eval();
  std::vector<c10::IValue> inputs = loadArgs(args.inputs);

  // 1. The program's own passes, on a deep copy: the original stays the reference.
  torch::jit::Module prepared = original.clone();
  cleanup(prepared);

  // 2. fsdp-opt's pipeline (the default one, then any extra passes, e.g. from a plugin).
  fsdp_opt::PipelineOptions options;
  auto pipelineOptions = args.pipelineOptions;
  pipelineOptions.emplace_back("world-size", std::to_string(worldSize));
  for (const auto& [name, value] : pipelineOptions) {
    std::string error = fsdp_opt::applyOption(options, name, value);
    if (!error.empty()) usage(error);
  }
  std::vector<std::string> pipeline = fsdp_opt::defaultPipeline();
  pipeline.insert(pipeline.end(), args.extraPasses.begin(), args.extraPasses.end());
  fsdp_opt::TransformResult result = fsdp_opt::transform(prepared, options, pipeline);
  for (const auto& d : result.diagnostics) {
    if (d.severity != fsdp_opt::Severity::Remark || args.remarks) std::cerr << fsdp_opt::formatDiagnostic(d) << "\n";
  }
  if (!result.ok) return 1;

  // 3. TorchScript's DCE after ours: the fsdp:: ops have side effects, so none is removed.
  int64_t gathers = countGathers(result.module);
  for (const auto& graph : allGraphs(result.module)) torch::jit::EliminateDeadCode(graph);
  int64_t gathersAfterDce = countGathers(result.module);
  std::cout << who << "fsdp::all_gather nodes: " << gathers << " (after TorchScript DCE: " << gathersAfterDce << ")\n";
  if (gathers == 0 || gathers != gathersAfterDce) {
    std::cerr << "error: expected fsdp::all_gather nodes, all surviving dead-code elimination\n";
    return 1;
  }

  // 4. This rank's shards, in process (a serving binary may instead load fsdp-opt's rank files).
  if (worldSize > 1) fsdp_opt::shardForRank(result, options, rank);

  // 5. Run both and compare bit for bit.
  fsdp_opt::runtime::resetStats();
  c10::IValue expected = original.get_method(args.method)(inputs);
  c10::IValue got = result.module.get_method(args.method)(inputs);
  fsdp_opt::runtime::Stats stats = fsdp_opt::runtime::stats();
  std::cout << who << args.method << ": " << stats.all_gathers << " collective(s) for " << stats.gather_calls
            << " gather call(s), world size " << worldSize << "\n";
  if (auto difference = fsdp_opt::bitwiseDifference(got, expected)) {
    std::cout << who << args.method << ": MISMATCH with the original model: " << *difference
              << "\n";
    return 1;
  }
  std::cout << who << args.method << ": output matches the original bit for bit\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::cerr << "error: " << message.substr(0, message.find('\n')) << "\n";
    return 1;
  }
}
