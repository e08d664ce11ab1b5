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
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace fsdp_opt {
namespace runtime {

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

  /// Gathers `input` (contiguous uint8, n bytes, the same n on every rank) from every rank into
  /// `output` (contiguous uint8, size() * n bytes): rank r's bytes land at [r*n, (r+1)*n).
  /// Blocks; throws on failure or timeout.
  virtual void allGatherBytes(const at::Tensor& input, const at::Tensor& output);

  /// Starts the same collective; `input` and `output` must stay alive until wait() returns.
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

  /// Blocks until every rank has reached the barrier.
  virtual void barrier();

 protected:
  /// Throws c10::Error("backend NAME does not support WHAT").
  [[noreturn]] void unsupported(const std::string& what) const;
  /// Checks the common preconditions of allGatherBytes*: dtype, contiguity, sizes, device.
  void checkAllGatherArgs(const at::Tensor& input, const at::Tensor& output) const;

 private:
  Options options_;
};

/// Options of the Gloo backend.
struct GlooBackendOptions : CollectiveBackend::Options {
  /// Network interfaces to bind (GLOO_SOCKET_IFNAME, comma-separated); empty: use `hostname`.
  std::vector<std::string> interfaces;
  /// Address or hostname to bind when no interface is named (127.0.0.1 on loopback runs).
  std::string hostname = "127.0.0.1";
  /// Gloo worker threads.
  int threads = 2;
};

/// Creates the Gloo backend over a c10d store (the rendezvous happens here; it is bounded by
/// options.timeout). Only CPU tensors are supported.
std::unique_ptr<CollectiveBackend> makeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size,
                                                   const GlooBackendOptions& options);

/// Options of the NCCL backend.
struct NcclBackendOptions : CollectiveBackend::Options {
  /// FSDP_OPT_CUDA_BLOCKING_WAIT=1: PendingCollective::wait() blocks the host until the
  /// collective completed (bounded by the timeout) instead of only reporting the
  /// communicator's error state.
  bool blockingWait = false;
  /// Store key under which rank 0 publishes the NCCL unique id.
  std::string storeKey = "nccl/uid/0";
};

/// Creates the NCCL backend on CUDA device `device` (built with FSDP_OPT_ENABLE_CUDA only):
/// rank 0's ncclUniqueId goes through `store` (not needed when size == 1), then a non-blocking
/// communicator is created within options.timeout. CUDA tensors on that device only.
std::unique_ptr<CollectiveBackend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size, int device,
                                                   const NcclBackendOptions& options);
/// NCCL version of the library the runtime runs with (ncclGetVersion; FSDP_OPT_ENABLE_CUDA).
int ncclVersionLinked();

}  // namespace runtime
}  // namespace fsdp_opt
