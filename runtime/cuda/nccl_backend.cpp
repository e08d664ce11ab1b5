// CUDA backend: NCCL underneath, with a communicator the runtime owns (not c10d's
// ProcessGroupNCCL). Deliberately thin: the byte all-gather (alone, or one per parameter inside
// ncclGroupStart/End for the parameter-major layout), communicator creation (unique id through
// the c10d store), and error handling. Everything around it (packing, casts, streams,
// buffer lifetime, bookkeeping) is shared with the paths that run without NCCL (cuda_data_path.cpp,
// copy_plan.h, unshard_state.cpp). See docs/runtime.md, "NCCL".
//
// Error handling:
//   - the communicator is non-blocking (ncclConfig_t::blocking = 0), so creating it and
//     enqueueing onto it never block the host for long: both are polled with
//     ncclCommGetAsyncError within FSDP_OPT_TIMEOUT_S;
//   - a watchdog thread polls ncclCommGetAsyncError (a peer's failure surfaces as an
//     asynchronous error) and two events of every collective, one reached when it starts on
//     the GPU and one when it has finished; an error, a collective still running
//     FSDP_OPT_TIMEOUT_S after it started (time queued behind compute does not count:
//     collective_deadlines.h), or an event query that throws (a kernel fault) makes it call
//     ncclCommAbort with that cause, which also ends NCCL's kernels so the streams waiting on
//     them drain. Nothing the watchdog does may escape its thread (that would terminate the
//     process);
//   - an aborted communicator fails every later operation with the reason, and the wait of a
//     collective reports it (FSDP_OPT_CUDA_BLOCKING_WAIT=1 makes the wait itself block, bounded
//     by the timeout, like Gloo's);
//   - destruction (destroy_process_group, or at exit) finalizes and destroys a healthy
//     communicator within a bound, and aborts it otherwise;
//   - every NCCL return value is checked: where nothing can be thrown (abort, destroy), a
//     failure is added to the reason or reported as a warning.
#include <nccl.h>


#include <algorithm>
#include <climits>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "../collective_backend.h"
#include "../collective_deadlines.h"
#include "../communicator_id.h"
#include "../device_mapping.h"
#include "../environment.h"
#include "../errors.h"

namespace fsdp_opt {
namespace runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::string ncclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

// A failed NCCL call's kind: NCCL says when the cause is on another rank.
ErrorKind ncclKind(ncclResult_t r) {
  return r == ncclRemoteError ? ErrorKind::kPeerLost : ErrorKind::kBackend;
}

// ncclCommAbort on `device`. Never throws: it runs on error paths and in the watchdog thread.
// Returns what NCCL returned.
ncclResult_t abortComm(ncclComm_t comm, c10::DeviceIndex device) noexcept {
  std::optional<c10::cuda::CUDAGuard> guard;
  try {
    guard.emplace(device);
  } catch (...) {
    // NCCL selects the communicator's device itself; the guard only spares it the switch.
  }
  return ncclCommAbort(comm);
}

// The two events of one collective (collective_deadlines.h): `started` is recorded before the
// NCCL call, so it completes once everything queued ahead of the collective on its stream has;
// `finished` after it.
class EventProbe final : public CollectiveProbe {
 public:
  explicit EventProbe(const c10::cuda::CUDAStream& stream) { started_.record(stream); }
  void recordFinished(const c10::cuda::CUDAStream& stream) { finished_.record(stream); }
  bool started() override { return query(started_); }
  bool finished() override { return query(finished_); }

 private:
  // CUDAEvent::query throws c10::Error on any error but "not ready" (a sticky error of the
  // context); its text, without c10's backtrace, becomes the abort reason.
  static bool query(const at::cuda::CUDAEvent& event) {
    try {
      return event.query();
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  }

  at::cuda::CUDAEvent started_;
  at::cuda::CUDAEvent finished_;
};

// The communicator and its health, shared by the backend, its pending collectives and the
// watchdog thread.
class NcclComm : public std::enable_shared_from_this<NcclComm> {
 public:
  NcclComm(ncclComm_t comm, c10::DeviceIndex device, int rank, int size,
           std::chrono::milliseconds timeout)
      : comm_(comm), device_(device), rank_(rank), size_(size), timeout_(timeout),
        deadlines_(timeout) {}

  ~NcclComm() { shutdown(); }

  void startWatchdog() {
    watchdog_ = std::thread([self = this] { self->watchdogLoop(); });
  }

