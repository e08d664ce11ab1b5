// C++ API of libfsdp_runtime. The same functionality is exposed as TorchScript ops in the
// `fsdp` namespace (docs/design.md, docs/runtime.md); loading or linking the library registers
// them. This header is torch-free so tools can include it cheaply.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
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
  // Training (docs/design.md "Training"): gradients of unit parameters summed over the ranks,
  // and bytes of full gradients alive at once (from AccumulateGrad until reduced) and its peak.
  int64_t grad_reductions = 0;
  int64_t unsharded_grad_bytes = 0;
  int64_t peak_unsharded_grad_bytes = 0;
  // max of unsharded_bytes + unsharded_grad_bytes: what --max-unsharded-bytes bounds (SPEC 10)
  int64_t peak_unsharded_param_and_grad_bytes = 0;
  // Bytes this rank put into collectives (fingerprint envelopes included; an all-gather's or
  // all-to-all's whole send buffer), by the ranks they ran over: every rank, this rank's shard
  // group (HSDP's gathers and gradient reduce-scatter; at S = W the shard group is the world and
  // its collectives count as world ones), its replica group (HSDP's gradient average across
  // shard groups). docs/multi-node.md.
  int64_t bytes_sent_world = 0;
  int64_t bytes_sent_shard_group = 0;
  int64_t bytes_sent_replica_group = 0;
  // Rounds of the shared-memory CPU transport (FSDP_OPT_CPU_TRANSPORT=shm) this rank completed:
  // one per collective of at most 4 MiB per rank; 0 while the CPU collectives go over Gloo.
  int64_t shm_rounds = 0;
  // Readings of the CPU gather buffer pool when the snapshot is taken (state, not counts):
  int64_t host_buffer_cached_bytes = 0;  // freed buffers kept for reuse
  int64_t host_buffer_cache_limit = 0;   // the most it may keep: max pool bytes alive at once
  int64_t host_buffer_live_bytes = 0;    // pool buffers in use: what the full storage really holds
  int64_t host_buffer_allocations = 0;   // buffers the pool had to allocate since the process started

  /// (name, value) pairs in a fixed order; the names are the keys of fsdp::stats().
  std::vector<std::pair<std::string, int64_t>> items() const;
};

/// A snapshot of the counters.
Stats stats();
/// Zeroes the counters; unsharded_bytes, unsharded_grad_bytes and in_flight keep their current
/// values (they are state, not counts) and their peaks restart from them.
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

/// Every rank's `mine`, in rank order, exchanged through the process group's store: no
/// collective, so no fingerprint and no ordering with the gathers (initialising the group from
/// the environment first if needed). `topic` keeps exchanges apart: the n-th exchange of a topic
/// on one rank meets the n-th on the others. At world size 1: {mine}. A peer that never takes
/// part fails it after the timeout (kind timeout; peer-lost when the store went away first).
std::vector<std::string> exchangeThroughStore(const std::string& topic, const std::string& mine);

/// Overwrites the `bytes` bytes at `data` (host memory) on every rank with rank `root`'s: one
/// broadcast over the CPU backend (Gloo), behind its fingerprint envelope like every collective
/// of the runtime; `what` names it in a divergence error ("module states from rank 0"). Every
/// rank must call it with the same size. World size 1: nothing to do.
void broadcastBytes(void* data, int64_t bytes, int root, const std::string& what);

/// Waits for and drops every gather started by all_gather_start and not waited yet, then
/// reshards every gathered parameter and resets every count (what fsdp::release_all does).
void releaseAll();

/// What kind of failure an error of the runtime is, as c10d's errors have a type
/// (DistBackendError, DistNetworkError, ...). A launcher ranks the failures of its ranks by it:
/// a rank's own failure explains a job's failure; a lost peer, a timeout waiting for one or a
/// failure a peer reported are only its consequences (docs/runtime.md, "Errors and timeouts").
enum class ErrorKind {
  kNone,        // no failure
  kBadInput,    // this rank's arguments, model file, build or environment are wrong
  kMismatch,    // the ranks disagree: rank files of different fsdp-opt runs, different weights
  kDivergence,  // the ranks issue different collectives (their collective fingerprints differ)
  kPeerLost,    // a peer went away: a collective, rendezvous or store exchange failed early
  kTimeout,     // a wait ran for the whole FSDP_OPT_TIMEOUT_S
  kPeerFailed,  // a peer reported a failure of its own (its wrong file, no NCCL unique id)
  kBackend,     // the backend or the device failed on this rank (NCCL, CUDA)
  kInternal,    // a failure the runtime did not expect (torch failing underneath, a bug)
  kModel,       // not raised by the runtime: the model raised, or a non-fsdp op failed
};

/// The kind's name: "none", "bad-input", "mismatch", "divergence", "peer-lost", "timeout",
/// "peer-failed", "backend", "internal", "model".
const char* errorKindName(ErrorKind kind);
/// The kind named `name` (errorKindName's spelling); false when there is none.
bool parseErrorKind(const std::string& name, ErrorKind* kind);
/// True for the kinds another rank's failure explains: kPeerLost, kTimeout, kPeerFailed.
bool isConsequenceOfPeer(ErrorKind kind);

/// The kind of an exception the runtime's C++ API raised; kNone for any other exception.
ErrorKind errorKindOf(const std::exception& e);

/// The one-line form of an error, as fsdp-opt, fsdp-run and the Python package print it: c10's
/// C++ backtrace dropped; of a TorchScript interpreter's traceback (an op's error rethrown by a
/// scripted method), the message of its last "SomethingError: message" line; else the first
/// non-empty line ("unknown error" when there is none).
std::string oneLineMessage(const std::exception& error);
std::string oneLineMessage(const std::string& text);

/// The failure of the last fsdp:: op this thread called: kind kNone when that op succeeded.
/// The TorchScript interpreter rethrows an op's exception as a plain error carrying only its
/// text; this is how a program running a scripted model learns the kind (fsdp::last_error in
/// TorchScript and Python).
struct OpError {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
};
OpError lastOpError();

/// Timeout of collectives and rendezvous: FSDP_OPT_TIMEOUT_S seconds (default 300).
std::chrono::milliseconds defaultTimeout();

/// Version string of the runtime library (the project version).
const char* version();

/// True when this build has the CUDA/NCCL backend (built with FSDP_OPT_ENABLE_CUDA).
bool hasCudaBackend();

}  // namespace runtime
}  // namespace fsdp_opt
