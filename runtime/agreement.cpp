// fsdp::rank_any: the ranks agree on whether any of them has its flag set.
//
// rank-uniform-control-flow (passes/) makes every rank run a data-dependent loop while ANY
// rank continues: before the loop the ranks agree on whether any enters, and at the end of
// each iteration on whether any goes on. Each agreement is one all-gather of 8 bytes per rank
// through the backend of `like`'s device (a parameter of a unit the loop gathers, so a CUDA job
// agrees over NCCL and a CPU job over Gloo, the same on every rank); at world size 1 there is
// nothing to exchange.
#include <torch/library.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "unshard_state.h"
#include "process_group.h"

namespace fsdp_opt {
namespace runtime {
namespace {

// Every rank's value, in rank order.
std::vector<int64_t> exchange(int64_t value, const at::Tensor& like, const char* op) {
  detail::countAgreement();
  detail::GroupInfo group = detail::ensureGroup();
  if (group.world == 1) return {value};
  auto backend = detail::backendFor(like.device(), op);
  at::Tensor mine = at::empty({static_cast<int64_t>(sizeof(value))}, at::kByte);
  std::memcpy(mine.data_ptr(), &value, sizeof(value));
  at::Tensor input = mine.to(like.device());
  at::Tensor output = at::empty({group.world * static_cast<int64_t>(sizeof(value))},
                                at::TensorOptions().dtype(at::kByte).device(like.device()));
  backend->allGatherBytesAsync(input, output)->wait();
  at::Tensor all = output.cpu();
  std::vector<int64_t> values(group.world);
  std::memcpy(values.data(), all.data_ptr(), values.size() * sizeof(value));
  return values;
}

bool rankAnyOp(bool flag, at::Tensor like) {
  auto flags = exchange(flag ? 1 : 0, like, "fsdp::rank_any");
  return std::any_of(flags.begin(), flags.end(), [](int64_t f) { return f != 0; });
}

}  // namespace
}  // namespace runtime
}  // namespace fsdp_opt

TORCH_LIBRARY_FRAGMENT(fsdp, m) {
  // CONSERVATIVE like every fsdp:: op: a collective must never be moved or eliminated.
  constexpr auto kConservative = c10::AliasAnalysisKind::CONSERVATIVE;
  m.def(torch::schema("rank_any(bool flag, Tensor like) -> bool", kConservative), fsdp_opt::runtime::rankAnyOp);
}
