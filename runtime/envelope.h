// Internal: the envelope, the fixed-size collective that goes ahead of every collective the
// runtime issues at world size > 1 and carries its fingerprint (fingerprint.h). docs/runtime.md,
// "Collective fingerprints".
//
//   - Every rank sends kEnvelopeBytes: a 64-byte header (sequence number, kind, unit hash, payload
//     bytes, layout hash) and, when the payload fits in the rest (kEnvelopeInlineBytes), the
//     payload itself: such a collective (fsdp::rank_any, a tiny unit) is then one collective.
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
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "collective_backend.h"
#include "fingerprint.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

constexpr int64_t kEnvelopeBytes = 512;
constexpr int64_t kEnvelopeInlineBytes = kEnvelopeBytes - static_cast<int64_t>(fingerprint::kHeaderBytes);

/// One envelope: start() issues it, finish() waits for it and checks the fingerprints.
class Envelope {
 public:
  /// Issues the envelope of the next collective (it takes the next sequence number) on
  /// `backend` for a payload on `device`. `inlinePayload`: the payload's bytes (a contiguous CPU
  /// uint8 tensor of identity.payloadBytes) when they fit in the envelope, else undefined (the
  /// caller then sends them with a collective of its own after finish()).
  Envelope(std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
           const fingerprint::Identity& identity, const at::Tensor& inlinePayload);
  ~Envelope();
  Envelope(const Envelope&) = delete;
  Envelope& operator=(const Envelope&) = delete;

  /// Waits for every rank's envelope, then raises kDivergence when any header differs from
  /// this rank's (see above). Failures of the collective itself are rethrown as they are (the
  /// caller adds its context). With an inline payload, copies every rank's payload, in rank
  /// order, to `inlineOut` (world * payloadBytes bytes on the CPU).
  void finish(void* inlineOut = nullptr);

  uint64_t sequence() const { return sequence_; }

 private:
  fingerprint::Identity identity_;
  uint64_t sequence_ = 0;
  int rank_ = 0;
  int world_ = 1;
  bool inline_ = false;
  c10::Device device_;
  at::Tensor send_;
  at::Tensor recv_;
  std::shared_ptr<CollectiveBackend> backend_;
  std::unique_ptr<PendingCollective> pending_;
};

/// The envelope of a collective whose payload travels on a backend that cannot hold the envelope
/// up to the host (NCCL: reading its result would synchronise the host with the GPU), through
/// the host channel instead: the CPU backend, or the store where this build has no Gloo. Blocks
/// until every rank's header is in and checked, like Envelope::finish(). World size 1: nothing.
void exchangeHostEnvelope(const fingerprint::Identity& identity, const std::string& context);

/// Raises the kDivergence error for `headers` (every rank's, rank order; this rank's is
/// headers[rank]), fetching the two sides' descriptions through the store. `mine` is this
/// rank's identity, `sequence` its number.
[[noreturn]] void raiseDivergence(const std::vector<fingerprint::Header>& headers, int rank,
                                  const fingerprint::Identity& mine, uint64_t sequence);

/// Whether this build has the Gloo backend (gloo_backend.cpp; false in gloo_backend_stub.cpp).
bool glooBuilt();

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
