// The pipeline as TorchScript operators (`torch.ops.fsdp_opt.*`), so Python can run it in-process
// on a ScriptModule (passed as its `_c` object) after torch.ops.load_library(libfsdp_passes.so).
// The python/ package wraps these; C++ programs use include/fsdp_opt/fsdp_opt.h instead.
#include <fsdp_opt/fsdp_opt.h>

#include <fsdp_opt/format.h>
#include <fsdp_opt/runtime/runtime.h>

#include <ATen/core/Dict.h>
#include <torch/library.h>

namespace fsdp_opt {
namespace {

// Python passes its keywords as "--name=value" items, parsed as the command line's flags are;
// an error names the keyword. python/ checks them first with check_options, to raise ValueError.
PipelineOptions optionsFrom(const std::vector<std::string>& items) {
  PipelineOptions options;
  std::string error = applyOptions(options, items, OptionSpelling::kKeyword);
  TORCH_CHECK(error.empty(), error);
  return options;
}

std::string checkOptionsOp(std::vector<std::string> items) {
  PipelineOptions options;
  return applyOptions(options, items, OptionSpelling::kKeyword);
}

torch::jit::Module moduleFrom(const c10::IValue& value) {
  TORCH_CHECK(value.isObject() && value.toObjectRef().type()->is_module(),
              "expected a ScriptModule (pass `module._c`)");
  return torch::jit::Module(value.toObject());
}

// A diagnostic as Python receives it: (severity, message, the line fsdp-opt prints).
using DiagnosticTuple = std::tuple<std::string, std::string, std::string>;
// A statistic: (name, value), what --stats prints as "name: value".
using StatisticTuple = std::tuple<std::string, std::string>;

// Errors become one exception naming every error; the rest comes back as they are.
std::vector<DiagnosticTuple> checkedDiagnostics(const TransformResult& result) {
  std::vector<DiagnosticTuple> out;
  std::string errors;
  for (const auto& d : result.diagnostics) {
    if (d.severity == Severity::Error) {
      errors += (errors.empty() ? "" : "; ") + d.message;
    } else {
      out.emplace_back(d.severity == Severity::Warning ? "warning" : "remark", d.message, formatDiagnostic(d));
    }
  }
  TORCH_CHECK(result.ok && errors.empty(), "fsdp-opt: ", errors.empty() ? "pipeline failed" : errors);
  return out;
}

std::vector<StatisticTuple> statisticsOf(const TransformResult& result) {
  std::vector<StatisticTuple> out;
  for (const auto& [name, value] : result.statistics) out.emplace_back(name, value);
  return out;
}

std::tuple<c10::IValue, std::vector<DiagnosticTuple>, std::vector<StatisticTuple>> transformOp(
    c10::IValue module, std::vector<std::string> optionItems, int64_t rank, std::vector<std::string> passes,
    bool syncModuleStates) {
  PipelineOptions options = optionsFrom(optionItems);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<DiagnosticTuple> diagnostics = checkedDiagnostics(result);
  if (rank >= 0) {
    shardForRank(result, options, rank, syncModuleStates ? ModuleStates::kSyncFromRank0 : ModuleStates::kCheck);
  }
  return {result.module._ivalue(), diagnostics, statisticsOf(result)};
}

std::tuple<std::vector<DiagnosticTuple>, std::vector<StatisticTuple>> saveOp(
    c10::IValue module, std::vector<std::string> optionItems, std::string output, std::vector<std::string> passes,
    c10::Dict<std::string, std::string> extraFiles) {
  PipelineOptions options = optionsFrom(optionItems);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<DiagnosticTuple> diagnostics = checkedDiagnostics(result);
  ModuleSource source;
  for (const auto& item : extraFiles) source.extraFiles.emplace(item.key(), item.value());
  writeOutput(result, options, output, source);
  return {diagnostics, statisticsOf(result)};
}

std::vector<std::string> listPassesOp() {
  registerAllPasses();
  std::vector<std::string> lines;
  for (const PassInfo* pass : PassRegistry::global().list()) lines.push_back(pass->name + ": " + pass->summary);
  return lines;
}

std::vector<std::string> defaultPipelineOp() { return defaultPipeline(); }

// The names of format.h Python needs, so that it spells none of them itself.
c10::Dict<std::string, std::string> formatNamesOp() {
  c10::Dict<std::string, std::string> names;
  names.insert("manifest_file", kManifestFile);
  names.insert("rank_attr", kRankAttr);
  names.insert("world_size_attr", kWorldSizeAttr);
  names.insert("manifest_sha256_attr", kManifestHashAttr);
  names.insert("shard_group_size_attr", kShardGroupSizeAttr);
  names.insert("unit_path_attr", kUnitPathAttr);
  return names;
}

std::string rankFileNameOp(int64_t rank) { return rankFileName(rank); }

// Shard `shard` of a parameter of `rows` rows over `shards`: (rows per shard, first row, rows of
// real data).
std::tuple<int64_t, int64_t, int64_t> shardRowsOp(int64_t rows, int64_t shards, int64_t shard) {
  TORCH_CHECK(rows >= 0 && shards > 0 && shard >= 0 && shard < shards, "shard_rows: bad arguments rows=", rows,
              " shards=", shards, " shard=", shard);
  return {shardRows(rows, shards), shardRowBegin(rows, shards, shard), shardValidRows(rows, shards, shard)};
}

std::string oneLineMessageOp(std::string text) { return runtime::oneLineMessage(text); }

void loadPluginOp(std::string path) {
  std::string error = loadPassPlugin(path);
  TORCH_CHECK(error.empty(), error);
}

}  // namespace

TORCH_LIBRARY(fsdp_opt, m) {
  // `options`: "--name=value" items, the flags of fsdp-opt (include/fsdp_opt/passes/options.h).
  // Both return the diagnostics (warnings, remarks) as (severity, message, line) and the
  // statistics as (name, value).
  // sync_module_states: rank 0's values where the ranks' modules differ (shardForRank).
  m.def("transform(Any module, str[] options, int rank, str[] passes, bool sync_module_states=False) "
        "-> (Any, (str, str, str)[], (str, str)[])",
        transformOp);
  // extra_files: written into every file as torch.jit.save's `_extra_files` are.
  m.def("save(Any module, str[] options, str output, str[] passes, Dict(str, str) extra_files) "
        "-> ((str, str, str)[], (str, str)[])",
        saveOp);
  // "" or the first error of those items, naming the option by its Python keyword.
  m.def("check_options(str[] options) -> str", checkOptionsOp);
  m.def("list_passes() -> str[]", listPassesOp);
  m.def("default_pipeline() -> str[]", defaultPipelineOp);
  m.def("load_plugin(str path) -> ()", loadPluginOp);
  // The on-disk format's names (include/fsdp_opt/format.h).
  m.def("format_names() -> Dict(str, str)", formatNamesOp);
  m.def("rank_file_name(int rank) -> str", rankFileNameOp);
  m.def("shard_rows(int rows, int shards, int shard) -> (int rows_per_shard, int begin, int valid)", shardRowsOp);
  // An error's one line, as the tools print it (fsdp_opt::runtime::oneLineMessage).
  m.def("one_line_message(str text) -> str", oneLineMessageOp);
}

}  // namespace fsdp_opt
