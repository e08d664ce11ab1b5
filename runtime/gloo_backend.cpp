// CPU backend: c10d::ProcessGroupGloo underneath.
//
// This is the only translation unit that includes ProcessGroupGloo.hpp (and, through it, gloo's
// headers). On the torch 2.x wheel leg those gloo headers are Debian's (the wheel ships none);
// see docs/runtime.md ("Gloo on the PyPI wheel") for why that is safe: this file only uses
// c10d's exported functions and holds gloo objects through shared_ptr, never by value.
#include "collective_backend.h"

#include <algorithm>
#include <exception>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {
namespace {

std::string describe(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

class GlooPending final : public PendingCollective {
 public:
  GlooPending(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::vector<at::Tensor> keepAlive,
              std::chrono::milliseconds timeout)
      : works_(std::move(works)), keepAlive_(std::move(keepAlive)), timeout_(timeout) {}

  void wait() override {
    if (works_.empty()) return;
    auto works = std::move(works_);
    works_.clear();
    // Gloo enforces its own timeout on every operation; waiting with the same bound here
    // covers the time the work spends queued behind Gloo's worker threads. Every piece is
    // waited for, even after one fails: the buffers must outlive all of them.
    std::exception_ptr first;
    for (auto& work : works) {
      try {
        work->wait(timeout_);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    keepAlive_.clear();
    if (first) std::rethrow_exception(first);
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<at::Tensor> keepAlive_;
  std::chrono::milliseconds timeout_;
};

class GlooBackend final : public CollectiveBackend {
  static constexpr int64_t kSplitBytes = int64_t(1) << 20;

 public:
  GlooBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              const GlooBackendOptions& options)
      : CollectiveBackend(options), rank_(rank), size_(size), threads_(std::max(1, options.threads)) {
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
      TORCH_CHECK(false, "gloo cannot use ", where, ": ", describe(e));
    }
    pgOptions->threads = options.threads;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdp_opt/gloo/", store);
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, pgOptions);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "gloo rendezvous of rank ", rank, " of ", size, " failed within ",
                  options.timeout.count() / 1000.0,
                  " s; a peer may have died or not started: ", describe(e));
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
    // A large gather goes out as one allgather per Gloo worker thread, each over its own slice
    // of every rank's bytes, so that the threads move bytes at the same time. Measured on
    // loopback (2 ranks, 6.5 MiB per rank, raw torch.distributed Gloo): 12.9 ms as one
    // collective, 8.5 ms as two concurrent halves. Small ones stay whole: each collective has a
    // fixed cost.
    const int64_t pieces = n >= kSplitBytes ? threads_ : 1;
    const int64_t piece = (n + pieces - 1) / pieces;
    c10d::AllgatherOptions opts;
    opts.timeout = options().timeout;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int64_t begin = 0; begin < n; begin += piece) {
      const int64_t len = std::min(piece, n - begin);
      std::vector<at::Tensor> inputs{input.narrow(0, begin, len)};
      std::vector<std::vector<at::Tensor>> outputs(1);
      outputs[0].reserve(static_cast<size_t>(size_));
      for (int r = 0; r < size_; ++r) outputs[0].push_back(output.narrow(0, r * n + begin, len));
      works.push_back(pg_->allgather(outputs, inputs, opts));
    }
    return std::make_unique<GlooPending>(std::move(works), std::vector<at::Tensor>{input, output},
                                         options().timeout);
  }

  void barrier() override {
    c10d::BarrierOptions opts;
    opts.timeout = options().timeout;
    pg_->barrier(opts)->wait(options().timeout);
  }

 private:
  int rank_;
  int size_;
  int threads_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> makeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size,
                                                   const GlooBackendOptions& options) {
  return std::make_unique<GlooBackend>(store, rank, size, options);
}

}  // namespace runtime
}  // namespace fsdp_opt