  /// Enqueues the all-gather on `stream` and returns its probe.
  std::shared_ptr<EventProbe> allGather(const void* in, void* out, size_t bytes,
                                        const c10::cuda::CUDAStream& stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    throwIfBrokenLocked();
    auto probe = std::make_shared<EventProbe>(stream);
    ncclResult_t r = ncclAllGather(in, out, bytes, ncclUint8, comm_, stream.stream());
    if (r == ncclInProgress) r = settleLocked(Clock::now() + timeout_);
    if (r != ncclSuccess) {
      abortLocked(ncclKind(r), "ncclAllGather failed: " + ncclText(r, comm_));
      throwIfBrokenLocked();
    }
    return watchLocked(std::move(probe), stream);
  }

  /// Enqueues one NCCL group on `stream`: ncclGroupStart, the calls `enqueue` makes, then
  /// ncclGroupEnd (one launch), and returns the group's probe. `enqueue` returns the first call
  /// that failed, described, with its result (ncclSuccess when none did).
  std::shared_ptr<EventProbe> groupLocked(
      const c10::cuda::CUDAStream& stream,
      const std::function<std::pair<ncclResult_t, std::string>()>& enqueue) {
    throwIfBrokenLocked();
    auto probe = std::make_shared<EventProbe>(stream);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
      abortLocked(ncclKind(r), "ncclGroupStart failed: " + ncclText(r, comm_));
      throwIfBrokenLocked();
    }
    auto [e, failed] = enqueue();
    ErrorKind kind = failed.empty() ? ErrorKind::kBackend : ncclKind(e);
    r = ncclGroupEnd();  // closes the group even after a failed call, which NCCL requires
    if (r == ncclInProgress) r = settleLocked(Clock::now() + timeout_);
    if (failed.empty() && r != ncclSuccess) {
      failed = "ncclGroupEnd failed: " + ncclText(r, comm_);
      kind = ncclKind(r);
    }
    if (!failed.empty()) {
      abortLocked(kind, failed);
      throwIfBrokenLocked();
    }
    return watchLocked(std::move(probe), stream);
  }

  /// Enqueues an all-to-all of `chunk` bytes per rank (one ncclSend and one ncclRecv per peer
  /// in one group: NCCL has no all-to-all call) on `stream` and returns its probe.
  std::shared_ptr<EventProbe> allToAll(const uint8_t* in, uint8_t* out, size_t chunk,
                                       const c10::cuda::CUDAStream& stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    return groupLocked(stream, [&]() -> std::pair<ncclResult_t, std::string> {
      for (int peer = 0; peer < size_; ++peer) {
        const size_t at = static_cast<size_t>(peer) * chunk;
        ncclResult_t e = ncclSend(in + at, chunk, ncclUint8, peer, comm_, stream.stream());
        if (e == ncclSuccess || e == ncclInProgress) e = ncclRecv(out + at, chunk, ncclUint8, peer, comm_, stream.stream());
        if (e != ncclSuccess && e != ncclInProgress) {
          return {e, "ncclSend/ncclRecv with rank " + std::to_string(peer) + " failed: " + ncclText(e, comm_)};
        }
      }
      return {ncclSuccess, ""};
    });
  }

  struct Gather {
    const void* in;
    void* out;
    size_t bytes;
  };

  /// Enqueues one all-gather per entry of `gathers` between ncclGroupStart and ncclGroupEnd
  /// (one launch) on `stream` and returns the group's probe.
  std::shared_ptr<EventProbe> allGatherGroup(const std::vector<Gather>& gathers,
                                             const c10::cuda::CUDAStream& stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    return groupLocked(stream, [&]() -> std::pair<ncclResult_t, std::string> {
      for (const Gather& g : gathers) {
        const ncclResult_t e = ncclAllGather(g.in, g.out, g.bytes, ncclUint8, comm_, stream.stream());
        if (e != ncclSuccess && e != ncclInProgress) {
          return {e, "ncclAllGather (in a group of " + std::to_string(gathers.size()) + ") failed: " + ncclText(e, comm_)};
        }
      }
      return {ncclSuccess, ""};
    });
  }

  /// Throws the reason if the communicator was aborted (or destroyed).
  void checkHealthy() {
    std::lock_guard<std::mutex> lock(mutex_);
    throwIfBrokenLocked();
  }

