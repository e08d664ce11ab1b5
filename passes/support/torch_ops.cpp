// The pipeline as TorchScript operators (`torch.ops.fsdp_opt.*`), so Python can run it in-process
// on a ScriptModule (passed as its `_c` object) after torch.ops.load_library(libfsdp_passes.so).
// The python/ package wraps these; C++ programs use include/fsdp_opt/fsdp_opt.h instead.
#include <fsdp_opt/fsdp_opt.h>

#include <torch/library.h>

namespace fsdp_opt {
namespace {

PipelineOptions optionsFrom(const std::vector<std::string>& units,
                            const std::vector<std::string>& forwardMethods, int64_t worldSize,
                            int64_t maxUnshardedBytes, int64_t bucketBytes,
                            const std::string& paramDtype) {
  PipelineOptions options;
  options.unitPatterns = units;
  for (const auto& text : forwardMethods) {
    ForwardMethodSpec spec;
    TORCH_CHECK(parseForwardMethodSpec(text, spec), "forward method '", text, "' is not PATTERN:METHOD");
    options.forwardMethodSpecs.push_back(spec);
  }
  TORCH_CHECK(worldSize >= 1, "world_size must be at least 1, got ", worldSize);
  options.worldSize = worldSize;
  if (maxUnshardedBytes >= 0) options.maxUnshardedBytes = maxUnshardedBytes;
  if (bucketBytes >= 0) options.bucketBytes = bucketBytes;
  if (!paramDtype.empty()) {
    c10::ScalarType dtype;
    TORCH_CHECK(parseParamDtype(paramDtype, dtype), "param_dtype must be bf16 or fp16, got '", paramDtype, "'");
    options.paramDtype = dtype;
  }
  return options;
}

torch::jit::Module moduleFrom(const c10::IValue& value) {
  TORCH_CHECK(value.isObject() && value.toObjectRef().type()->is_module(),
              "expected a ScriptModule (pass `module._c`)");
  return torch::jit::Module(value.toObject());
}

// Errors become one exception naming every error; the rest comes back as lines.
std::vector<std::string> checkedDiagnostics(const TransformResult& result) {
  std::vector<std::string> lines;
  std::string errors;
  for (const auto& d : result.diagnostics) {
    if (d.severity == Severity::Error) errors += (errors.empty() ? "" : "; ") + d.message;
    else lines.push_back(formatDiagnostic(d));
  }
  TORCH_CHECK(result.ok && errors.empty(), "fsdp-opt: ", errors.empty() ? "pipeline failed" : errors);
  return lines;
}

std::tuple<c10::IValue, std::vector<std::string>> transformOp(
    c10::IValue module, std::vector<std::string> units, std::vector<std::string> forwardMethods,
    int64_t worldSize, int64_t rank, std::vector<std::string> passes, int64_t maxUnshardedBytes,
    int64_t bucketBytes, std::string paramDtype) {
  PipelineOptions options =
      optionsFrom(units, forwardMethods, worldSize, maxUnshardedBytes, bucketBytes, paramDtype);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<std::string> lines = checkedDiagnostics(result);
  if (rank >= 0) shardForRank(result, options, rank);
  return {result.module._ivalue(), lines};
}

std::vector<std::string> saveOp(c10::IValue module, std::vector<std::string> units,
                                std::vector<std::string> forwardMethods, int64_t worldSize,
                                std::string output, std::vector<std::string> passes,
                                int64_t maxUnshardedBytes, int64_t bucketBytes,
                                std::string paramDtype) {
  PipelineOptions options =
      optionsFrom(units, forwardMethods, worldSize, maxUnshardedBytes, bucketBytes, paramDtype);
  TransformResult result = transform(moduleFrom(module), options, passes);
  std::vector<std::string> lines = checkedDiagnostics(result);
  writeOutput(result, options, output);
  return lines;
}

std::vector<std::string> listPassesOp() {
  registerAllPasses();
  std::vector<std::string> lines;
  for (const PassInfo* pass : PassRegistry::global().list()) lines.push_back(pass->name + ": " + pass->summary);
  return lines;
}

std::vector<std::string> defaultPipelineOp() { return defaultPipeline(); }

}  // namespace

TORCH_LIBRARY(fsdp_opt, m) {
  m.def("transform(Any module, str[] units, str[] forward_methods, int world_size, int rank, "
        "str[] passes, int max_unsharded_bytes, int bucket_bytes, str param_dtype=\"\") -> (Any, str[])",
        transformOp);
  m.def("save(Any module, str[] units, str[] forward_methods, int world_size, str output, "
        "str[] passes, int max_unsharded_bytes, int bucket_bytes, str param_dtype=\"\") -> str[]",
        saveOp);
  m.def("list_passes() -> str[]", listPassesOp);
  m.def("default_pipeline() -> str[]", defaultPipelineOp);
}

}  // namespace fsdp_opt
