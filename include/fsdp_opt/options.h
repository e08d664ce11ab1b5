// Options of the fsdp-opt pipeline, shared by the CLI, the C++ API and the Python bindings.
#pragma once

#include <cstdint>
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
};

// Parses "PATTERN:METHOD" (split at the last ':'); returns false on a malformed spec.
bool parseForwardMethodSpec(const std::string& text, ForwardMethodSpec& out);

}  // namespace fsdp_opt