  /// Blocks until the collective of `probe` finished, the communicator broke, or the collective
  /// ran for longer than the timeout after it started (then aborts). Waiting while it is still
  /// queued behind other work is not bounded: that work is not this collective.
  void waitFor(const std::shared_ptr<CollectiveProbe>& probe) {
    CollectiveDeadline deadline(probe, timeout_);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        throwIfBrokenLocked();
      }
      std::string reason;
      ErrorKind kind = ErrorKind::kTimeout;
      try {
        switch (deadline.poll(Clock::now())) {
          case CollectiveDeadline::State::kFinished:
            return;
          case CollectiveDeadline::State::kOverdue:
            reason = overdueReason(timeout_);
            break;
          default:
            break;
        }
      } catch (const std::exception& e) {
        reason = probeFailureReason(e.what());
        kind = ErrorKind::kBackend;
      }
      if (!reason.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        abortLocked(kind, reason);
        throwIfBrokenLocked();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// Stops the watchdog; finalizes and destroys a healthy communicator (within the timeout,
  /// else aborts it); aborts a broken one. Idempotent. Never throws: it runs in destructors and
  /// at exit, so what goes wrong is printed as a warning.
  void shutdown() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_ == nullptr) return;
    if (!aborted_) {
      std::string problem;
      const auto deadline = Clock::now() + std::min(timeout_, std::chrono::milliseconds(10000));
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclInProgress) r = settleLocked(deadline);
      if (r == ncclSuccess) {
        const ncclResult_t d = ncclCommDestroy(comm_);
        if (d != ncclSuccess) problem = std::string("ncclCommDestroy failed: ") + ncclGetErrorString(d);
      } else {
        problem = r == ncclInProgress ? "ncclCommFinalize did not complete in time"
                                      : "ncclCommFinalize failed: " + ncclText(r, comm_);
        const ncclResult_t a = abortComm(comm_, device_);
        problem += a == ncclSuccess ? "; aborted the communicator instead"
                                    : std::string("; ncclCommAbort failed too: ") + ncclGetErrorString(a);
      }
      if (!problem.empty()) {
        std::fprintf(stderr, "fsdp: warning: destroying the NCCL communicator (rank %d of %d on cuda:%d): %s\n",
                     rank_, size_, static_cast<int>(device_), problem.c_str());
      }
      aborted_ = true;
      kind_ = ErrorKind::kBadInput;  // used after destroy_process_group
      reason_ = "the process group was destroyed";
    }
    comm_ = nullptr;
    deadlines_.clear();
  }

 private:
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

  void abortLocked(ErrorKind kind, const std::string& reason) noexcept {
    if (aborted_) return;
    aborted_ = true;
    kind_ = kind;
    reason_ = reason;
    if (comm_ != nullptr) {
      // also ends NCCL's kernels, so streams waiting on them drain
      const ncclResult_t r = abortComm(comm_, device_);
      if (r != ncclSuccess) reason_ += std::string(" (ncclCommAbort failed too: ") + ncclGetErrorString(r) + ")";
      comm_ = nullptr;
    }
    deadlines_.clear();
  }

  // Records the end of what was just enqueued on `stream` and hands the collective to the
  // watchdog.
  std::shared_ptr<EventProbe> watchLocked(std::shared_ptr<EventProbe> probe,
                                          const c10::cuda::CUDAStream& stream) {
    probe->recordFinished(stream);
    deadlines_.add(probe);
    return probe;
  }

  void throwIfBrokenLocked() const {
    FSDP_CHECK(!aborted_, kind_, "backend nccl (rank ", rank_, " of ", size_,
               " on cuda:", static_cast<int>(device_),
               "): the communicator was aborted: ", reason_);
  }

  void watchdogLoop() noexcept {
    try {
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
          abortLocked(ErrorKind::kPeerLost,
                      "asynchronous NCCL error (a peer may have died): " + ncclText(state, comm_));
          continue;
        }
        bool overdue = false;
        const std::string reason = deadlines_.poll(Clock::now(), &overdue);
        if (!reason.empty())
          abortLocked(overdue ? ErrorKind::kTimeout : ErrorKind::kBackend, reason);
      }
    } catch (const std::exception& e) {
      // The communicator can no longer be watched, so it must not be used either.
      std::lock_guard<std::mutex> lock(mutex_);
      abortLocked(ErrorKind::kInternal,
                  "the NCCL watchdog failed: " + detail::describeException(e));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      abortLocked(ErrorKind::kInternal, "the NCCL watchdog failed with an unknown exception");
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
  ErrorKind kind_ = ErrorKind::kNone;
  std::string reason_;
  CollectiveDeadlines deadlines_;
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
  NcclPending(std::shared_ptr<NcclComm> comm, std::shared_ptr<EventProbe> probe, bool blocking)
      : comm_(std::move(comm)), probe_(std::move(probe)), blocking_(blocking) {}

  void wait() override {
    if (blocking_) {
      comm_->waitFor(probe_);
    } else {
      comm_->checkHealthy();  // the stream order does the waiting; the watchdog the timeout
    }
  }

 private:
  std::shared_ptr<NcclComm> comm_;
  std::shared_ptr<EventProbe> probe_;
  bool blocking_;
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
        origin_(options.deviceOrigin),
        blockingWait_(options.blockingWait) {}

  ~NcclBackend() override { comm_->shutdown(); }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void checkTensorDevice(const c10::Device& device, const std::string& context) const override {
    const int index = device.has_index() ? device.index() : 0;
    FSDP_CHECK(device.is_cuda() && index == device_, ErrorKind::kBadInput, context,
               ": parameters are on ", device.str(),
               " but this rank's NCCL communicator is on cuda:", static_cast<int>(device_), " (",
               origin_,
               "; one device per rank); move the model to cuda:", static_cast<int>(device_));
  }

  std::unique_ptr<PendingCollective> allGatherBytesAsync(const at::Tensor& input,
                                                         const at::Tensor& output) override {
    checkAllGatherArgs(input, output);
    if (!input.is_cuda() || input.device().index() != device_) {
      unsupported("tensors on " + input.device().str() + " (its communicator is on cuda:" +
                  std::to_string(device_) + ")");
    }
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
    auto probe = comm_->allGather(input.data_ptr(), output.data_ptr(),
                                  static_cast<size_t>(input.numel()), stream);
    return std::make_unique<NcclPending>(comm_, std::move(probe), blockingWait_);
  }

  std::unique_ptr<PendingCollective> allToAllBytesAsync(const at::Tensor& input, const at::Tensor& output) override {
    checkTensorDevice(input.device(), "backend nccl: all-to-all");
    checkTensorDevice(output.device(), "backend nccl: all-to-all");
    checkAllToAllArgs(input, output);
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
    auto probe = comm_->allToAll(static_cast<const uint8_t*>(input.data_ptr()), static_cast<uint8_t*>(output.data_ptr()),
                                 static_cast<size_t>(input.numel() / size_), stream);
    return std::make_unique<NcclPending>(comm_, std::move(probe), blockingWait_);
  }

  std::unique_ptr<PendingCollective> allGatherBytesGroupedAsync(
      const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) override {
    FSDP_CHECK(inputs.size() == outputs.size(), ErrorKind::kInternal,
               "backend nccl: a grouped all-gather got ", inputs.size(), " inputs for ",
               outputs.size(), " outputs");
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
    FSDP_CHECK(!gathers.empty(), ErrorKind::kInternal,
               "backend nccl: a grouped all-gather with no bytes to gather");
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
    auto probe = comm_->allGatherGroup(gathers, stream);
    return std::make_unique<NcclPending>(comm_, std::move(probe), blockingWait_);
  }

 private:
  std::shared_ptr<NcclComm> comm_;
  int rank_;
  int size_;
  c10::DeviceIndex device_;
  std::string origin_;
  bool blockingWait_;
};

