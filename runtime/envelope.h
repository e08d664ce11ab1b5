// Internal: the envelope, the collective of an agreed size that goes ahead of every collective
// the runtime issues at world size > 1 and carries its fingerprint (fingerprint.h).
// docs/runtime.md, "Collective fingerprints".
//
//   - Every rank sends the same number of bytes, chosen without asking anyone (EnvelopeSizer:
//     at least kEnvelopeBytes, more when the collectives every rank agreed on so far say a larger
//     payload comes next): a 64-byte header (sequence number, kind, unit hash, payload bytes,
//     layout hash, inline capacity) and, when the payload fits in the rest, the payload itself:
//     such a collective (fsdp::rank_any, a tiny unit, a gather that came round before) is then
//     one collective.
//   - After it, every rank has every rank's header and compares them with its own. All equal: the
//     payload's own collective (of payloadBytes, now known to be the same on every rank) may be
//     issued. Different: no payload moves; every rank raises one kDivergence error naming rank 0's
//     collective and the first differing rank's. A header holds hashes only, so the readable
//     descriptions go through the group's store (each rank sets its own under a key of its
//     sequence number and reads the other side's, with a short timeout), never a collective.
//   - Its size never depends on what a rank is doing, so ranks that diverge can neither crash Gloo
//     nor mix data: the payloads whose sizes could differ are only sent once the sizes agree.
//
// Issued under the collective order (collective_order.h): nothing of this process comes between
// an envelope and its payload's collective. Over which channel: the backend of the payload's device when it can carry the envelope itself
// (Gloo for CPU tensors; the device backend for fsdp::rank_any), else the host channel: the CPU
// backend, or, in builds without Gloo, the group's store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "collective_backend.h"
#include "fingerprint.h"
#include "process_group.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// The smallest envelope, and the payload it always has room for.
constexpr int64_t kEnvelopeBytes = fingerprint::EnvelopeSizer::kMinBytes;
constexpr int64_t kEnvelopeInlineBytes = kEnvelopeBytes - static_cast<int64_t>(fingerprint::kHeaderBytes);

/// One envelope: the constructor issues it, finish() waits for it and checks the fingerprints.
/// Its size is the same on every rank: fingerprint::EnvelopeSizer's, fed by every envelope's
/// finish() (at least kEnvelopeBytes; larger when the collectives that came before say a larger
/// payload comes next, so that it can ride inside).
class Envelope {
 public:
  /// Writes a collective's payload (identity.payloadBytes bytes) at its argument.
  using PayloadWriter = std::function<void(void* dst)>;

  /// Issues the envelope of the next collective (it takes the next sequence number) on
  /// `backend` for a payload on `device`. `inlinePayload`: the payload's bytes (a contiguous CPU
  /// uint8 tensor of identity.payloadBytes, at most kEnvelopeInlineBytes), which always fit,
  /// else undefined (the caller then sends the payload with a collective of its own after
  /// finish()).
  Envelope(std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
           const fingerprint::Identity& identity, const at::Tensor& inlinePayload);
  /// The same for a host payload of any size that the envelope carries whenever it fits
  /// (carriesPayload()): `write` then packs it straight into the envelope, with no copy of its
  /// own. When it does not fit, `write` is not called and the caller sends the payload after
  /// finish(), as above.
  Envelope(std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
           const fingerprint::Identity& identity, const PayloadWriter& write);
  ~Envelope();
  Envelope(const Envelope&) = delete;
  Envelope& operator=(const Envelope&) = delete;

  /// Waits for every rank's envelope, then raises kDivergence when any header differs from
  /// this rank's (see above). Failures of the collective itself are rethrown as they are (the
  /// caller adds its context). With an inline payload, copies every rank's payload, in rank
  /// order, to `inlineOut` (world * payloadBytes bytes on the CPU).
  void finish(void* inlineOut = nullptr);

  uint64_t sequence() const { return sequence_; }
  /// Whether the payload travels inside this envelope.
  bool carriesPayload() const { return inline_; }
  /// Bytes each rank sends: rank r's envelope is at r * bytes() of received().
  int64_t bytes() const { return bytes_; }
  /// Every rank's envelope, in rank order (CPU envelopes only); with carriesPayload(), rank r's
  /// payload starts at r * bytes() + fingerprint::kHeaderBytes. Its bytes are valid once
  /// finish() returned without raising; holding the tensor keeps them after the envelope is
  /// gone.
  const at::Tensor& received() const { return recv_; }

 private:
  void issue(const at::Tensor* inlinePayload, const PayloadWriter* write);

  fingerprint::Identity identity_;
  uint64_t sequence_ = 0;
  int rank_ = 0;
  int world_ = 1;
  GroupMembers members_;
  bool inline_ = false;
  int64_t bytes_ = kEnvelopeBytes;
  c10::Device device_;
  at::Tensor send_;
  at::Tensor recv_;
  std::shared_ptr<CollectiveBackend> backend_;
  std::unique_ptr<PendingCollective> pending_;
};

/// The envelope of a collective whose payload travels on a backend that cannot hold the envelope
/// up to the host (NCCL: reading its result would synchronise the host with the GPU), through
/// the host channel instead: the CPU backend, or the store where this build has no Gloo. Blocks
/// until every rank's header is in and checked, like Envelope::finish(). A group of 1: nothing.
/// `scope`: the ranks of the payload's collective.
void exchangeHostEnvelope(const fingerprint::Identity& identity, const std::string& context,
                          CollectiveGroup scope = CollectiveGroup::kWorld);

/// Raises the kDivergence error for `headers` (every group rank's, group-rank order; this
/// rank's is headers[rank]), fetching the two sides' descriptions through the store under the
/// group's tag and naming them by their global ranks. `mine` is this rank's identity,
/// `sequence` its number.
[[noreturn]] void raiseDivergence(const std::vector<fingerprint::Header>& headers, int rank,
                                  const GroupMembers& members, const fingerprint::Identity& mine,
                                  uint64_t sequence);

/// Whether this build has the Gloo backend (gloo_backend.cpp; false in gloo_backend_stub.cpp).
bool glooBuilt();

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
