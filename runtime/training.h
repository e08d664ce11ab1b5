// Training's part of the runtime (training.cpp; docs/design.md, "Training"): what the fsdp::
// ops and the unshard engine call into: backward re-gathers, prefetch and the hooks that decide
// when gradients are reduced (how: gradient_reduction.h);
// the engine (unshard_state.h) only unshards.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// fsdp::backward_hook, after a unit's call in grad mode: backward gathers the unit again at
/// the call's outputs and reduces its gradients. A no-op outside grad mode.
void backwardHook(std::vector<at::Tensor> params, std::vector<int64_t> fullRows, std::string unit,
                  c10::IValue outputs, c10::IValue inputs, int64_t maxUnshardedBytes);
/// fsdp::replicated_params, in an entry method's prologue: the gradients of parameters no unit
/// shards are averaged over the ranks in backward. A no-op outside grad mode and at W = 1.
void replicatedParams(std::vector<at::Tensor> params);
/// After a backward that raised: lets go of what it gathered, waits for the gathers it started
/// ahead, and gives the parameters back the .grad they had. A no-op otherwise.
void finishAbandonedBackward();
/// Every entry method starts here (check_rank): finishAbandonedBackward(), and a new forward for
/// backward prefetch, which starts gathers only of calls of the forward that made the call it
/// gathers (an older forward's graph kept alive is not part of this backward, and which graphs
/// a rank keeps may depend on its data).
void startEntryCall();
/// A gather in grad mode (ops.cpp, before the gather): records whether `params` are gathered
/// cast to a param dtype, so that a backward through them raises a clear error instead of
/// running on what forward saved in another dtype (training with --param-dtype is not
/// supported; docs/design.md "Training").
void noteGatherDtype(const std::vector<at::Tensor>& params, std::optional<at::ScalarType> paramDtype);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
