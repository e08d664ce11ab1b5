// Internal: the runtime's errors. Every failure the runtime raises carries an ErrorKind
// (fsdp_opt/runtime/runtime.h): raise() throws a KindedError, a c10::Error whose text is exactly the
// message (so what callers and the TorchScript interpreter show is unchanged) and whose kind
// survives C++ rethrows. The interpreter turns an op's exception into a plain error, so the ops
// (ops.cpp) also record their failure for the thread, which lastOpError() returns.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

class KindedError : public c10::Error {
 public:
  KindedError(ErrorKind kind, const std::string& message);
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// Throws KindedError(kind, message).
[[noreturn]] void raise(ErrorKind kind, const std::string& message);

/// TORCH_CHECK with a kind: FSDP_CHECK(cond, ErrorKind::kBadInput, "text ", value, ...).
#define FSDP_CHECK(cond, kind, ...)                                        \
  do {                                                                     \
    if (C10_UNLIKELY(!(cond))) {                                           \
      ::fsdp_opt::runtime::detail::raise((kind), ::c10::str(__VA_ARGS__)); \
    }                                                                      \
  } while (0)

/// The kind of `e` when the runtime raised it, else `fallback`.
ErrorKind kindOr(const std::exception& e, ErrorKind fallback);

/// The kind of a wait that failed: kTimeout when it had run for the whole `timeout` since
/// `since`, else kPeerLost (a peer's closed connection fails a wait long before the timeout).
ErrorKind waitFailureKind(std::chrono::steady_clock::time_point since,
                          std::chrono::milliseconds timeout);

/// The text of an exception, without c10's backtrace.
std::string describeException(const std::exception& e);

/// What the ops record (ops.cpp): cleared when an op starts, set when it fails.
void clearLastOpError();
void setLastOpError(ErrorKind kind, const std::string& message);

/// Runs the body of an fsdp:: op: the interpreter rethrows an op's exception as a plain error,
/// so the op records its failure's kind and text for the thread (fsdp::last_error) before the
/// exception goes on. Every op runs under it but last_error and unit_call (ops.cpp).
template <typename Op>
auto recordedOp(Op&& op) -> decltype(op()) {
  clearLastOpError();
  try {
    return op();
  } catch (const std::exception& e) {
    setLastOpError(kindOr(e, ErrorKind::kInternal), describeException(e));
    throw;
  }
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
