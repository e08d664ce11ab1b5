// Options of the fsdp-opt pipeline, shared by the CLI, the C++ API and the Python bindings.
//
// Every front end parses them through applyOption, with the names the command line uses
// (`--fsdp-unit`, `--max-unsharded-bytes`, ...): the accepted values and the error texts are
// the same whether a flag comes from fsdp-opt's argv, from Python keywords or from a C++ program;
// only the option's name in an error is spelled as the caller knows it (`--bucket-bytes` or
// `bucket_bytes`).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fsdp_opt {

struct ForwardMethodSpec {
  std::string pattern;  // module-path pattern
  std::string method;
};

struct PipelineOptions {
  std::vector<std::string> unitPatterns;             // --fsdp-unit
  // --fsdp-unit-type: every instance of a module class is a unit (FSDP1's ModuleWrapPolicy, the
  // `for layer in model.layers: fully_shard(layer)` habit), by TorchScript qualified name or its
  // last component.
  std::vector<std::string> unitTypes;
  // --fsdp-min-unit-params: FSDP1's size_based_auto_wrap_policy. Post-order, a module becomes a
  // unit when the parameter elements below it that no nested unit holds reach this number; the
  // root then becomes one too, as FSDP1's outermost wrapper.
  std::optional<int64_t> minUnitParams;
  std::vector<ForwardMethodSpec> forwardMethodSpecs;  // --forward-method
  int64_t worldSize = 1;                              // --world-size
  // --shard-group-size (HSDP): every unit is sharded over S consecutive ranks and replicated
  // over the W / S groups. Unset: S = W.
  std::optional<int64_t> shardGroupSize;
  int64_t shardGroup() const { return shardGroupSize.value_or(worldSize); }
  // Whether the rank files are hybrid-sharded (S < W).
  bool hybrid() const { return shardGroup() != worldSize; }
  bool verifyEach = false;                            // --verify-each
  std::set<std::string> printIrAfter;                 // --print-ir-after
  bool printIrAfterAll = false;                       // --print-ir-after-all
  // --max-unsharded-bytes: bound on the statically computed peak of unsharded parameter bytes
  // that scheduling passes may reach (hoisting, prefetch). Unset: no bound.
  std::optional<int64_t> maxUnshardedBytes;
  // --bucket-bytes: adjacent gathers merge into one collective up to this size (0: off). The
  // default follows DDP's 25 MiB buckets: large enough to amortise a collective's fixed cost
  // over small units, small enough never to merge two transformer layers of a real model.
  int64_t bucketBytes = 25LL << 20;
  // --param-dtype: gather (and compute with) unit parameters in this dtype; shards keep theirs.
  std::optional<c10::ScalarType> paramDtype;
};

// One option that takes a value, as the command line spells it without the leading dashes.
struct OptionInfo {
  const char* name;     // "fsdp-unit"
  const char* keyword;  // the Python keyword of transform()/shard(): "units"
  const char* metavar;  // "PATTERN"
  const char* help;     // one line for --help
  bool repeatable;
};

// The options applyOption accepts, in the order --help lists them.
const std::vector<OptionInfo>& pipelineOptions();

// How an error names the option: as a flag ("--world-size") or as a Python keyword
// ("world_size").
enum class OptionSpelling { kFlag, kKeyword };

// Sets option `name` (one of pipelineOptions(), without dashes) from its text; a repeatable
// option appends. Returns "" or one line naming the option and the value ("--world-size must be
// at least 1, got 0").
std::string applyOption(PipelineOptions& options, const std::string& name, const std::string& value,
                        OptionSpelling spelling = OptionSpelling::kFlag);

// Items spelled "--name=value", applied in order, then checked together (checkOptions).
// Returns "" or the first error.
std::string applyOptions(PipelineOptions& options, const std::vector<std::string>& items,
                         OptionSpelling spelling = OptionSpelling::kFlag);

// What no single option can check: "" or one line ("--shard-group-size=3 does not divide
// --world-size=4").
std::string checkOptions(const PipelineOptions& options, OptionSpelling spelling = OptionSpelling::kFlag);

// "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32": the dtype; false otherwise.
bool parseParamDtype(const std::string& text, c10::ScalarType& dtype);

// "512MiB", "1GiB", "64KB", "1000": bytes. Binary (KiB, MiB, GiB) and decimal (KB, MB, GB)
// suffixes; returns false on anything else.
bool parseByteSize(const std::string& text, int64_t& bytes);

// Parses "PATTERN:METHOD" (split at the last ':'); returns false on a malformed spec.
bool parseForwardMethodSpec(const std::string& text, ForwardMethodSpec& out);

}  // namespace fsdp_opt
