// CPU backend: c10d::ProcessGroupGloo underneath.
//
// This is the only translation unit that includes ProcessGroupGloo.hpp (and, through it, gloo's
// headers). On the torch 2.x wheel leg those gloo headers are Debian's (the wheel ships none);
// see docs/runtime.md ("Gloo on the PyPI wheel") for why that is safe: this file only uses
// c10d's exported functions and holds gloo objects through shared_ptr, never by value.
#include "collective_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <c10/util/Exception.h>

#include "envelope.h"
#include "environment.h"
#include "host_buffer_pool.h"
#include "errors.h"

namespace fsdp_opt {
namespace runtime {
namespace {

// c10d's flight recorder (torch 2.x; sized by TORCH_FR_BUFFER_SIZE, default 2000 entries) takes
// a Python and TorchScript traceback of every collective a Gloo group issues, and every gather
// here is issued from inside the TorchScript interpreter. In torch 2.15 that traceback crashes
// the process (SIGSEGV in InterpreterStateImpl::callstack) when the calling method is a
// torch.jit.freeze'd rank file and another TorchScript module ran first in the process. The
// recorder is one per process and reads its size once, when the first group is made; so unless
// the environment sizes it, it is sized 0 before this group is made. A program that made a group
// of its own before keeps its recorder (docs/runtime.md, "Process group").
void keepFlightRecorderOffUnlessSized() {
  if (detail::envValue("TORCH_FR_BUFFER_SIZE") || detail::envValue("TORCH_NCCL_TRACE_BUFFER_SIZE")) return;
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
}

// Gloo only borrows the bytes it moves: it gets views that do not own their memory, and the
// owning tensors stay with the pending collective. Gloo's worker thread keeps a finished piece
// (and whatever it references) until it takes its next one, which under load can be several
// gathers later; owning our buffers, it would hand them back to the host buffer pool at a time
// nobody controls, and every gather in between would allocate new ones (the pool's bound growing
// with the scheduling delay). Borrowed, they are released when wait() returns.
at::Tensor borrowed(const at::Tensor& bytes, int64_t begin, int64_t len) {
  return at::from_blob(static_cast<uint8_t*>(bytes.data_ptr()) + begin, {len}, bytes.options());
}

class GlooPending final : public PendingCollective {
 public:
  GlooPending(std::vector<at::Tensor> owners, std::chrono::milliseconds timeout)
      : owners_(std::move(owners)), timeout_(timeout), issued_(std::chrono::steady_clock::now()) {}

  // Never waited: dropped on an error path (or while its later pieces were being issued).
  ~GlooPending() override { keepOwnersUntilDone(); }

  void add(c10::intrusive_ptr<c10d::Work> work) { works_.push_back(std::move(work)); }

  void wait() override {
    // Gloo enforces its own timeout on every operation; waiting with the same bound here
    // covers the time the work spends queued behind Gloo's worker threads. Every piece is
    // waited for, even after one fails.
    std::exception_ptr first;
    for (auto& work : works_) {
      try {
        work->wait(timeout_);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) {
      keepOwnersUntilDone();  // a piece that timed out may still write
      try {
        std::rethrow_exception(first);
      } catch (const std::exception& e) {
        // Gloo reports a closed connection and a timeout alike; how long the wait took tells
        // them apart.
        detail::raise(detail::waitFailureKind(issued_, timeout_), detail::describeException(e));
      }
    }
    works_.clear();
    owners_.clear();
  }

 private:
  // Pieces that may still run keep the memory they write alive through their futures, whose
  // callbacks are dropped once the piece completed (at once when it has).
  void keepOwnersUntilDone() noexcept {
    if (works_.empty()) return;
    try {
      for (auto& work : works_) {
        work->getFuture()->addCallback([keep = owners_](c10::ivalue::Future&) {});
      }
    } catch (...) {
      new std::vector<at::Tensor>(owners_);  // leaked rather than freed under a running piece
    }
    works_.clear();
    owners_.clear();
  }

  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<at::Tensor> owners_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point issued_;
};

class GlooBackend final : public CollectiveBackend {
  // Per-rank bytes from which an all-gather goes out as one broadcast per rank (below).
  static constexpr int64_t kBroadcastBytes = int64_t(1) << 20;

