#include <fsdp_opt/passes/diagnostics.h>

namespace fsdp_opt {

void DiagnosticSink::remark(const std::string& origin, const std::string& message) {
  diagnostics_.push_back({Severity::Remark, origin, message});
}

void DiagnosticSink::warning(const std::string& origin, const std::string& message) {
  diagnostics_.push_back({Severity::Warning, origin, message});
}

void DiagnosticSink::error(const std::string& origin, const std::string& message) {
  diagnostics_.push_back({Severity::Error, origin, message});
  ++errorCount_;
}

void DiagnosticSink::errorWhenSharded(const std::string& origin, const std::string& message, bool sharded) {
  if (sharded) {
    error(origin, message);
  } else {
    warning(origin, message + " (harmless at --world-size=1, where nothing is sharded)");
  }
}

std::string formatDiagnostic(const Diagnostic& d) {
  switch (d.severity) {
    case Severity::Error:
      return "error: " + d.message;
    case Severity::Warning:
      return "warning: " + d.message;
    case Severity::Remark:
      return "remark: [" + d.origin + "] " + d.message;
  }
  return d.message;
}

}  // namespace fsdp_opt
