// Options of the fsdp-opt pipeline, shared by the CLI, the C++ API and the Python bindings.
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
  std::vector<ForwardMethodSpec> forwardMethodSpecs;  // --forward-method
  int64_t worldSize = 1;                              // --world-size
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

// "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32": the dtype; false otherwise.
bool parseParamDtype(const std::string& text, c10::ScalarType& dtype);

// "512MiB", "1GiB", "64KB", "1000": bytes. Binary (KiB, MiB, GiB) and decimal (KB, MB, GB)
// suffixes; returns false on anything else.
bool parseByteSize(const std::string& text, int64_t& bytes);

// Parses "PATTERN:METHOD" (split at the last ':'); returns false on a malformed spec.
bool parseForwardMethodSpec(const std::string& text, ForwardMethodSpec& out);

}  // namespace fsdp_opt