 public:
  GlooBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              const GlooBackendOptions& options)
      : CollectiveBackend(options), rank_(rank), size_(size) {
    auto pgOptions = c10d::ProcessGroupGloo::Options::create(options.timeout);
    std::string where;
    try {
      if (!options.interfaces.empty()) {
        for (const std::string& ifname : options.interfaces) {
          where = "network interface '" + ifname + "' (GLOO_SOCKET_IFNAME)";
          pgOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        }
      } else {
        where = "address '" + options.hostname + "'";
        pgOptions->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname));
      }
    } catch (const std::exception& e) {
      detail::raise(ErrorKind::kBadInput,
                    c10::str("gloo cannot use ", where, ": ", detail::describeException(e)));
    }
    pgOptions->threads = options.threads;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdp_opt/gloo/", store);
    keepFlightRecorderOffUnlessSized();
    const auto started = std::chrono::steady_clock::now();
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, pgOptions);
    } catch (const std::exception& e) {
      detail::raise(
          detail::waitFailureKind(started, options.timeout),
          c10::str("gloo rendezvous of rank ", rank, " of ", size, " failed within ",
                   options.timeout.count() / 1000.0,
                   " s; a peer may have died or not started: ", detail::describeException(e)));
    }
  }

  std::string name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PendingCollective> allGatherBytesAsync(const at::Tensor& input,
                                                         const at::Tensor& output) override {
    checkAllGatherArgs(input, output);
    if (!input.device().is_cpu()) {
      unsupported("tensors on " + input.device().str() + " (it handles CPU tensors only)");
    }
    const int64_t n = input.numel();
    // Not ProcessGroupGloo::allgather: it allocates the whole gathered size twice per call (a
    // flat receive buffer on its worker thread, then a copy out of it; and, in torch 2.x, another
    // in the caller's thread that lives until the worker takes its next job). On torch 2.15 those
    // caller-side blocks fragmented glibc's heap: a rank file's `generate` grew the process by
    // about 200 KiB per call, without bound (docs/runtime.md, "Backends"). The collectives
    // below write straight into `output`.
    if (size_ == 2) {
      // Two ranks, any size: an all-to-all that sends nothing to itself, so `input` is the whole
      // send buffer and the peer's bytes land in its slot of `output`: no send slots to fill
      // here, and no copy of this rank's bytes to itself on Gloo's worker thread. Faster than
      // the two broadcasts below from 1.8 to 6.5 MiB per rank too (docs/runtime.md, "Backends").
      const int peer = 1 - rank_;
      copyIntoOwnSlot(input, output, n);
      // Two vectors: c10d may move the output counts into its work object.
      std::vector<int64_t> sendSplits(2, n), receiveSplits(2, n);
      sendSplits[rank_] = 0;
      receiveSplits[rank_] = 0;
      c10d::AllToAllOptions opts;
      opts.timeout = options().timeout;
      auto pending =
          std::make_unique<GlooPending>(std::vector<at::Tensor>{input, output}, options().timeout);
      at::Tensor in = borrowed(output, rank_ * n, n);
      at::Tensor out = borrowed(output, peer * n, n);
      pending->add(pg_->alltoall_base(out, in, receiveSplits, sendSplits, opts));
      return pending;
    }
    if (n >= kBroadcastBytes) {
      // Large: every rank broadcasts its bytes from its own slot of `output`, in place. No send
      // buffer, and Gloo's worker threads move the ranks' slots at the same time (measured on
      // loopback, 2 ranks, 6.5 MiB each: 14.1 ms a gather, against 16.3 ms for two concurrent
      // allgathers of half the bytes and 16.6 ms for one all-to-all).
      copyIntoOwnSlot(input, output, n);
      auto pending =
          std::make_unique<GlooPending>(std::vector<at::Tensor>{input, output}, options().timeout);
      for (int root = 0; root < size_; ++root) {
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        opts.timeout = options().timeout;
        std::vector<at::Tensor> slot{borrowed(output, root * n, n)};
        pending->add(pg_->broadcast(slot, opts));
      }
      return pending;
    }
    // Small: one all-to-all whose every send slot holds this rank's bytes. One collective (each
    // has a fixed cost that dominates below a MiB); the copies cost W * n bytes here, less than
    // allgather's two.
    at::Tensor send = detail::pooledEmptyCpu({n * size_}, at::kByte);
    auto* slots = static_cast<uint8_t*>(send.data_ptr());
    for (int r = 0; r < size_; ++r) std::memcpy(slots + r * n, input.data_ptr(), static_cast<size_t>(n));
    c10d::AllToAllOptions opts;
    opts.timeout = options().timeout;
    auto pending =
        std::make_unique<GlooPending>(std::vector<at::Tensor>{input, output, send}, options().timeout);
    at::Tensor in = borrowed(send, 0, n * size_);
    at::Tensor out = borrowed(output, 0, n * size_);
    std::vector<int64_t> equalSplits;  // empty: equal chunks
    pending->add(pg_->alltoall_base(out, in, equalSplits, equalSplits, opts));
    return pending;
  }

  std::unique_ptr<PendingCollective> allToAllBytesAsync(const at::Tensor& input, const at::Tensor& output) override {
    for (const at::Tensor* t : {&input, &output}) {
      if (!t->device().is_cpu()) unsupported("tensors on " + t->device().str() + " (it handles CPU tensors only)");
    }
    checkAllToAllArgs(input, output);
    c10d::AllToAllOptions opts;
    opts.timeout = options().timeout;
    auto pending = std::make_unique<GlooPending>(std::vector<at::Tensor>{input, output}, options().timeout);
    std::vector<int64_t> equalSplits;  // empty: equal chunks
    at::Tensor out = output;
    at::Tensor in = input;
    pending->add(pg_->alltoall_base(out, in, equalSplits, equalSplits, opts));
    return pending;
  }

  std::unique_ptr<PendingCollective> broadcastBytesAsync(const at::Tensor& buffer,
                                                         int root) override {
    checkBroadcastArgs(buffer, root);
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = options().timeout;
    auto pending = std::make_unique<GlooPending>(std::vector<at::Tensor>{buffer}, options().timeout);
    std::vector<at::Tensor> tensors{borrowed(buffer, 0, buffer.numel())};
    pending->add(pg_->broadcast(tensors, opts));
    return pending;
  }

 private:
  // The exchange and the broadcasts send from this rank's slot of `output`; the data paths pack
  // straight into it, so this copies only when a caller passed bytes from elsewhere.
  void copyIntoOwnSlot(const at::Tensor& input, const at::Tensor& output, int64_t n) const {
    uint8_t* own = static_cast<uint8_t*>(output.data_ptr()) + rank_ * n;
    if (own != input.data_ptr()) std::memcpy(own, input.data_ptr(), static_cast<size_t>(n));
  }

  int rank_;
  int size_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

}  // namespace

bool detail::glooBuilt() { return true; }

GlooBackendOptions GlooBackendOptions::forGroup(const BackendRendezvous& group) {
  GlooBackendOptions options;
  options.timeout = group.timeout;
  options.interfaces = detail::envList("GLOO_SOCKET_IFNAME");
  char buf[HOST_NAME_MAX + 1] = {0};
  if (!isLoopback(group.masterAddr) && ::gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] != '\0') {
    options.hostname = buf;
  }
  return options;
}

std::unique_ptr<CollectiveBackend> createGlooBackend(const BackendRendezvous& group, const c10::Device&,
                                                     const std::string& context) {
  FSDP_CHECK(group.store, ErrorKind::kInternal, context, ": no rendezvous store for world size ",
             group.world);
  try {
    return std::make_unique<GlooBackend>(group.store, group.rank, group.world,
                                         GlooBackendOptions::forGroup(group));
  } catch (const c10::Error& e) {
    detail::raise(
        detail::kindOr(e, ErrorKind::kBackend),
        c10::str(context, ": creating the gloo backend failed: ", e.what_without_backtrace()));
  }
}

}  // namespace runtime
}  // namespace fsdp_opt
