#include "environment.h"
#include "errors.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int64_t envInt(const char* name, int64_t lo, int64_t hi) {
  const char* value = envValue(name);
  const std::string shown = value != nullptr ? value : "";
  errno = 0;
  char* end = nullptr;
  const long long v = value != nullptr ? std::strtoll(value, &end, 10) : 0;
  FSDP_CHECK(value != nullptr && errno == 0 && end != value && *end == '\0' && v >= lo && v <= hi,
             ErrorKind::kBadInput, "fsdp: environment variable ", name, "='", shown,
             "' is not an integer in [", lo, ", ", hi, "]");
  return v;
}

bool envSwitch(const char* name) {
  const char* v = envValue(name);
  return v != nullptr && std::string(v) != "0";
}

std::vector<std::string> envList(const char* name) {
  std::vector<std::string> out;
  const char* v = envValue(name);
  if (v == nullptr) return out;
  std::istringstream is(v);
  for (std::string item; std::getline(is, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
