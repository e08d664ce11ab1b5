// fsdp::rank_any: the ranks agree on whether any of them has its flag set.
//
// rank-uniform-control-flow (passes/) makes every rank run a data-dependent loop while ANY
// rank continues: before the loop the ranks agree on whether any enters, and at the end of
// each iteration on whether any goes on. Each agreement is one all-gather through the backend of
// `like`'s device (a parameter of a unit the loop gathers, so a CUDA job agrees over NCCL and a
// CPU job over Gloo, the same on every rank): the fingerprint envelope (envelope.h, 512 bytes
// per rank or more) with the 8-byte flag inside. At world size 1 there is nothing to exchange.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "agreement.h"
#include "collective_order.h"
#include "envelope.h"
#include "errors.h"
#include "process_group.h"
#include "unshard_state.h"

namespace fsdp_opt {
namespace runtime {
namespace {

// Every rank's value, in rank order. The value rides in the collective's envelope
// (envelope.h): one collective that also checks every rank is at the same collective, so a rank
// that agrees while another gathers fails with the fingerprint error instead of pairing an
// agreement with a gather.
std::vector<int64_t> exchange(int64_t value, const at::Tensor& like, const char* op) {
  detail::countAgreement();
  detail::GroupInfo group = detail::ensureGroup();
  if (group.world == 1) return {value};
  auto backend = detail::backendFor(like.device(), op);
  fingerprint::Identity identity;
  identity.kind = fingerprint::Kind::kAgreement;
  identity.unit = op;
  identity.payloadBytes = sizeof(value);
  identity.numTensors = 1;
  identity.layoutHash = fingerprint::LayoutHash().add(op).add(identity.payloadBytes).value();
  identity.dtypes = "int64";
  at::Tensor mine = at::empty({static_cast<int64_t>(sizeof(value))}, at::kByte);
  std::memcpy(mine.data_ptr(), &value, sizeof(value));
  std::vector<int64_t> values(group.world);
  try {
    std::unique_lock<std::mutex> order = detail::lockCollectiveOrder();
    detail::Envelope envelope(backend, like.device(), identity, mine);
    envelope.finish(values.data());
  } catch (const std::exception& e) {
    const ErrorKind kind = detail::kindOr(e, ErrorKind::kPeerLost);
    if (kind == ErrorKind::kDivergence) {
      detail::raise(kind, c10::str(op, ": ", detail::describeException(e)));
    }
    detail::raise(kind, c10::str(op, ": agreement on backend ", backend->name(), " failed on rank ",
                                 group.rank, " of ", group.world,
                                 "; a peer may have died or runs a different program: ",
                                 detail::describeException(e)));
  }
  return values;
}

}  // namespace

namespace detail {

bool rankAny(bool flag, const at::Tensor& like) {
  auto flags = exchange(flag ? 1 : 0, like, "fsdp::rank_any");
  return std::any_of(flags.begin(), flags.end(), [](int64_t f) { return f != 0; });
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
