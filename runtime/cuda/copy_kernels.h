// Launches of the runtime's copy kernel (copy_kernel_body.h) on a CUDA stream. Torch-free: this
// and copy_kernels.cu are the only code nvcc compiles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../copy_kernel_body.h"

namespace fsdp_opt {
namespace cuda_kernels {

/// Plans with at most this many segments travel in the launch's parameters; longer ones need
/// their segments in device memory.
constexpr int kMaxInlineSegments = 64;

/// Enqueues ONE launch of the copy kernel for `numBlocks` blocks of the `n` segments on
/// `stream`. `deviceSegments` is null when n <= kMaxInlineSegments (the segments are then read
/// from `hostSegments` and passed by value), else a device copy of them that stays valid until
/// the kernel has run. Returns the launch error (cudaSuccess when numBlocks == 0).
cudaError_t launchCopyPlan(const copyplan::Segment* hostSegments,
                           const copyplan::Segment* deviceSegments, int n, int64_t numBlocks,
                           cudaStream_t stream);

}  // namespace cuda_kernels
}  // namespace fsdp_opt