std::unique_ptr<CollectiveBackend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size, int device,
                                                   const NcclBackendOptions& options) {
  const double t = seconds(options.timeout);
  FSDP_CHECK(size == 1 || store, ErrorKind::kInternal, "fsdp: the NCCL backend of world size ",
             size, " needs a rendezvous store");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      const std::string why = std::string("ncclGetUniqueId failed on rank 0: ") + ncclGetErrorString(r);
      if (size > 1) detail::publishCommunicatorIdFailure(*store, options.storeKey, why);
      detail::raise(ErrorKind::kBackend, c10::str("fsdp: ", why));
    }
  }
  if (size > 1) {
    std::string rank0Failure;
    const auto started = Clock::now();
    try {
      if (rank == 0) {
        const auto* p = reinterpret_cast<const uint8_t*>(&id);
        detail::publishCommunicatorId(*store, options.storeKey, std::vector<uint8_t>(p, p + sizeof(id)));
      } else {
        detail::ReceivedCommunicatorId got =
            detail::receiveCommunicatorId(*store, options.storeKey, sizeof(id));
        rank0Failure = std::move(got.rank0Failure);
        if (rank0Failure.empty()) std::memcpy(&id, got.id.data(), sizeof(id));
      }
    } catch (const std::exception& e) {
      detail::raise(
          detail::waitFailureKind(started, options.timeout),
          c10::str("fsdp: exchanging the NCCL unique id through the store failed "
                   "within ",
                   t, " s (rank ", rank, " of ", size,
                   "); a peer may have died or not started: ", detail::describeException(e)));
    }
    FSDP_CHECK(rank0Failure.empty(), ErrorKind::kPeerFailed,
               "fsdp: rank 0 could not create the NCCL unique id (store key '", options.storeKey,
               "'), so no communicator can be created: ", rank0Failure);
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
    std::string why = r == ncclInProgress
                          ? "did not complete within " + std::to_string(t) +
                                " s (FSDP_OPT_TIMEOUT_S); a peer may have died or not started"
                          : "failed: " + ncclText(r, comm);
    if (comm != nullptr) {
      const ncclResult_t a = abortComm(comm, static_cast<c10::DeviceIndex>(device));
      if (a != ncclSuccess) why += std::string(" (ncclCommAbort failed too: ") + ncclGetErrorString(a) + ")";
    }
    detail::raise(r == ncclInProgress ? ErrorKind::kTimeout : ncclKind(r),
                  c10::str("fsdp: creating the NCCL communicator (rank ", rank, " of ", size,
                           " on cuda:", device, ") ", why));
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

}  // namespace

