// CPU backend: c10d::ProcessGroupGloo underneath.
//
// This is the only translation unit that includes ProcessGroupGloo.hpp (and, through it, gloo's
// headers). On the torch 2.x wheel leg those gloo headers are Debian's (the wheel ships none);
// see docs/runtime.md ("Gloo on the PyPI wheel") for why that is safe: this file only uses
// c10d's exported functions and holds gloo objects through shared_ptr, never by value.
#include "collective_backend.h"

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
  GlooPending(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keepAlive,
              std::chrono::milliseconds timeout)
      : work_(std::move(work)), keepAlive_(std::move(keepAlive)), timeout_(timeout) {}

  void wait() override {
    if (!work_) return;
    auto work = std::move(work_);
    // Gloo enforces its own timeout on every operation; waiting with the same bound here
    // covers the time the work spends queued behind Gloo's worker threads.
    work->wait(timeout_);
    keepAlive_.clear();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keepAlive_;
  std::chrono::milliseconds timeout_;
};

class GlooBackend final : public CollectiveBackend {
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
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    outputs[0].reserve(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) outputs[0].push_back(output.narrow(0, r * n, n));
    c10d::AllgatherOptions opts;
    opts.timeout = options().timeout;
    auto work = pg_->allgather(outputs, inputs, opts);
    return std::make_unique<GlooPending>(std::move(work), std::vector<at::Tensor>{input, output},
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
