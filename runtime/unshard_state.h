// Internal: the unshard/reshard engine behind fsdp::all_gather, fsdp::all_gather_start /
// fsdp::all_gather_wait, fsdp::reshard and fsdp::release_all (storage swap, per-TensorImpl
// registry, reference counts, in-flight handles). The data movement itself is the device path's
// (data_path.h); the counters are stats.h's.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// fsdp::all_gather: unshards `params` (ONE collective for those not gathered yet) and returns
/// them. With `paramDtype`, floating-point parameters are gathered in that dtype.
std::vector<at::Tensor> allGather(const std::vector<at::Tensor>& params,
                                  const std::vector<int64_t>& fullRows, const std::string& unit,
                                  std::optional<at::ScalarType> paramDtype);
/// fsdp::all_gather_start: validates and issues the collective without waiting for it; returns
/// the handle that allGatherWait takes.
int64_t allGatherStart(const std::vector<at::Tensor>& params,
                       const std::vector<int64_t>& fullRows, const std::string& unit,
                       std::optional<at::ScalarType> paramDtype);
/// fsdp::all_gather_wait: completes a started gather; afterwards everything is as if
/// allGather(...) had been called with the start's arguments.
std::vector<at::Tensor> allGatherWait(int64_t handle);
/// fsdp::reshard. Raises bad-input, after resharding, when a parameter was changed while
/// gathered: written in place (its version moved) or given other storage; with `compareRows`
/// (an unshard scope's end, where Python or C++ may write through `.data`), also when this
/// rank's rows no longer equal its shard.
void reshard(const std::vector<at::Tensor>& params, const std::string& unit, bool compareRows = false);
/// The full bytes (in the gathered dtype) a gather of `params` would unshard now: those not
/// gathered yet, each once. Validates like a gather, moves nothing (unsharded_scope.cpp).
int64_t bytesToGather(const std::vector<at::Tensor>& params, const std::vector<int64_t>& fullRows,
                      std::optional<at::ScalarType> paramDtype);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
