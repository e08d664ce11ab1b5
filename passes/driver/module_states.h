// Ranks that start from different weights (SPEC section 11, issue 11 item 5): in-process
// sharding (shardForRank, fsdp_opt.transform(rank=r)) keeps each rank's rows of that rank's own
// module, so ranks that built the model without a common seed would silently run a mix of
// several models. Before sharding, every rank hashes its parameters and buffers (SHA-256 of each
// tensor's bytes, with its name, dtype and shape) and compares them with every other rank's,
// through the process group's store (no collective). A difference is an error naming the first
// differing tensor, or, with ModuleStates::kSyncFromRank0 (FSDP1's sync_module_states=True), the
// tensors that differ are broadcast from rank 0 (fsdp_opt::runtime::broadcastBytes) and the
// module holds rank 0's values; tensors already equal cost nothing but their hash.
//
// It lives here, under shardForRank, rather than in the Python package, so the C++ API
// (include/fsdp_opt/fsdp_opt.h) gets the same check. docs/runtime.md, "Ranks that start from
// different weights".
#pragma once

#include <fsdp_opt/fsdp_opt.h>

#include <torch/csrc/jit/api/module.h>

#include <unordered_map>

namespace fsdp_opt {

/// Rank 0's values for the tensors that differed (a fresh tensor per TensorImpl of `module`).
using StateReplacements = std::unordered_map<const c10::TensorImpl*, at::Tensor>;

/// Checks (or, with kSyncFromRank0, makes) the parameters and buffers of `module` equal on every
/// rank of the runtime's process group. Does nothing when the process group is not the job
/// `rank` of `worldSize` belongs to (a single process inspecting a rank's shards); kSyncFromRank0
/// then is an error. Throws std::runtime_error on a difference (kCheck) or on a difference in the
/// modules' structure (always).
StateReplacements agreeOnModuleStates(const torch::jit::Module& module, int64_t rank,
                                      int64_t worldSize, ModuleStates mode);

/// Points every attribute of `module` (at any depth) that holds a replaced tensor at its
/// replacement, so tied tensors stay tied. The input of transform() is not touched: the
/// replacements are new tensors and only the clone's slots change.
void applyStateReplacements(const torch::jit::Module& module, const StateReplacements& replacements);

}  // namespace fsdp_opt
