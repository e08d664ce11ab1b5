// CUDA backend: NCCL underneath, with a communicator the runtime owns (not c10d's
// ProcessGroupNCCL). Deliberately thin: the byte all-gather (alone, or one per parameter inside
// ncclGroupStart/End for the parameter-major layout), communicator creation (unique id through
// the c10d store), and error handling. Everything around it (packing, casts, streams,
// buffer lifetime, bookkeeping) is shared with the paths that run without NCCL (cuda_unshard.cpp,
// copy_plan.h, gather.cpp). See docs/runtime.md, "NCCL".
//
// Error handling:
//   - the communicator is non-blocking (ncclConfig_t::blocking = 0), so creating it and
//     enqueueing onto it never block the host for long: both are polled with
//     ncclCommGetAsyncError within FSDP_OPT_TIMEOUT_S;
//   - a watchdog thread polls ncclCommGetAsyncError (a peer's failure surfaces as an
//     asynchronous error) and the completion event of every collective; an error, or a
//     collective not complete within FSDP_OPT_TIMEOUT_S, makes it call ncclCommAbort, which
//     also ends NCCL's kernels so the streams waiting on them drain;
//   - an aborted communicator fails every later operation with the reason, and the wait of a
//     collective reports it (FSDP_OPT_CUDA_BLOCKING_WAIT=1 makes the wait itself block, bounded
//     by the timeout, like Gloo's);
//   - destruction (destroy_process_group, or at exit) finalizes and destroys a healthy
//     communicator within a bound, and aborts it otherwise.
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "../collective_backend.h"

namespace fsdp_opt {
namespace runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

std::string ncclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

// The communicator and its health, shared by the backend, its pending collectives and the
// watchdog thread.
class NcclComm : public std::enable_shared_from_this<NcclComm> {
 public:
  NcclComm(ncclComm_t comm, c10::DeviceIndex device, int rank, int size,
           std::chrono::milliseconds timeout)
      : comm_(comm), device_(device), rank_(rank), size_(size), timeout_(timeout) {}

  ~NcclComm() { shutdown(); }

  void startWatchdog() {
    watchdog_ = std::thread([self = this] { self->watchdogLoop(); });
  }

  /// Enqueues the all-gather on `stream` and returns its completion event.
  std::shared_ptr<at::cuda::CUDAEvent> allGather(const void* in, void* out, size_t bytes,
                                                 const c10::cuda::CUDAStream& stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    throwIfBrokenLocked();
    ncclResult_t r = ncclAllGather(in, out, bytes, ncclUint8, comm_, stream.stream());
    if (r == ncclInProgress) r = settleLocked(Clock::now() + timeout_);
    if (r != ncclSuccess) {
      abortLocked("ncclAllGather failed: " + ncclText(r, comm_));
      throwIfBrokenLocked();
    }
    return recordLocked(stream);
  }

  struct Gather {
    const void* in;
    void* out;
    size_t bytes;
  };

  /// Enqueues one all-gather per entry of `gathers` between ncclGroupStart and ncclGroupEnd
  /// (one launch) on `stream` and returns the group's completion event.
  std::shared_ptr<at::cuda::CUDAEvent> allGatherGroup(const std::vector<Gather>& gathers,
                                                      const c10::cuda::CUDAStream& stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    throwIfBrokenLocked();
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
      abortLocked("ncclGroupStart failed: " + ncclText(r, comm_));
      throwIfBrokenLocked();
    }
    std::string failed;
    for (const Gather& g : gathers) {
      const ncclResult_t e = ncclAllGather(g.in, g.out, g.bytes, ncclUint8, comm_, stream.stream());
      if (e != ncclSuccess && e != ncclInProgress) {
        failed = "ncclAllGather (in a group of " + std::to_string(gathers.size()) +
                 ") failed: " + ncclText(e, comm_);
        break;
      }
    }
    r = ncclGroupEnd();  // closes the group even after a failed call, which NCCL requires
    if (r == ncclInProgress) r = settleLocked(Clock::now() + timeout_);
    if (failed.empty() && r != ncclSuccess) failed = "ncclGroupEnd failed: " + ncclText(r, comm_);
    if (!failed.empty()) {
      abortLocked(failed);
      throwIfBrokenLocked();
    }
    return recordLocked(stream);
  }

  /// Throws the reason if the communicator was aborted (or destroyed).
  void checkHealthy() {
    std::lock_guard<std::mutex> lock(mutex_);
    throwIfBrokenLocked();
  }

