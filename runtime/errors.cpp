#include "errors.h"

#include <utility>

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

ErrorKind errorKindOf(const std::exception& e) { return detail::kindOr(e, ErrorKind::kNone); }

OpError lastOpError() { return detail::lastOpErrorSlot(); }

}  // namespace runtime
}  // namespace fsdp_opt
