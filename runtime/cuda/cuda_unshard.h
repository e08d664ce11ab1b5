// Internal: the CUDA unshard path (built with FSDP_OPT_ENABLE_CUDA). See docs/runtime.md, "CUDA".
//
// Stream/event protocol of one unshard (all_gather, or all_gather_start ... all_gather_wait):
//   start:  an event recorded on the caller's current stream is waited for by the runtime's
//           gather stream (the shards may have just been written there); on the gather stream:
//           allocate the full buffers (caching allocator), copy-in kernel (pack + cast), NCCL
//           all-gather, copy-out kernel; record the `done` event. The host never waits.
//   finish: the caller's current stream waits for `done`; every full buffer is recorded on that
//           stream (recordStream), so the caching allocator reuses its memory only after the
//           work queued there until the reshard frees it.
// World size 1 takes a copy-only path: no NCCL, and no work at all unless a param_dtype cast is
// asked for (one cast-copy launch for the unit).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include "../copy_plan.h"
#include "../unshard.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace cuda {

/// The unshard path for CUDA tensors (unshard.h).
std::unique_ptr<PendingUnshard> startCudaUnshard(const UnshardRequest& request,
                                                 const std::string& context);

/// The runtime's gather stream on `device`: created once per device, with the highest
/// priority the device offers, and never destroyed.
c10::cuda::CUDAStream gatherStream(c10::DeviceIndex device);

/// The copy kernel's element type for `dtype`; false when the kernel does not convert it
/// (a cast to or from such a dtype is done by at::Tensor::to instead).
bool elemTypeOf(at::ScalarType dtype, copyplan::ElemType& out);

/// Enqueues ONE launch of the copy kernel for `plan` on `stream` (uploading the segments first
/// when there are more than fit in the launch's parameters). Throws on a launch error.
void launchPlan(const copyplan::CopyPlan& plan, const c10::cuda::CUDAStream& stream);

/// Copy-in of one rank into `send` (uint8, layout.packedBytes()), on the current stream:
/// `shards[i]` (contiguous, on the device) cast to dtypes[i]. Exposed for the GPU tests and
/// the benchmark.
void copyIn(const layout::PackLayout& layout, const std::vector<at::Tensor>& shards,
            const std::vector<at::ScalarType>& dtypes, const at::Tensor& send);
/// Copy-out from `gathered` (uint8, layout.gatheredBytes()) into `fulls` (contiguous), on the
/// current stream.
void copyOut(const layout::PackLayout& layout, const at::Tensor& gathered,
             const std::vector<at::Tensor>& fulls);

}  // namespace cuda
}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
