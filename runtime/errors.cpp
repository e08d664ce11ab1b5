#include "errors.h"

#include <sstream>
#include <utility>
#include <vector>

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

struct KindName {
  ErrorKind kind;
  const char* name;
};

constexpr KindName kKindNames[] = {
    {ErrorKind::kNone, "none"},         {ErrorKind::kBadInput, "bad-input"},
    {ErrorKind::kMismatch, "mismatch"}, {ErrorKind::kDivergence, "divergence"},
    {ErrorKind::kPeerLost, "peer-lost"},
    {ErrorKind::kTimeout, "timeout"},   {ErrorKind::kPeerFailed, "peer-failed"},
    {ErrorKind::kBackend, "backend"},   {ErrorKind::kInternal, "internal"},
    {ErrorKind::kModel, "model"},
};

OpError& lastOpErrorSlot() {
  thread_local OpError slot;
  return slot;
}

}  // namespace

KindedError::KindedError(ErrorKind kind, const std::string& message)
    : c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message),
      kind_(kind) {}

void raise(ErrorKind kind, const std::string& message) { throw KindedError(kind, message); }

ErrorKind kindOr(const std::exception& e, ErrorKind fallback) {
  if (const auto* k = dynamic_cast<const KindedError*>(&e)) return k->kind();
  return fallback;
}

ErrorKind waitFailureKind(std::chrono::steady_clock::time_point since,
                          std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() - since >= timeout ? ErrorKind::kTimeout
                                                             : ErrorKind::kPeerLost;
}

std::string describeException(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

void clearLastOpError() { lastOpErrorSlot() = OpError(); }

void setLastOpError(ErrorKind kind, const std::string& message) {
  lastOpErrorSlot() = OpError{kind, message};
}

}  // namespace detail

const char* errorKindName(ErrorKind kind) {
  for (const auto& entry : detail::kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "internal";
}

bool parseErrorKind(const std::string& name, ErrorKind* kind) {
  for (const auto& entry : detail::kKindNames) {
    if (name == entry.name) {
      *kind = entry.kind;
      return true;
    }
  }
  return false;
}

bool isConsequenceOfPeer(ErrorKind kind) {
  return kind == ErrorKind::kPeerLost || kind == ErrorKind::kTimeout ||
         kind == ErrorKind::kPeerFailed;
}

namespace {

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string oneLineMessage(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Exception raised from", 0) == 0 || line.rfind("frame #", 0) == 0) break;  // c10's backtrace
    lines.push_back(trimmed(line));
  }
  // The interpreter ends its traceback with the cause: "RuntimeError: <message>".
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const auto colon = it->find(": ");
    if (colon == std::string::npos || colon == 0) continue;
    const std::string head = it->substr(0, colon);
    if (head.find(' ') == std::string::npos && (endsWith(head, "Error") || endsWith(head, "Exception"))) {
      return trimmed(it->substr(colon + 2));
    }
  }
  for (const std::string& line : lines) {
    if (!line.empty()) return line;
  }
  return "unknown error";
}

std::string oneLineMessage(const std::exception& error) { return oneLineMessage(detail::describeException(error)); }

ErrorKind errorKindOf(const std::exception& e) { return detail::kindOr(e, ErrorKind::kNone); }

OpError lastOpError() { return detail::lastOpErrorSlot(); }

}  // namespace runtime
}  // namespace fsdp_opt
