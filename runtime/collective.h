// Internal: the one way the runtime issues a collective at world size > 1. Every collective goes
// out behind its fingerprint envelope (envelope.h) under the collective order
// (collective_order.h), and every failure of one reads the same way; this file owns the three:
// a caller describes its collective (CollectiveSpec) and hands over the payload's issue, and
// cannot skip the fingerprint, take the order in another way or word the failure itself.
//
//   runCollective     envelope, payload, wait: agreements, broadcasts, gradient reductions.
//   openCollective    the host gather's start (data_path.cpp): the envelope is issued and the
//                     order held, the caller finishes it or hands both to the issuer thread.
//   announceOnHost    the device gather's start (cuda/): the envelope through the host channel,
//                     the order held while the caller queues the device's collective.
//   raiseCollectiveFailure   the error text of all of them, also for a payload that fails later.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "collective_backend.h"
#include "envelope.h"
#include "fingerprint.h"
#include "process_group.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// Whom a failed collective's message points at.
enum class Blame {
  // "... failed on rank R of W; a peer may have died or runs a different program: CAUSE"
  // (kind: the cause's, else peer lost). Every collective but backward's.
  kPeer,
  // "... failed (did every rank call backward()?): CAUSE" (kind: the cause's, else backend):
  // a collective every rank issues only when it runs backward.
  kBackward,
};

/// Where the envelope goes.
enum class EnvelopeChannel {
  // CPU payloads: the payload's backend (Gloo); device payloads: the host channel, since reading
  // a device envelope would synchronise the host with the device.
  kByDevice,
  // Always the payload's backend: a payload that rides inside the envelope (fsdp::rank_any).
  kPayloadBackend,
};

/// A collective as its fingerprint and its error messages describe it.
struct CollectiveSpec {
  fingerprint::Identity identity;
  CollectiveGroup scope = CollectiveGroup::kWorld;
  c10::Device device = c10::Device(c10::kCPU);  // the payload's
  std::shared_ptr<CollectiveBackend> backend;   // the payload's
  EnvelopeChannel channel = EnvelopeChannel::kByDevice;
  /// Leads every message: "fsdp::rank_any", "backward of unit 'a.b'". A fingerprint mismatch
  /// reads "CONTEXT: <the mismatch>".
  std::string context;
  /// What failed, as the message starts: "CONTEXT: all-gather of 3 parameters (96 bytes per
  /// rank)"; the backend, the rank and the blame follow.
  std::string failed;
  Blame blame = Blame::kPeer;
};

/// Issues the payload's collective once the envelope cleared; runs under the collective order.
/// May return null (nothing to send: the payload rode in the envelope).
using IssuePayload = std::function<std::unique_ptr<PendingCollective>()>;

/// The envelope, then `issue` under the same order, then waits for the payload. `inlinePayload`
/// (optional, at most kEnvelopeInlineBytes): bytes that ride in the envelope; every rank's lands
/// at `inlineOut`, in group-rank order. Raises raiseCollectiveFailure's error.
void runCollective(const CollectiveSpec& spec, const IssuePayload& issue,
                   const at::Tensor& inlinePayload = at::Tensor(), void* inlineOut = nullptr);

/// A started host collective: the order held and its envelope issued.
struct OpenedCollective {
  std::unique_lock<std::mutex> order;
  std::unique_ptr<Envelope> envelope;
};

/// Takes the order and issues the envelope on the payload's backend, the payload packed into it
/// by `write` when it fits (Envelope::carriesPayload). The caller finishes the envelope and
/// issues the payload itself, or hands both to the issuer thread (issueAfter); either way its
/// failures go through raiseCollectiveFailure(spec, ...).
OpenedCollective openCollective(const CollectiveSpec& spec, const Envelope::PayloadWriter& write);

/// Takes the order and exchanges the envelope through the host channel (exchangeHostEnvelope);
/// returns the order, held, for the caller to queue the device's collective under it.
std::unique_lock<std::mutex> announceOnHost(const CollectiveSpec& spec);

/// Raises the error of `spec`'s collective failing with `cause` on `backendName` (empty: the
/// spec's backend). A fingerprint mismatch is not a failure of the collective: it keeps its
/// own text after the context.
[[noreturn]] void raiseCollectiveFailure(const CollectiveSpec& spec, const std::exception& cause,
                                         const std::string& backendName = std::string());

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
