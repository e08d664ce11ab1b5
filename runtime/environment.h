// Internal: reading the runtime's environment variables. One meaning of "set", one integer
// parser and one error text for every option, whichever part of the runtime owns the option
// (the process group, each backend, the host buffer pool).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// The variable's value, or nullptr when it is unset or empty.
const char* envValue(const char* name);

/// The variable, which must be set, as an integer in [lo, hi]; throws
/// "fsdp: environment variable NAME='V' is not an integer in [LO, HI]" otherwise.
int64_t envInt(const char* name, int64_t lo, int64_t hi);

/// A switch: set, non-empty and not "0".
bool envSwitch(const char* name);

/// A comma-separated list (empty items dropped; unset: empty).
std::vector<std::string> envList(const char* name);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
