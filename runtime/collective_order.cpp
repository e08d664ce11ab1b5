// The collective order lock and the issuer thread. See collective_order.h.
#include "collective_order.h"

#include <deque>
#include <thread>
#include <utility>

#include "envelope.h"
#include "errors.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

struct Item {
  std::unique_ptr<Envelope> envelope;
  void* inlineOut = nullptr;
  std::function<std::unique_ptr<PendingCollective>()> issue;
  std::shared_ptr<DeferredCollective> result;
};

// One mutex for the order and the queue: the issuer thread pops an item only after issuing its
// payload under that same mutex, so "the queue is empty" means "every deferred payload is out".
struct Order {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Item> queue;
  bool threadStarted = false;
  // The last item that failed: its failure is raised by the next collective of the process if
  // the start's wait has not raised it first.
  std::shared_ptr<DeferredCollective> lastFailed;
};

// Leaked, like the process group: the issuer thread may be blocked in a wait at exit.
Order& order() {
  static Order* o = new Order();
  return *o;
}

void issuerLoop() {
  Order& o = order();
  for (;;) {
    Envelope* envelope = nullptr;
    void* inlineOut = nullptr;
    {
      std::unique_lock<std::mutex> lock(o.mutex);
      o.changed.wait(lock, [&] { return !o.queue.empty(); });
      envelope = o.queue.front().envelope.get();
      inlineOut = o.queue.front().inlineOut;
    }
    // Outside the lock: waiting for the peers' envelopes (bounded by the timeout). The item stays
    // queued meanwhile, so no later collective of this process overtakes its payload.
    std::exception_ptr error;
    try {
      envelope->finish(inlineOut);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(o.mutex);
    Item item = std::move(o.queue.front());
    o.queue.pop_front();
    if (!error) {
      try {
        item.result->issued(item.issue ? item.issue() : nullptr);
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      item.result->failed(error);
      o.lastFailed = item.result;
    }
    item.envelope.reset();
    o.changed.notify_all();
  }
}

}  // namespace

std::unique_lock<std::mutex> lockCollectiveOrder() {
  Order& o = order();
  std::unique_lock<std::mutex> lock(o.mutex);
  o.changed.wait(lock, [&] { return o.queue.empty(); });
  if (o.lastFailed) {
    const std::shared_ptr<DeferredCollective> failed = std::move(o.lastFailed);
    if (std::exception_ptr error = failed->claimUnreportedError()) {
      lock.unlock();
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        const ErrorKind kind = kindOr(e, ErrorKind::kInternal);
        if (kind == ErrorKind::kDivergence) throw;
        raise(kind, c10::str("the collective of an earlier fsdp::all_gather_start, not waited yet, "
                             "failed: ", describeException(e)));
      }
    }
  }
  return lock;
}

std::unique_ptr<PendingCollective> DeferredCollective::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_; });
  if (error_) {
    reported_ = true;
    std::rethrow_exception(error_);
  }
  return std::move(pending_);
}

std::exception_ptr DeferredCollective::claimUnreportedError() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!finished_ || !error_ || reported_) return nullptr;
  reported_ = true;
  return error_;
}

void DeferredCollective::issued(std::unique_ptr<PendingCollective> pending) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_ = std::move(pending);
  finished_ = true;
  done_.notify_all();
}

void DeferredCollective::failed(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = std::move(error);
  finished_ = true;
  done_.notify_all();
}

std::shared_ptr<DeferredCollective> issueAfter(
    std::unique_lock<std::mutex>& lock, std::unique_ptr<Envelope> envelope, void* inlineOut,
    std::function<std::unique_ptr<PendingCollective>()> issue) {
  Order& o = order();
  auto result = std::make_shared<DeferredCollective>();
  o.queue.push_back(Item{std::move(envelope), inlineOut, std::move(issue), result});
  if (!o.threadStarted) {
    std::thread(issuerLoop).detach();
    o.threadStarted = true;
  }
  o.changed.notify_all();
  (void)lock;  // held by the caller: the queue is guarded by the order's mutex
  return result;
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
