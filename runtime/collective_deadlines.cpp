#include "collective_deadlines.h"

#include <exception>
#include <sstream>

namespace fsdp_opt {
namespace runtime {

CollectiveDeadline::State CollectiveDeadline::poll(Clock::time_point now) {
  // finished() first: a collective that has finished has started, and may have done both
  // between two polls.
  if (probe_->finished()) return State::kFinished;
  if (!startedAt_) {
    if (!probe_->started()) return State::kQueued;
    startedAt_ = now;
  }
  return now - *startedAt_ > timeout_ ? State::kOverdue : State::kRunning;
}

std::string CollectiveDeadlines::poll(Clock::time_point now, bool* overdue) {
  if (overdue != nullptr) *overdue = false;
  try {
    for (auto it = pending_.begin(); it != pending_.end();) {
      switch (it->poll(now)) {
        case CollectiveDeadline::State::kFinished:
          it = pending_.erase(it);
          break;
        case CollectiveDeadline::State::kOverdue:
          if (overdue != nullptr) *overdue = true;
          return overdueReason(timeout_);
        default:
          ++it;
      }
    }
  } catch (const std::exception& e) {
    return probeFailureReason(e.what());
  } catch (...) {
    return probeFailureReason("an unknown exception");
  }
  return "";
}

std::string overdueReason(std::chrono::milliseconds timeout) {
  std::ostringstream os;
  os << "an all-gather did not complete within " << static_cast<double>(timeout.count()) / 1000.0
     << " s of starting on the GPU (FSDP_OPT_TIMEOUT_S; time spent queued behind other work is "
        "not counted); a peer may have died or runs a different program";
  return os.str();
}

std::string probeFailureReason(const std::string& cause) {
  return "checking whether an all-gather had completed failed, so the GPU can no longer be "
         "trusted (a kernel fault before or during the collective leaves an error in the CUDA "
         "context): " + cause;
}

}  // namespace runtime
}  // namespace fsdp_opt
