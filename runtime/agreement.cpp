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
#include "collective.h"
#include "errors.h"
#include "process_group.h"
#include "stats.h"

namespace fsdp_opt {
namespace runtime {
namespace {

// Every rank's value, in rank order. The value rides in the collective's envelope
// (envelope.h): one collective that also checks every rank is at the same collective, so a rank
// that agrees while another gathers fails with the fingerprint error instead of pairing an
// agreement with a gather.
std::vector<int64_t> exchange(int64_t value, const at::Tensor& like, const char* op) {
  detail::updateStats([](Stats& s) { s.agreements += 1; });
  detail::RankInfo group = detail::ensureGroup();
  if (group.world == 1) return {value};
  auto backend = detail::backendFor(like.device(), op);
  detail::CollectiveSpec spec;
  spec.identity.kind = fingerprint::Kind::kAgreement;
  spec.identity.unit = op;
  spec.identity.payloadBytes = sizeof(value);
  spec.identity.numTensors = 1;
  spec.identity.layoutHash = fingerprint::LayoutHash().add(op).add(spec.identity.payloadBytes).value();
  spec.identity.dtypes = "int64";
  at::Tensor mine = at::empty({static_cast<int64_t>(sizeof(value))}, at::kByte);
  std::memcpy(mine.data_ptr(), &value, sizeof(value));
  std::vector<int64_t> values(group.world);
  spec.device = like.device();
  spec.backend = backend;
  spec.channel = detail::EnvelopeChannel::kPayloadBackend;  // the flag rides inside
  spec.context = op;
  spec.failed = c10::str(op, ": agreement");
  detail::runCollective(spec, nullptr, mine, values.data());
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
