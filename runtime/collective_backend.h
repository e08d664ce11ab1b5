// The runtime's collective backend interface, shaped like c10d::Backend but reduced to what
// fsdp needs: a byte all-gather (the runtime packs all shards of a unit, whatever their dtypes,
// into one byte buffer, so one collective serves a whole unit), and a grouped form of it (one
// all-gather per parameter, for the CUDA path's parameter-major layout). One implementation per
// device kind: Gloo over c10d::ProcessGroupGloo for CPU tensors (gloo_backend.cpp); NCCL with the
// runtime's own communicator for CUDA tensors (cuda/nccl_backend.cpp, built with
// FSDP_OPT_ENABLE_CUDA). Anything a backend cannot do throws "backend NAME does not support WHAT".
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace fsdp_opt {
namespace runtime {

/// The ranks a backend serves, as global ranks in its own rank order, and the tag that keeps its
/// store keys (and its envelopes' sizes) apart from other groups' ("" for the world).
struct GroupMembers {
  std::string tag;
  std::vector<int> ranks;
  /// The global rank of group rank `r`.
  int global(int r) const { return ranks.empty() ? r : ranks.at(static_cast<size_t>(r)); }
};

/// A collective in flight.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// Blocks until done; throws on failure or after the backend's timeout.
  virtual void wait() = 0;
};

class CollectiveBackend {
 public:
  struct Options {
    /// Bound on every collective (and on the backend's own rendezvous).
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  };

  explicit CollectiveBackend(Options options) : options_(std::move(options)) {}
  virtual ~CollectiveBackend() = default;
  CollectiveBackend(const CollectiveBackend&) = delete;
  CollectiveBackend& operator=(const CollectiveBackend&) = delete;

  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const Options& options() const { return options_; }
  /// Set once by the process group that created this backend (the world's when never set).
  void setMembers(GroupMembers members) { members_ = std::move(members); }
  const GroupMembers& members() const { return members_; }

  /// Starts gathering `input` (contiguous uint8, n bytes, the same n on every rank) from every
  /// rank into `output` (contiguous uint8, size() * n bytes): rank r's bytes land at
  /// [r*n, (r+1)*n). `input` may be this rank's slot of `output` (in place, as the CPU data
  /// path packs it); no other overlap. Both must stay alive until wait() returns; wait() throws
  /// on failure or timeout.
  virtual std::unique_ptr<PendingCollective> allGatherBytesAsync(const at::Tensor& input,
                                                                 const at::Tensor& output);

  /// Starts one all-gather per (inputs[k], outputs[k]) pair as ONE group (NCCL: the calls
  /// between ncclGroupStart and ncclGroupEnd, launched together): inputs[k] (contiguous uint8,
  /// n_k bytes, the same n_k on every rank) into outputs[k] (contiguous uint8, size() * n_k
  /// bytes). inputs[k] may be outputs[k]'s own slot [rank() * n_k, (rank() + 1) * n_k): that
  /// gather runs in place. Every tensor must stay alive until wait() returns. Only the CUDA
  /// backend has it (the parameter-major layout, docs/runtime.md).
  virtual std::unique_ptr<PendingCollective> allGatherBytesGroupedAsync(
      const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);

  /// Starts an all-to-all of equal byte chunks: `input` and `output` are contiguous uint8 of
  /// size() * n bytes (the same n on every rank); chunk p of `input` goes to rank p, and chunk
  /// p of `output` receives rank p's chunk rank(). How backward reduces gradients
  /// (training.cpp): each rank receives every rank's rows of its own shard and sums them in rank
  /// order, which one process can reproduce, unlike a backend's all-reduce. Both tensors must
  /// stay alive until wait() returns.
  virtual std::unique_ptr<PendingCollective> allToAllBytesAsync(const at::Tensor& input,
                                                                const at::Tensor& output);

  /// Starts overwriting `buffer` (contiguous uint8, the same size on every rank) on every rank
  /// with rank `root`'s bytes. Only Gloo has it (module states from one rank, broadcast.cpp).
  virtual std::unique_ptr<PendingCollective> broadcastBytesAsync(const at::Tensor& buffer, int root);

  /// Throws, naming `context`, when this backend cannot serve tensors on `device` (NCCL: one
  /// device per rank). Called for every gather before anything is issued.
  virtual void checkTensorDevice(const c10::Device& device, const std::string& context) const;

 protected:
  /// Throws c10::Error("backend NAME does not support WHAT").
  [[noreturn]] void unsupported(const std::string& what) const;
  /// Checks the common preconditions of allGatherBytes*Async: dtype, contiguity, sizes, device.
  void checkAllGatherArgs(const at::Tensor& input, const at::Tensor& output) const;
  /// The same for allToAllBytesAsync: uint8, contiguous, equal sizes divisible by size().
  void checkAllToAllArgs(const at::Tensor& input, const at::Tensor& output) const;
  /// The same for broadcastBytesAsync: a contiguous 1-d CPU uint8 buffer, a root below size().
  void checkBroadcastArgs(const at::Tensor& buffer, int root) const;

 private:
  Options options_;
  GroupMembers members_;
};

/// What a backend takes from the process group it serves.
struct BackendRendezvous {
  c10::intrusive_ptr<c10d::Store> store;  // the group's store; null at world size 1
  int rank = 0;
  int world = 1;
  /// LOCAL_RANK, when the group came from torchrun's environment (an explicit init names none).
  std::optional<int> localRank;
  std::string masterAddr;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

/// Options of the Gloo backend.
struct GlooBackendOptions : CollectiveBackend::Options {
  /// Network interfaces to bind (GLOO_SOCKET_IFNAME, comma-separated); empty: use `hostname`.
  std::vector<std::string> interfaces;
  /// Address or hostname to bind when no interface is named (127.0.0.1 on loopback runs).
  std::string hostname = "127.0.0.1";
  /// Gloo worker threads.
  int threads = 2;

  /// The options for `group`, from its timeout and the environment (GLOO_SOCKET_IFNAME; the
  /// hostname follows the master address: 127.0.0.1 for a loopback one, else this machine's).
  static GlooBackendOptions forGroup(const BackendRendezvous& group);
};

/// Creates the Gloo backend of `group` (the rendezvous happens here, bounded by the group's
/// timeout). CPU tensors only. `context` prefixes errors (e.g. "fsdp::all_gather(unit 'a.b')").
std::unique_ptr<CollectiveBackend> createGlooBackend(const BackendRendezvous& group,
                                                     const c10::Device& tensors,
                                                     const std::string& context);

/// The backend of `group` for CPU tensors: Gloo (createGlooBackend), or the shared-memory
/// transport (shm_backend.cpp) when every rank of the group set FSDP_OPT_CPU_TRANSPORT=shm and
/// can map one segment (one host). Every rank takes part in the choice through the group's store,
/// so every rank makes the same one.
std::unique_ptr<CollectiveBackend> createHostBackend(const BackendRendezvous& group,
                                                     const c10::Device& tensors,
                                                     const std::string& context);

/// Options of the NCCL backend.
struct NcclBackendOptions : CollectiveBackend::Options {
  /// FSDP_OPT_CUDA_BLOCKING_WAIT=1: PendingCollective::wait() blocks the host until the
  /// collective completed (bounded by the timeout) instead of only reporting the
  /// communicator's error state.
  bool blockingWait = false;
  /// Store key under which rank 0 publishes the NCCL unique id.
  std::string storeKey = "nccl/uid/0";
  /// Why the communicator is on its device, for messages ("LOCAL_RANK=1", ...).
  std::string deviceOrigin;
};

/// Creates the NCCL backend of `group` for parameters on `tensors` (built with
/// FSDP_OPT_ENABLE_CUDA only): chooses this rank's device (device_mapping.h, from
/// FSDP_OPT_CUDA_DEVICE, LOCAL_RANK and LOCAL_WORLD_SIZE), passes rank 0's ncclUniqueId through
/// the group's store and creates a non-blocking communicator within the group's timeout.
std::unique_ptr<CollectiveBackend> createNcclBackend(const BackendRendezvous& group,
                                                     const c10::Device& tensors,
                                                     const std::string& context);
/// NCCL version of the library the runtime runs with (ncclGetVersion; FSDP_OPT_ENABLE_CUDA).
int ncclVersionLinked();

}  // namespace runtime
}  // namespace fsdp_opt
