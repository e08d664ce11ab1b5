// Stand-in for gloo_backend.cpp in builds without gloo headers (FSDP_OPT_REQUIRE_GLOO=OFF, used
// by scripts/gpu-check.sh on GPU machines whose torch wheel ships none): CPU tensors then work at
// world size 1 only, and a CPU gather with W > 1 fails with this error.
#include "collective_backend.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {

std::unique_ptr<CollectiveBackend> makeGlooBackend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                   int, const GlooBackendOptions&) {
  TORCH_CHECK(false, "this libfsdp_runtime was built without gloo (no gloo headers were found; "
              "FSDP_OPT_REQUIRE_GLOO=OFF): CPU tensors work at world size 1 only");
}

}  // namespace runtime
}  // namespace fsdp_opt
