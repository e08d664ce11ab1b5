// Unit tests of the NCCL unique-id exchange through the store (runtime/communicator_id.h): the
// id arrives intact; when rank 0 has none its peers fail at once with its reason; attempt keys
// never repeat. Ranks are threads sharing one c10d::HashStore.
#include "../../runtime/communicator_id.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <set>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

using namespace fsdp_opt::runtime::detail;

namespace {

c10::intrusive_ptr<c10d::Store> store(std::chrono::milliseconds timeout) {
  auto s = c10::make_intrusive<c10d::HashStore>();
  s->setTimeout(timeout);
  return s;
}

}  // namespace

TEST(CommunicatorId, PeersReceiveRankZerosId) {
  auto s = store(std::chrono::seconds(30));
  const std::vector<uint8_t> id = {0, 1, 2, 255, 0, 7};
  auto peer = std::async(std::launch::async, [&] { return receiveCommunicatorId(*s, "k", id.size()); });
  publishCommunicatorId(*s, "k", id);
  const ReceivedCommunicatorId got = peer.get();
  EXPECT_EQ(got.rank0Failure, "");
  EXPECT_EQ(got.id, id);
}

TEST(CommunicatorId, RankZerosFailureReachesPeersAtOnce) {
  auto s = store(std::chrono::seconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  auto peer = std::async(std::launch::async, [&] { return receiveCommunicatorId(*s, "k", 128); });
  publishCommunicatorIdFailure(*s, "k", "ncclGetUniqueId failed on rank 0: unhandled system error");
  const ReceivedCommunicatorId got = peer.get();
  EXPECT_EQ(got.rank0Failure, "ncclGetUniqueId failed on rank 0: unhandled system error");
  EXPECT_TRUE(got.id.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));  // not the timeout
}

TEST(CommunicatorId, AMalformedValueIsAnError) {
  auto s = store(std::chrono::seconds(1));
  s->set("short", std::vector<uint8_t>{'I', 1, 2});
  s->set("untagged", std::vector<uint8_t>(129, 0));
  for (const char* key : {"short", "untagged"}) {
    try {
      receiveCommunicatorId(*s, key, 128);
      ADD_FAILURE() << key << ": no error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find("malformed NCCL unique id"), std::string::npos)
          << e.what_without_backtrace();
    }
  }
}

TEST(CommunicatorId, NothingPublishedEndsAtTheStoresTimeout) {
  auto s = store(std::chrono::milliseconds(200));
  EXPECT_THROW(receiveCommunicatorId(*s, "never", 128), std::exception);
}

TEST(CommunicatorId, EveryAttemptHasItsOwnKey) {
  std::set<std::string> keys;
  for (int i = 0; i < 5; ++i) keys.insert(nextCommunicatorIdKey());
  EXPECT_EQ(keys.size(), 5u);
  EXPECT_EQ(keys.count("nccl/uid/0") + keys.count("nccl/uid/4"), 2u);
}
