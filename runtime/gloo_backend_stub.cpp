// Stand-in for gloo_backend.cpp in builds without the gloo backend (FSDP_OPT_BUILD_GLOO=OFF, as
// test/gpu/standalone builds for scripts/gpu-check.sh, or no gloo headers found with
// FSDP_OPT_REQUIRE_GLOO=OFF): CPU tensors then work at world size 1 only, and a CPU gather with
// W > 1 fails with this error.
#include "collective_backend.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {

std::unique_ptr<CollectiveBackend> makeGlooBackend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                   int, const GlooBackendOptions&) {
  TORCH_CHECK(false, "this libfsdp_runtime was built without gloo (FSDP_OPT_BUILD_GLOO=OFF, or no "
              "gloo headers with FSDP_OPT_REQUIRE_GLOO=OFF): CPU tensors work at world size 1 only");
}

}  // namespace runtime
}  // namespace fsdp_opt
