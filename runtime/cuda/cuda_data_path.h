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
//
// The NCCL path (world size > 1, or FSDP_OPT_CUDA_FORCE_NCCL=1) has two layouts, chosen by
// FSDP_OPT_CUDA_GATHER_LAYOUT (read once): `packed` (the default; the above) and `per-param`:
// each full buffer has W * shardRows rows, the full parameter is a view of its first fullRows
// rows, and start enqueues, on the gather stream, ONE copy-in launch for the shards that need a
// cast (into this rank's slot of their own buffer) plus a strided copy per non-contiguous shard,
// then one ncclAllGather per parameter inside ncclGroupStart/End (in place where copied in,
// else straight from the shard), then `done`. No send or receive buffer and no copy-out; the
// same events, recordStream calls and buffer lifetime as the packed layout.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include "../copy_plan.h"
#include "../data_path.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace cuda {

/// The NCCL path's gather layout (docs/runtime.md, "Gather layouts").
enum class GatherLayout { kPacked = 0, kPerParam = 1 };

/// The layout gathers started from now on use: the one setGatherLayout() chose, else
/// FSDP_OPT_CUDA_GATHER_LAYOUT (packed | per-param; unset or empty: packed), read once. Throws
/// when that variable holds anything else.
GatherLayout gatherLayout();
/// Overrides FSDP_OPT_CUDA_GATHER_LAYOUT for this process (the GPU tests and the benchmark run
/// both layouts in one process). Gathers already started keep theirs.
void setGatherLayout(GatherLayout layout);
/// "packed" or "per-param" (the variable's values).
const char* gatherLayoutName(GatherLayout layout);

/// The unshard path for CUDA tensors (data_path.h).
std::unique_ptr<PendingUnshard> startCudaUnshard(const UnshardRequest& request,
                                                 const std::string& context);

/// The runtime's gather stream on `device`: created once per device, with the highest
/// priority the device offers, and never destroyed.
c10::cuda::CUDAStream gatherStream(c10::DeviceIndex device);

/// The copy kernel's element type for `dtype`; false when the kernel does not convert it
/// (a cast to or from such a dtype is done by at::Tensor::to instead).
bool elemTypeOf(at::ScalarType dtype, copyplan::ElemType& out);

/// Enqueues ONE launch of the copy kernel for `plan` on `stream` (uploading the segments first
/// when there are more than fit in the launch's parameters). Throws on a launch error, naming
/// `what` ("the copy-in of fsdp::all_gather(unit 'U')"). With FSDP_OPT_CUDA_DEBUG_SYNC=1 it then
/// synchronises `stream` and throws, naming `what`, if the kernel (or anything before it on the
/// stream) failed.
void launchPlan(const copyplan::CopyPlan& plan, const c10::cuda::CUDAStream& stream,
                const std::string& what);

/// Copy-in of one rank into `send` (uint8, layout.packedBytes()), on the current stream:
/// `shards[i]` (contiguous, on the device) cast to dtypes[i]. `context` names the caller in
/// errors. Exposed for the GPU tests and the benchmark.
void copyIn(const layout::PackLayout& layout, const std::vector<at::Tensor>& shards,
            const std::vector<at::ScalarType>& dtypes, const at::Tensor& send,
            const std::string& context);
/// Copy-out from `gathered` (uint8, layout.gatheredBytes()) into `fulls` (contiguous), on the
/// current stream.
void copyOut(const layout::PackLayout& layout, const at::Tensor& gathered,
             const std::vector<at::Tensor>& fulls, const std::string& context);

}  // namespace cuda
}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