std::unique_ptr<CollectiveBackend> createNcclBackend(const BackendRendezvous& group,
                                                     const c10::Device& tensors,
                                                     const std::string& context) {
  // First thing of every creation attempt, on every rank, whatever fails below: the n-th
  // attempt of every rank then uses the same store key (communicator_id.h).
  const std::string key = detail::nextCommunicatorIdKey();
  FSDP_CHECK(group.world == 1 || group.store, ErrorKind::kInternal, context,
             ": no rendezvous store for world size ", group.world);
  detail::CudaDeviceChoice choice;
  try {
    // LOCAL_RANK and LOCAL_WORLD_SIZE count only when the group came from torchrun's
    // environment; an explicit init names no local rank.
    detail::CudaDeviceEnv env;
    if (const char* v = detail::envValue("FSDP_OPT_CUDA_DEVICE")) env.override = v;
    if (group.localRank) {
      env.localRank = group.localRank;
      if (detail::envValue("LOCAL_WORLD_SIZE") != nullptr) {
        env.localWorldSize = static_cast<int>(detail::envInt("LOCAL_WORLD_SIZE", 1, INT_MAX));
      }
    }
    const int index = tensors.has_index() ? tensors.index() : 0;
    choice = detail::chooseCudaDevice(env, index, c10::cuda::device_count());
  } catch (const c10::Error& e) {
    choice.error = e.what_without_backtrace();
  }
  if (!choice.error.empty()) {
    // The peers are about to wait for rank 0's id: tell them why there is none.
    if (group.rank == 0 && group.world > 1) {
      detail::publishCommunicatorIdFailure(*group.store, key, "rank 0: " + choice.error);
    }
    detail::raise(ErrorKind::kBadInput, c10::str(context, ": ", choice.error));
  }
  NcclBackendOptions options;
  options.timeout = group.timeout;
  options.blockingWait = detail::envSwitch("FSDP_OPT_CUDA_BLOCKING_WAIT");
  options.storeKey = key;
  options.deviceOrigin = choice.origin;
  try {
    return makeNcclBackend(group.store, group.rank, group.world, choice.device, options);
  } catch (const c10::Error& e) {
    detail::raise(
        detail::kindOr(e, ErrorKind::kBackend),
        c10::str(context, ": creating the nccl backend failed: ", e.what_without_backtrace()));
  }
}

int ncclVersionLinked() {
  int v = 0;
  const ncclResult_t r = ncclGetVersion(&v);
  FSDP_CHECK(r == ncclSuccess, ErrorKind::kBackend,
             "fsdp: ncclGetVersion failed: ", ncclGetErrorString(r));
  return v;
}

}  // namespace runtime
}  // namespace fsdp_opt
