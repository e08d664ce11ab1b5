// C++ API of libfsdp_runtime. The same functionality is exposed as TorchScript ops in the
// `fsdp` namespace (docs/design.md, docs/runtime.md); loading or linking the library registers
// them. This header is torch-free so tools can include it cheaply.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_opt {
namespace runtime {

/// Counters of the runtime (process-wide). See docs/runtime.md for exact definitions.
struct Stats {
  int64_t all_gathers = 0;           // unit unshards issued (one coalesced collective each)
  int64_t gather_calls = 0;          // fsdp::all_gather + all_gather_start invocations
  int64_t bytes_gathered = 0;        // bytes of full parameters gathered (in their gathered dtype)
  int64_t unsharded_bytes = 0;       // bytes of parameters unsharded right now
  int64_t peak_unsharded_bytes = 0;  // max of unsharded_bytes since the last reset
  int64_t reshards = 0;              // unit reshards that released full storage
  int64_t reshard_calls = 0;         // fsdp::reshard invocations
  int64_t release_all_calls = 0;     // fsdp::release_all invocations
  int64_t wait_calls = 0;            // fsdp::all_gather_wait invocations
  int64_t in_flight = 0;             // gathers started by all_gather_start, not waited yet
  int64_t in_flight_peak = 0;        // max of in_flight since the last reset
  int64_t agreements = 0;            // fsdp::rank_any calls (rank-uniform loops)
  // Readings of the CPU gather buffer pool when the snapshot is taken (state, not counts):
  int64_t host_buffer_cached_bytes = 0;  // freed buffers kept for reuse
  int64_t host_buffer_cache_limit = 0;   // the most it may keep: max pool bytes alive at once

  /// (name, value) pairs in a fixed order; the names are the keys of fsdp::stats().
  std::vector<std::pair<std::string, int64_t>> items() const;
};

/// A snapshot of the counters.
Stats stats();
/// Zeroes the counters; unsharded_bytes and in_flight keep their current values (they are
/// state, not counts) and their peaks restart from them.
void resetStats();

/// Explicitly initialises the process group (instead of torchrun's environment variables).
/// With worldSize > 1, rank 0 hosts a c10d TCPStore on masterAddr:masterPort. A timeout of
/// zero means "FSDP_OPT_TIMEOUT_S or its default". Calling it again with the same arguments is
/// a no-op; with different ones it is an error until destroyProcessGroup().
void initProcessGroup(int rank, int worldSize, const std::string& masterAddr = "127.0.0.1",
                      int masterPort = 0,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
/// Tears the process group down (backends, store). Gathered parameters stay gathered.
void destroyProcessGroup();
/// True once the process group exists (explicitly or lazily from the environment).
bool isProcessGroupInitialized();
/// Rank / world size of the process group, initialising it from the environment if needed.
int rank();
int worldSize();

/// Waits for and drops every gather started by all_gather_start and not waited yet, then
/// reshards every gathered parameter and resets every count (what fsdp::release_all does).
void releaseAll();

/// Timeout of collectives and rendezvous: FSDP_OPT_TIMEOUT_S seconds (default 300).
std::chrono::milliseconds defaultTimeout();

/// Version string of the runtime library (the project version).
const char* version();

/// True when this build has the CUDA/NCCL backend (built with FSDP_OPT_ENABLE_CUDA).
bool hasCudaBackend();

}  // namespace runtime
}  // namespace fsdp_opt
