#include "communicator_id.h"
#include "errors.h"

#include <atomic>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// The first byte of a published value says what follows: the id, or rank 0's reason.
constexpr uint8_t kIdTag = 'I';
constexpr uint8_t kFailureTag = 'E';

}  // namespace

std::string nextCommunicatorIdKey() {
  static std::atomic<int> attempts{0};
  return "nccl/uid/" + std::to_string(attempts++);
}

void publishCommunicatorId(c10d::Store& store, const std::string& key,
                           const std::vector<uint8_t>& id) {
  std::vector<uint8_t> value;
  value.reserve(id.size() + 1);
  value.push_back(kIdTag);
  value.insert(value.end(), id.begin(), id.end());
  store.set(key, value);
}

void publishCommunicatorIdFailure(c10d::Store& store, const std::string& key,
                                  const std::string& why) {
  std::vector<uint8_t> value;
  value.push_back(kFailureTag);
  value.insert(value.end(), why.begin(), why.end());
  try {
    store.set(key, value);
  } catch (const std::exception&) {
  }
}

ReceivedCommunicatorId receiveCommunicatorId(c10d::Store& store, const std::string& key,
                                             size_t idBytes) {
  const std::vector<uint8_t> value = store.get(key);
  ReceivedCommunicatorId got;
  if (!value.empty() && value[0] == kFailureTag) {
    got.rank0Failure.assign(value.begin() + 1, value.end());
    if (got.rank0Failure.empty()) got.rank0Failure = "(no reason given)";
    return got;
  }
  FSDP_CHECK(!value.empty() && value[0] == kIdTag && value.size() == idBytes + 1,
             ErrorKind::kInternal, "malformed NCCL unique id under store key '", key, "' (",
             value.size(), " bytes, expected ", idBytes + 1, ")");
  got.id.assign(value.begin() + 1, value.end());
  return got;
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
