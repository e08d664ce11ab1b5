// Unit tests of the NCCL watchdog's timing rules (runtime/collective_deadlines.h): a collective's
// timeout counts from when it starts on the GPU, not from when it was queued, and a probe that
// throws (a CUDA event query after a kernel fault) becomes an abort reason instead of escaping.
#include "../../runtime/collective_deadlines.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

using fsdp_opt::runtime::CollectiveDeadline;
using fsdp_opt::runtime::CollectiveDeadlines;
using fsdp_opt::runtime::CollectiveProbe;
using std::chrono::milliseconds;

namespace {

// A collective whose progress the test sets by hand.
struct FakeProbe : CollectiveProbe {
  bool isStarted = false;
  bool isFinished = false;
  bool throws = false;
  bool started() override {
    if (throws) throw std::runtime_error("CUDA error: an illegal memory access was encountered");
    return isStarted;
  }
  bool finished() override {
    if (throws) throw std::runtime_error("CUDA error: an illegal memory access was encountered");
    return isFinished;
  }
};

const CollectiveDeadline::Clock::time_point t0{};

}  // namespace

TEST(CollectiveDeadline, QueuedTimeDoesNotCount) {
  auto probe = std::make_shared<FakeProbe>();
  CollectiveDeadline d(probe, milliseconds(1000));
  // Queued behind compute for ten timeouts: never overdue while it has not started.
  EXPECT_EQ(d.poll(t0), CollectiveDeadline::State::kQueued);
  EXPECT_EQ(d.poll(t0 + milliseconds(10000)), CollectiveDeadline::State::kQueued);
  probe->isStarted = true;
  EXPECT_EQ(d.poll(t0 + milliseconds(10500)), CollectiveDeadline::State::kRunning);
  EXPECT_EQ(d.poll(t0 + milliseconds(11400)), CollectiveDeadline::State::kRunning);
  probe->isFinished = true;
  EXPECT_EQ(d.poll(t0 + milliseconds(11450)), CollectiveDeadline::State::kFinished);
}

TEST(CollectiveDeadline, RunningPastTheTimeoutIsOverdue) {
  auto probe = std::make_shared<FakeProbe>();
  CollectiveDeadline d(probe, milliseconds(1000));
  EXPECT_EQ(d.poll(t0), CollectiveDeadline::State::kQueued);
  probe->isStarted = true;
  EXPECT_EQ(d.poll(t0 + milliseconds(5000)), CollectiveDeadline::State::kRunning);
  EXPECT_EQ(d.poll(t0 + milliseconds(6000)), CollectiveDeadline::State::kRunning);
  EXPECT_EQ(d.poll(t0 + milliseconds(6001)), CollectiveDeadline::State::kOverdue);
}

TEST(CollectiveDeadline, FinishedBetweenTwoPollsIsFinished) {
  auto probe = std::make_shared<FakeProbe>();
  CollectiveDeadline d(probe, milliseconds(10));
  probe->isStarted = probe->isFinished = true;
  EXPECT_EQ(d.poll(t0 + milliseconds(100000)), CollectiveDeadline::State::kFinished);
}

TEST(CollectiveDeadline, ProbeErrorsPropagate) {
  auto probe = std::make_shared<FakeProbe>();
  probe->throws = true;
  CollectiveDeadline d(probe, milliseconds(10));
  EXPECT_THROW(d.poll(t0), std::runtime_error);
}

TEST(CollectiveDeadlines, OnlyTheCollectiveThatRanTooLongAborts) {
  CollectiveDeadlines all(milliseconds(1000));
  auto first = std::make_shared<FakeProbe>();
  auto second = std::make_shared<FakeProbe>();
  all.add(first);
  all.add(second);
  EXPECT_EQ(all.poll(t0), "");
  first->isStarted = true;
  EXPECT_EQ(all.poll(t0 + milliseconds(3000)), "");  // the first starts at 3 s
  first->isFinished = true;
  second->isStarted = true;
  EXPECT_EQ(all.poll(t0 + milliseconds(3900)), "");  // the second starts at 3.9 s
  EXPECT_EQ(all.size(), 1u);                          // the finished one is forgotten
  EXPECT_EQ(all.poll(t0 + milliseconds(4800)), "");
  bool overdue = false;
  const std::string reason = all.poll(t0 + milliseconds(4901), &overdue);
  EXPECT_TRUE(overdue);
  EXPECT_NE(reason.find("did not complete within 1 s of starting"), std::string::npos) << reason;
  EXPECT_NE(reason.find("FSDP_OPT_TIMEOUT_S"), std::string::npos) << reason;
}

TEST(CollectiveDeadlines, AThrowingProbeBecomesTheAbortReason) {
  CollectiveDeadlines all(milliseconds(1000));
  auto probe = std::make_shared<FakeProbe>();
  probe->throws = true;
  all.add(probe);
  std::string reason;
  bool overdue = true;
  EXPECT_NO_THROW(reason = all.poll(t0, &overdue));
  EXPECT_FALSE(overdue);  // a fault, not a timeout
  EXPECT_NE(reason.find("an illegal memory access was encountered"), std::string::npos) << reason;
  EXPECT_NE(reason.find("kernel fault"), std::string::npos) << reason;
}

TEST(CollectiveDeadlines, ClearForgetsEverything) {
  CollectiveDeadlines all(milliseconds(1));
  auto probe = std::make_shared<FakeProbe>();
  probe->isStarted = true;
  all.add(probe);
  all.clear();
  EXPECT_EQ(all.size(), 0u);
  EXPECT_EQ(all.poll(t0 + milliseconds(1000)), "");
}
