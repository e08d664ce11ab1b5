// Internal: the text of exceptions the runtime passes on.
#pragma once

#include <exception>
#include <string>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// The text of an exception, without c10's backtrace.
std::string describeException(const std::exception& e);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
