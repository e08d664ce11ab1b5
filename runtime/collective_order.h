// Internal: the order in which this process issues collectives, and payload collectives issued
// later, once their fingerprint envelope has cleared (envelope.h).
//
// Every collective goes out behind its envelope, and a payload's collective may only be issued
// once every rank's envelope said it is the same collective. For fsdp::all_gather, which waits
// anyway, the caller waits for the envelope and issues the payload itself. fsdp::all_gather_start
// must not wait for its peers (docs/runtime.md, "The split form"), so the payload's collective is
// handed to the runtime's issuer thread: it waits for the envelope and issues the payload as soon
// as the envelope cleared, while the caller computes; all_gather_wait takes the result.
//
// Gloo (like NCCL) pairs collectives across ranks by the order each rank issues them, so a
// deferred payload must go out before any later collective of this process: lockCollectiveOrder()
// waits until every deferred payload is issued (or failed), then holds the order until the caller
// has issued its envelope and, where it does so itself, its payload.
//
// The issuer thread also checks the envelopes of started gathers whose payload rides inside (it
// has nothing to issue for them), so that, when lockCollectiveOrder() returns, every earlier
// envelope of this process has been checked. That is what makes a divergence surface at the
// first differing collective on every rank: a rank that started a gather and then issues
// another collective must not send the second envelope past a mismatch in the first, or its
// peer, which raised at the first, would leave it waiting for the timeout. If the issuer found
// a failure nobody has taken yet (the start's wait comes later), lockCollectiveOrder() raises it.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "collective_backend.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

class Envelope;

/// The order lock: returned once no deferred payload is waiting to be issued and every earlier
/// envelope was checked. Raises the failure of an earlier started gather's envelope or payload
/// that its wait has not raised yet (kind divergence as it is; other kinds saying whose it was).
std::unique_lock<std::mutex> lockCollectiveOrder();

/// A payload collective handed to the issuer thread.
class DeferredCollective {
 public:
  /// Blocks until the issuer thread issued the payload (returns it, to wait for) or gave up
  /// (rethrows why: the envelope failed, or the fingerprints differ). Once only.
  std::unique_ptr<PendingCollective> take();

  void issued(std::unique_ptr<PendingCollective> pending);
  void failed(std::exception_ptr error);
  /// The failure, once, unless take() already raised it.
  std::exception_ptr claimUnreportedError();

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  bool reported_ = false;
  std::exception_ptr error_;
  std::unique_ptr<PendingCollective> pending_;
};

/// Queues `envelope` to be finished on the issuer thread (Envelope::finish(inlineOut): every
/// rank's inline payload lands at `inlineOut`), then, if it matched, `issue` to run there under
/// the collective order; `issue` may return null (nothing to issue: the payload was inline) and
/// must keep alive whatever the envelope writes to. Call it holding `order` (the lock the
/// envelope was issued under), which it keeps. Later lockCollectiveOrder() calls wait until
/// both have run.
std::shared_ptr<DeferredCollective> issueAfter(
    std::unique_lock<std::mutex>& order, std::unique_ptr<Envelope> envelope, void* inlineOut,
    std::function<std::unique_ptr<PendingCollective>()> issue);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