  /// Blocks until `event` completed, the communicator broke, or `deadline` passed (then aborts).
  void waitFor(const at::cuda::CUDAEvent& event, Clock::time_point deadline) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        throwIfBrokenLocked();
      }
      if (event.query()) return;
      if (Clock::now() > deadline) {
        std::lock_guard<std::mutex> lock(mutex_);
        abortLocked("an all-gather did not complete within " + std::to_string(seconds(timeout_)) +
                    " s (FSDP_OPT_TIMEOUT_S)");
        throwIfBrokenLocked();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// Stops the watchdog; finalizes and destroys a healthy communicator (within the timeout,
  /// else aborts it); aborts a broken one. Idempotent.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_ == nullptr) return;
    if (!aborted_) {
      c10::cuda::CUDAGuard guard(device_);
      const auto deadline = Clock::now() + std::min(timeout_, std::chrono::milliseconds(10000));
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclInProgress) r = settleLocked(deadline);
      if (r == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      aborted_ = true;
      reason_ = "the process group was destroyed";
    }
    comm_ = nullptr;
    outstanding_.clear();
  }

 private:
  struct Outstanding {
    std::shared_ptr<at::cuda::CUDAEvent> event;
    Clock::time_point issued;
  };

  // Polls a non-blocking communicator until its pending call settles or `deadline` passes.
  ncclResult_t settleLocked(Clock::time_point deadline) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclInternalError;
      if (state != ncclInProgress) break;
      if (Clock::now() > deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return state;
  }

  void abortLocked(const std::string& reason) {
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    if (comm_ != nullptr) {
      c10::cuda::CUDAGuard guard(device_);
      ncclCommAbort(comm_);  // also ends NCCL's kernels, so streams waiting on them drain
      comm_ = nullptr;
    }
    outstanding_.clear();
  }

  // The completion event of what was just enqueued on `stream`, watched by the watchdog.
  std::shared_ptr<at::cuda::CUDAEvent> recordLocked(const c10::cuda::CUDAStream& stream) {
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(stream);
    outstanding_.push_back(Outstanding{event, Clock::now()});
    return event;
  }

  void throwIfBrokenLocked() const {
    TORCH_CHECK(!aborted_, "backend nccl (rank ", rank_, " of ", size_, " on cuda:",
                static_cast<int>(device_), "): the communicator was aborted: ", reason_);
  }

  void watchdogLoop() {
    c10::cuda::CUDAGuard guard(device_);
    const auto poll = std::min(std::chrono::milliseconds(100),
                               std::max(std::chrono::milliseconds(1), timeout_ / 20));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, poll);
      if (stop_ || aborted_ || comm_ == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      if (state != ncclSuccess && state != ncclInProgress) {
        abortLocked("asynchronous NCCL error (a peer may have died): " + ncclText(state, comm_));
        continue;
      }
      while (!outstanding_.empty() && outstanding_.front().event->query()) outstanding_.pop_front();
      if (!outstanding_.empty() && Clock::now() - outstanding_.front().issued > timeout_) {
        abortLocked("an all-gather did not complete within " + std::to_string(seconds(timeout_)) +
                    " s (FSDP_OPT_TIMEOUT_S); a peer may have died or runs a different program");
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread watchdog_;
  bool stop_ = false;
  ncclComm_t comm_;
  c10::DeviceIndex device_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
  std::string reason_;
  std::deque<Outstanding> outstanding_;
};

// Communicators still alive at exit get a clean shutdown (finalize + destroy, bounded).
std::mutex& liveMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::vector<std::weak_ptr<NcclComm>>& live() {
  static auto* v = new std::vector<std::weak_ptr<NcclComm>>();
  return *v;
}
void shutdownLiveAtExit() {
  std::vector<std::shared_ptr<NcclComm>> comms;
  {
    std::lock_guard<std::mutex> lock(liveMutex());
    for (auto& w : live()) {
      if (auto c = w.lock()) comms.push_back(std::move(c));
    }
    live().clear();
  }
  for (auto& c : comms) c->shutdown();
}

class NcclPending final : public PendingCollective {
 public:
  NcclPending(std::shared_ptr<NcclComm> comm, std::shared_ptr<at::cuda::CUDAEvent> event,
              bool blocking, Clock::time_point deadline)
      : comm_(std::move(comm)), event_(std::move(event)), blocking_(blocking), deadline_(deadline) {}

  void wait() override {
    if (blocking_) {
      comm_->waitFor(*event_, deadline_);
    } else {
      comm_->checkHealthy();  // the stream order does the waiting; the watchdog the timeout
    }
  }

 private:
  std::shared_ptr<NcclComm> comm_;
  std::shared_ptr<at::cuda::CUDAEvent> event_;
  bool blocking_;
  Clock::time_point deadline_;
};

class NcclBackend final : public CollectiveBackend {
 public:
  NcclBackend(std::shared_ptr<NcclComm> comm, int rank, int size, c10::DeviceIndex device,
              const NcclBackendOptions& options)
      : CollectiveBackend(options),
        comm_(std::move(comm)),
        rank_(rank),
        size_(size),
        device_(device),
        blockingWait_(options.blockingWait) {}

  ~NcclBackend() override { comm_->shutdown(); }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PendingCollective> allGatherBytesAsync(const at::Tensor& input,
                                                         const at::Tensor& output) override {
    checkAllGatherArgs(input, output);
    if (!input.is_cuda() || input.device().index() != device_) {
      unsupported("tensors on " + input.device().str() + " (its communicator is on cuda:" +
                  std::to_string(device_) + ")");
    }
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
    auto event = comm_->allGather(input.data_ptr(), output.data_ptr(),
                                  static_cast<size_t>(input.numel()), stream);
    return std::make_unique<NcclPending>(comm_, std::move(event), blockingWait_,
                                         Clock::now() + options().timeout);
  }

  std::unique_ptr<PendingCollective> allGatherBytesGroupedAsync(
      const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) override {
    TORCH_CHECK(inputs.size() == outputs.size(), "backend nccl: a grouped all-gather got ",
                inputs.size(), " inputs for ", outputs.size(), " outputs");
    std::vector<NcclComm::Gather> gathers;
    for (size_t k = 0; k < inputs.size(); ++k) {
      checkAllGatherArgs(inputs[k], outputs[k]);
      if (!inputs[k].is_cuda() || inputs[k].device().index() != device_) {
        unsupported("tensors on " + inputs[k].device().str() + " (its communicator is on cuda:" +
                    std::to_string(device_) + ")");
      }
      if (inputs[k].numel() == 0) continue;
      gathers.push_back({inputs[k].data_ptr(), outputs[k].data_ptr(),
                         static_cast<size_t>(inputs[k].numel())});
    }
    TORCH_CHECK(!gathers.empty(), "backend nccl: a grouped all-gather with no bytes to gather");
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
    auto event = comm_->allGatherGroup(gathers, stream);
    return std::make_unique<NcclPending>(comm_, std::move(event), blockingWait_,
                                         Clock::now() + options().timeout);
  }

 private:
  std::shared_ptr<NcclComm> comm_;
  int rank_;
  int size_;
  c10::DeviceIndex device_;
  bool blockingWait_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size, int device,
                                                   const NcclBackendOptions& options) {
  const double t = seconds(options.timeout);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    TORCH_CHECK(r == ncclSuccess, "fsdp: ncclGetUniqueId failed: ", ncclGetErrorString(r));
  }
  if (size > 1) {
    TORCH_CHECK(store, "fsdp: the NCCL backend of world size ", size, " needs a rendezvous store");
    try {
      if (rank == 0) {
        const auto* p = reinterpret_cast<const uint8_t*>(&id);
        store->set(options.storeKey, std::vector<uint8_t>(p, p + sizeof(id)));
      } else {
        const std::vector<uint8_t> v = store->get(options.storeKey);
        TORCH_CHECK(v.size() == sizeof(id), "malformed NCCL unique id (", v.size(), " bytes)");
        std::memcpy(&id, v.data(), sizeof(id));
      }
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "fsdp: exchanging the NCCL unique id through the store failed within ", t,
                  " s (rank ", rank, " of ", size, "); a peer may have died or not started: ",
                  describe(e));
    }
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const auto deadline = Clock::now() + options.timeout;
  while (r == ncclInProgress && comm != nullptr) {
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r != ncclSuccess) {
    const std::string why = r == ncclInProgress
                                ? "did not complete within " + std::to_string(t) +
                                      " s (FSDP_OPT_TIMEOUT_S); a peer may have died or not started"
                                : "failed: " + ncclText(r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    TORCH_CHECK(false, "fsdp: creating the NCCL communicator (rank ", rank, " of ", size,
                " on cuda:", device, ") ", why);
  }
  auto shared = std::make_shared<NcclComm>(comm, static_cast<c10::DeviceIndex>(device), rank, size,
                                           options.timeout);
  shared->startWatchdog();
  {
    std::lock_guard<std::mutex> lock(liveMutex());
    static const bool registered = (std::atexit(shutdownLiveAtExit), true);
    (void)registered;
    live().push_back(shared);
  }
  return std::make_unique<NcclBackend>(std::move(shared), rank, size,
                                       static_cast<c10::DeviceIndex>(device), options);
}

int ncclVersionLinked() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

}  // namespace runtime
}  // namespace fsdp_opt
