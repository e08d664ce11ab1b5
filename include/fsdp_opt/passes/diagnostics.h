// Diagnostics returned by analyses and passes. Library code never prints: the driver (fsdp-opt,
// the Python bindings, a user's pipeline) decides how to show them.
#pragma once

#include <string>
#include <vector>

namespace fsdp_opt {

enum class Severity { Remark, Warning, Error };

struct Diagnostic {
  Severity severity;
  std::string origin;   // pass or analysis that produced it
  std::string message;  // names the module path, method and cause
};

class DiagnosticSink {
 public:
  void remark(const std::string& origin, const std::string& message);
  void warning(const std::string& origin, const std::string& message);
  void error(const std::string& origin, const std::string& message);
  // What goes wrong only once parameters are sharded: an error when `sharded`, otherwise (world
  // size 1) a warning that says so.
  void errorWhenSharded(const std::string& origin, const std::string& message, bool sharded);

  bool hasErrors() const { return errorCount_ > 0; }
  const std::vector<Diagnostic>& all() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
  int errorCount_ = 0;
};

// "error: ...", "warning: ...", "remark: [pass] ..." as fsdp-opt prints them.
std::string formatDiagnostic(const Diagnostic& d);

}  // namespace fsdp_opt
