// TorchScript op registrations of the `fsdp` namespace (docs/design.md, "Ops").
//
// Every op is CONSERVATIVE: they mutate module state the schema language cannot name
// (parameters reached through prim::GetAttr), so TorchScript must neither eliminate them nor
// move parameter reads across them.
#include <torch/library.h>

#include <ATen/core/Dict.h>

#include "fsdp_opt/runtime.h"
#include "gather.h"
#include "process_group.h"

namespace {

using fsdp_opt::runtime::detail::allGather;

std::vector<at::Tensor> allGatherOp(std::vector<at::Tensor> params, std::vector<int64_t> fullRows,
                                    std::string unit) {
  return allGather(params, fullRows, unit);
}

void reshardOp(std::vector<at::Tensor> params, std::string unit) {
  fsdp_opt::runtime::detail::reshard(params, unit);
}

void checkRankOp(int64_t rank, int64_t worldSize, std::string manifestSha256) {
  fsdp_opt::runtime::detail::checkRank(rank, worldSize, manifestSha256);
}

void releaseAllOp() { fsdp_opt::runtime::releaseAll(); }

c10::Dict<std::string, int64_t> statsOp() {
  c10::Dict<std::string, int64_t> out;
  for (const auto& kv : fsdp_opt::runtime::stats().items()) out.insert(kv.first, kv.second);
  return out;
}

void resetStatsOp() { fsdp_opt::runtime::resetStats(); }

void initProcessGroupOp(int64_t rank, int64_t worldSize, std::string masterAddr,
                        int64_t masterPort) {
  TORCH_CHECK(rank >= 0 && rank <= INT32_MAX && worldSize >= 1 && worldSize <= INT32_MAX &&
                  masterPort >= 0 && masterPort <= 65535,
              "fsdp::init_process_group: bad arguments rank=", rank, " world_size=", worldSize,
              " master_port=", masterPort);
  fsdp_opt::runtime::initProcessGroup(static_cast<int>(rank), static_cast<int>(worldSize),
                                      masterAddr, static_cast<int>(masterPort));
}

void destroyProcessGroupOp() { fsdp_opt::runtime::destroyProcessGroup(); }

constexpr auto kConservative = c10::AliasAnalysisKind::CONSERVATIVE;

}  // namespace

TORCH_LIBRARY(fsdp, m) {
  m.def(torch::schema("all_gather(Tensor[] params, int[] full_rows, str unit) -> Tensor[]",
                      kConservative),
        allGatherOp);
  m.def(torch::schema("reshard(Tensor[] params, str unit) -> ()", kConservative), reshardOp);
  m.def(torch::schema("check_rank(int rank, int world_size, str manifest_sha256) -> ()",
                      kConservative),
        checkRankOp);
  m.def(torch::schema("release_all() -> ()", kConservative), releaseAllOp);
  m.def(torch::schema("stats() -> Dict(str, int)", kConservative), statsOp);
  m.def(torch::schema("reset_stats() -> ()", kConservative), resetStatsOp);
  m.def(torch::schema("init_process_group(int rank, int world_size, str master_addr, "
                      "int master_port) -> ()",
                      kConservative),
        initProcessGroupOp);
  m.def(torch::schema("destroy_process_group() -> ()", kConservative), destroyProcessGroupOp);
}
