#include "fsdp_opt/runtime/runtime.h"

#ifndef FSDP_OPT_VERSION
#define FSDP_OPT_VERSION "unknown"
#endif

namespace fsdp_opt {
namespace runtime {

const char* version() { return FSDP_OPT_VERSION; }

}  // namespace runtime
}  // namespace fsdp_opt
