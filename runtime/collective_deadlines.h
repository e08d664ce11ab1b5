// Deadlines of collectives in flight, counted from when each one starts running on its device.
//
// A collective is enqueued on a stream behind whatever work that stream (and the streams it
// waits for) still has to do: a prefetch issued by all_gather_start may sit behind a long
// forward kernel for longer than FSDP_OPT_TIMEOUT_S before NCCL even starts. Timing it from the
// enqueue would abort a healthy job; so each collective carries two markers, one reached when
// it starts (an event recorded right before the NCCL call) and one when it has finished, and
// only the time between the first being seen reached and the second counts.
//
// Torch- and CUDA-free, so the rules are unit-tested on any machine
// (test/unit/test_collective_deadlines.cpp); the NCCL backend supplies CUDA-event probes.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

namespace fsdp_opt {
namespace runtime {

/// Where one collective stands. Both queries may throw (a CUDA event query reports a sticky
/// error of the context, e.g. an illegal address from an earlier kernel).
class CollectiveProbe {
 public:
  virtual ~CollectiveProbe() = default;
  /// True once the collective has started running (everything queued before it has finished).
  virtual bool started() = 0;
  /// True once it has finished.
  virtual bool finished() = 0;
};

class CollectiveDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kQueued, kRunning, kFinished, kOverdue };

  CollectiveDeadline(std::shared_ptr<CollectiveProbe> probe, std::chrono::milliseconds timeout)
      : probe_(std::move(probe)), timeout_(timeout) {}

  /// Looks at the collective at `now`. The clock starts the first time it is seen started, so
  /// a poller that looks every P ms grants up to timeout + P. Throws what the probe throws.
  State poll(Clock::time_point now);

 private:
  std::shared_ptr<CollectiveProbe> probe_;
  std::chrono::milliseconds timeout_;
  std::optional<Clock::time_point> startedAt_;
};

/// The collectives one communicator has in flight, oldest first.
class CollectiveDeadlines {
 public:
  using Clock = CollectiveDeadline::Clock;

  explicit CollectiveDeadlines(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void add(std::shared_ptr<CollectiveProbe> probe) { pending_.emplace_back(std::move(probe), timeout_); }
  void clear() { pending_.clear(); }
  size_t size() const { return pending_.size(); }

  /// Polls every collective at `now` and forgets the finished ones. Returns why the
  /// communicator must be aborted (one ran past the timeout, or a probe threw: its text), or
  /// an empty string while all is well; `overdue`, when given, says whether the reason is the
  /// timeout (the error's kind). Never throws: the watchdog thread calls it.
  std::string poll(Clock::time_point now, bool* overdue = nullptr);

 private:
  std::chrono::milliseconds timeout_;
  std::deque<CollectiveDeadline> pending_;
};

/// The abort reasons, shared by the watchdog and a blocking wait so both say the same thing.
std::string overdueReason(std::chrono::milliseconds timeout);
std::string probeFailureReason(const std::string& cause);

}  // namespace runtime
}  // namespace fsdp_opt
