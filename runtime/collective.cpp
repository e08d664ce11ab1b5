// The one way to issue a collective: envelope, order and failure text. See collective.h.
#include "collective.h"

#include <c10/util/StringUtil.h>

#include "collective_order.h"
#include "errors.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

void raiseCollectiveFailure(const CollectiveSpec& spec, const std::exception& cause, const std::string& backendName) {
  const std::string backend = !backendName.empty() ? backendName : spec.backend ? spec.backend->name() : "?";
  if (kindOr(cause, ErrorKind::kNone) == ErrorKind::kDivergence) {
    raise(ErrorKind::kDivergence, c10::str(spec.context, ": ", describeException(cause)));
  }
  if (spec.blame == Blame::kBackward) {
    raise(kindOr(cause, ErrorKind::kBackend),
          c10::str(spec.failed, " on backend ", backend, " failed (did every rank call backward()?): ",
                   describeException(cause)));
  }
  const RankInfo group = groupOf(spec.scope);
  raise(kindOr(cause, ErrorKind::kPeerLost),
        c10::str(spec.failed, " on backend ", backend, " failed on rank ", group.rank, " of ", group.world,
                 "; a peer may have died or runs a different program: ", describeException(cause)));
}

void runCollective(const CollectiveSpec& spec, const IssuePayload& issue, const at::Tensor& inlinePayload,
                   void* inlineOut) {
  std::unique_ptr<PendingCollective> pending;
  try {
    std::unique_lock<std::mutex> order = lockCollectiveOrder();  // raises an earlier start's failure
    if (spec.device.is_cpu() || spec.channel == EnvelopeChannel::kPayloadBackend) {
      Envelope envelope(spec.backend, spec.device, spec.identity, inlinePayload);
      envelope.finish(inlineOut);
    } else {
      exchangeHostEnvelope(spec.identity, spec.context, spec.scope);
    }
    if (issue) pending = issue();
  } catch (const std::exception& e) {
    raiseCollectiveFailure(spec, e);
  }
  if (!pending) return;
  try {
    pending->wait();  // outside the order: a later collective of this process may go out meanwhile
  } catch (const std::exception& e) {
    raiseCollectiveFailure(spec, e);
  }
}

OpenedCollective openCollective(const CollectiveSpec& spec, const Envelope::PayloadWriter& write) {
  OpenedCollective opened;
  try {
    opened.order = lockCollectiveOrder();
    opened.envelope = std::make_unique<Envelope>(spec.backend, spec.device, spec.identity, write);
  } catch (const std::exception& e) {
    raiseCollectiveFailure(spec, e);
  }
  return opened;
}

std::unique_lock<std::mutex> announceOnHost(const CollectiveSpec& spec) {
  std::unique_lock<std::mutex> order;
  try {
    order = lockCollectiveOrder();
    exchangeHostEnvelope(spec.identity, spec.context, spec.scope);
  } catch (const std::exception& e) {
    raiseCollectiveFailure(spec, e, glooBuilt() ? "gloo (fingerprint envelope)" : "store (fingerprint envelope)");
  }
  return order;
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
