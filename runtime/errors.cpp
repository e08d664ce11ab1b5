#include "errors.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

std::string describeException(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
