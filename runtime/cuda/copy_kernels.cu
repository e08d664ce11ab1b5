// The runtime's copy kernel: one launch moves a whole copy plan (a unit's copy-in, with the
// param_dtype cast, or its copy-out). Each thread block finds its segment and does one
// block-sized piece of it (copy_kernel_body.h, shared with the host reference).
#include "copy_kernels.h"

#include <algorithm>

namespace fsdp_opt {
namespace cuda_kernels {
namespace {

using copyplan::Segment;

struct InlineSegments {
  Segment segs[kMaxInlineSegments];
};

// A grid stride over blocks keeps the grid within limits for any plan size.
constexpr int64_t kMaxGrid = 65535LL * 32;

__global__ void __launch_bounds__(copyplan::kThreadsPerBlock)
    copyInline(const __grid_constant__ InlineSegments segs, int n, int64_t numBlocks) {
  for (int64_t b = blockIdx.x; b < numBlocks; b += gridDim.x) {
    copyplan::runBlock(segs.segs, n, b, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  }
}

__global__ void __launch_bounds__(copyplan::kThreadsPerBlock)
    copyGlobal(const Segment* __restrict__ segs, int n, int64_t numBlocks) {
  for (int64_t b = blockIdx.x; b < numBlocks; b += gridDim.x) {
    copyplan::runBlock(segs, n, b, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  }
}

}  // namespace

cudaError_t launchCopyPlan(const Segment* hostSegments, const Segment* deviceSegments, int n,
                           int64_t numBlocks, cudaStream_t stream) {
  if (numBlocks <= 0 || n <= 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(std::min(numBlocks, kMaxGrid));
  if (deviceSegments == nullptr) {
    if (n > kMaxInlineSegments) return cudaErrorInvalidValue;
    InlineSegments p;
    for (int i = 0; i < n; ++i) p.segs[i] = hostSegments[i];
    copyInline<<<grid, copyplan::kThreadsPerBlock, 0, stream>>>(p, n, numBlocks);
  } else {
    copyGlobal<<<grid, copyplan::kThreadsPerBlock, 0, stream>>>(deviceSegments, n, numBlocks);
  }
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace fsdp_opt
