// The exchange of a communicator's unique id through the process group's c10d store, before
// NCCL creates the communicator (docs/runtime.md, "NCCL"). NCCL-free, so it is unit-tested in
// both legs (test/unit/test_communicator_id.cpp).
//
// Two rules keep a failed creation from turning into a hang or into a wrong communicator:
//   - keys: every creation attempt of this process takes the next key, first thing, on every
//     rank, whether it then succeeds or fails, and whatever rank fails first. Ranks run the
//     same program, so the n-th attempt of every rank uses the same key, and a retry never reads
//     the id (or the failure) of an earlier attempt;
//   - failures: rank 0 publishes either the id or why it could not make one; the other ranks,
//     waiting for the id, fail at once with rank 0's reason instead of at the store's timeout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// The store key of this process's next communicator creation attempt ("nccl/uid/N", N
/// counting attempts). Numbered per process, not per process group: a store that outlives the
/// group (torchrun's agent store) must never hand a rank the id of an earlier communicator.
std::string nextCommunicatorIdKey();

/// Rank 0: the id.
void publishCommunicatorId(c10d::Store& store, const std::string& key,
                           const std::vector<uint8_t>& id);
/// Rank 0: why there is no id (best effort: a store that fails here leaves the peers to time out).
void publishCommunicatorIdFailure(c10d::Store& store, const std::string& key,
                                  const std::string& why);
struct ReceivedCommunicatorId {
  std::vector<uint8_t> id;
  /// Non-empty when rank 0 published why it has no id (then `id` is empty).
  std::string rank0Failure;
};

/// The other ranks: waits for rank 0's publication, bounded by the store's timeout. Throws what
/// the store throws (a timeout), and on a value that is neither an id of `idBytes` bytes nor a
/// failure.
ReceivedCommunicatorId receiveCommunicatorId(c10d::Store& store, const std::string& key,
                                             size_t idBytes);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
