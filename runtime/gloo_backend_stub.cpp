// Stand-in for gloo_backend.cpp in builds without the gloo backend (FSDP_OPT_BUILD_GLOO=OFF, as
// test/gpu/standalone builds for scripts/gpu-check.sh, or no gloo headers found with
// FSDP_OPT_REQUIRE_GLOO=OFF): CPU tensors then work at world size 1 only, and a CPU gather with
// W > 1 fails with this error.
#include "collective_backend.h"
#include "envelope.h"
#include "errors.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {

// Collective fingerprints then go through the store (envelope.h).
bool detail::glooBuilt() { return false; }

std::unique_ptr<CollectiveBackend> createGlooBackend(const BackendRendezvous& group, const c10::Device&,
                                                     const std::string& context) {
  FSDP_CHECK(group.store, ErrorKind::kInternal, context, ": no rendezvous store for world size ",
             group.world);
  detail::raise(ErrorKind::kBadInput,
                c10::str(context,
                         ": creating the gloo backend failed: this libfsdp_runtime was built "
                         "without gloo (FSDP_OPT_BUILD_GLOO=OFF, or no gloo headers with "
                         "FSDP_OPT_REQUIRE_GLOO=OFF): CPU tensors work at world size 1 only"));
}

}  // namespace runtime
}  // namespace fsdp_opt
