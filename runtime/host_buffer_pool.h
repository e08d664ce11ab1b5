// Internal: reusable host (CPU) buffers for the unshard path's transient allocations (the pack
// and receive buffers of a Gloo all-gather, and the full parameters themselves).
//
// Why: every gather of a unit allocates the same few multi-MiB buffers and every reshard frees
// them. glibc's malloc serves the first large allocation with mmap, raises its mmap threshold when
// that chunk is freed, and from then on serves buffers of that size from the heap, where
// allocations of other lifetimes (activations) split the freed space. Measured on the 4-layer GPT
// of bench/ with one gather per layer per token, each process's RSS then grew by about 60 MiB per
// `generate` call without bound, although the unsharded bytes alive at any time stayed at one
// layer. Handing every buffer back to mmap instead keeps RSS flat but pays page faults and zeroing
// on every gather (generate 1.6x slower in the same measurement). Reusing freed buffers of the same
// size avoids both: a unit is gathered again and again with the same sizes, so nearly every
// request is served from the pool.
//
// Bound: the pool's cached bytes stay within the largest number of pool bytes ever alive at once,
// so it never holds more than the schedule already needed at its peak (which the compiler bounds
// with --max-unsharded-bytes); a freed buffer that does not fit evicts cached sizes that stopped
// being asked for (see give() in host_buffer_pool.cpp). fsdp::release_all empties it, and
// FSDP_OPT_HOST_BUFFER_CACHE=0 turns caching off (every buffer goes back to malloc when freed).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// An uninitialised contiguous CPU tensor whose storage comes from the pool and goes back to it
/// when the last reference to the storage dies (from any thread).
at::Tensor pooledEmptyCpu(c10::IntArrayRef sizes, at::ScalarType dtype);
/// The same with `strides`, a dense layout of `sizes` (a permutation of the contiguous one, as a
/// channels_last tensor's); empty strides: contiguous.
at::Tensor pooledEmptyCpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype);

struct HostBufferPoolStats {
  int64_t cachedBytes = 0;     // bytes of freed buffers held for reuse
  int64_t liveBytes = 0;       // bytes of pool buffers in use
  int64_t peakLiveBytes = 0;   // the cache's bound: max of liveBytes since the last emptying
  int64_t hits = 0;            // requests served from the cache
  int64_t misses = 0;          // requests that allocated
  int64_t evictions = 0;       // cached buffers freed to make room for one of a size still in use
};

HostBufferPoolStats hostBufferPoolStats();

/// Frees every cached buffer and restarts the bound from the bytes alive now.
void emptyHostBufferPool();

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
