// Internal: the runtime's process group (rank, world size, c10d store, collective backends per
// device kind and scope). Created lazily from torchrun's environment at the first check_rank or
// all_gather, or explicitly with fsdp_opt::runtime::initProcessGroup.
//
// Hybrid sharding (HSDP, docs/multi-node.md): a rank file made with --shard-group-size=S < W
// shards every unit over the S consecutive ranks of a shard group and replicates it over the
// R = W / S groups. check_rank sets S from the file; gathers and the gradients' reduce-scatter
// then run within the shard group, the gradients' average across groups within the replica
// group (the R ranks holding the same shard), everything else (agreements, replicated
// parameters, module states) over the world.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "collective_backend.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

struct RankInfo {
  int rank = 0;
  int world = 1;
  int localRank = 0;
};

/// Rank and world size, creating the group from the environment first if needed.
RankInfo ensureGroup();

/// Which ranks a collective runs over.
enum class CollectiveGroup {
  kWorld,         // every rank
  kShardGroup,    // the S ranks holding one copy of every unit's parameters between them
  kReplicaGroup,  // the R ranks holding the same shard, one in each shard group
};

/// This rank's rank and size within `scope` under the current mesh (the world at S = W).
RankInfo groupOf(CollectiveGroup scope);
/// The global ranks of this rank's group in `scope`, in group-rank order, and its tag.
GroupMembers membersOf(CollectiveGroup scope);

/// The backend for tensors on `device`, created at its first use by the device's entry in the
/// table of data paths (data_path.h: CPU gloo; CUDA nccl when built with FSDP_OPT_ENABLE_CUDA).
/// `context` prefixes error messages (e.g. "fsdp::all_gather(unit 'a.b')").
/// `scope` picks the ranks: a group smaller than the world gets a backend of its own, rendezvous
/// under its tag in the group's store.
std::shared_ptr<CollectiveBackend> backendFor(const c10::Device& device,
                                              const std::string& context,
                                              CollectiveGroup scope = CollectiveGroup::kWorld);

/// fsdp::check_rank: rank/world against the group, then (once per distinct hash) the manifest
/// hash and mesh of every rank through the store; then the file's shard group size becomes the
/// mesh gathers use. `shardGroupSize` 0: the world (files without a mesh).
void checkRank(int64_t rank, int64_t world, int64_t shardGroupSize, const std::string& manifestSha256);

/// The number of this process's next collective in the current group, from 1 (a fingerprint's
/// sequence number, fingerprint.h). Every rank running the same program counts the same.
uint64_t nextCollectiveSequence();

/// The group's store and what keys in it need, for exchanges that are not collectives (the
/// descriptions behind a fingerprint mismatch, envelopes without a host backend).
struct StoreAccess {
  c10::intrusive_ptr<c10d::Store> store;  // null at world size 1
  uint64_t generation = 0;  // how many groups this process has initialised: keeps keys apart
  std::chrono::milliseconds timeout{0};
  int rank = 0;
  int world = 1;
};
StoreAccess groupStore();

/// FSDP_OPT_TIMEOUT_S parsed (throws on a malformed value); 300 s when unset.
std::chrono::milliseconds timeoutFromEnv();

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
