// The runtime's counters and their peaks. See stats.h.
#include "stats.h"

#include <algorithm>
#include <mutex>

#include "host_buffer_pool.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

std::mutex& statsMutex() {
  static std::mutex m;
  return m;
}

// Leaked on purpose, like the registry: counted into until the process exits.
Stats& counters() {
  static Stats* s = new Stats();
  return *s;
}

void raisePeaks(Stats& s) {
  s.peak_unsharded_bytes = std::max(s.peak_unsharded_bytes, s.unsharded_bytes);
  s.in_flight_peak = std::max(s.in_flight_peak, s.in_flight);
  s.peak_unsharded_grad_bytes = std::max(s.peak_unsharded_grad_bytes, s.unsharded_grad_bytes);
  s.peak_unsharded_param_and_grad_bytes =
      std::max(s.peak_unsharded_param_and_grad_bytes, s.unsharded_bytes + s.unsharded_grad_bytes);
}

}  // namespace

void updateStats(const std::function<void(Stats&)>& update) {
  std::lock_guard<std::mutex> lock(statsMutex());
  update(counters());
  raisePeaks(counters());
}

int64_t unshardedParamAndGradBytesNow() {
  std::lock_guard<std::mutex> lock(statsMutex());
  return counters().unsharded_bytes + counters().unsharded_grad_bytes;
}

void countBytesSent(const std::string& groupTag, int64_t bytes) {
  std::lock_guard<std::mutex> lock(statsMutex());
  Stats& s = counters();
  if (groupTag.rfind("shard", 0) == 0) {
    s.bytes_sent_shard_group += bytes;
  } else if (groupTag.rfind("replica", 0) == 0) {
    s.bytes_sent_replica_group += bytes;
  } else {
    s.bytes_sent_world += bytes;
  }
}

}  // namespace detail

Stats stats() {
  Stats s;
  {
    std::lock_guard<std::mutex> lock(detail::statsMutex());
    s = detail::counters();
  }
  const detail::HostBufferPoolStats pool = detail::hostBufferPoolStats();
  s.host_buffer_cached_bytes = pool.cachedBytes;
  s.host_buffer_cache_limit = pool.peakLiveBytes;
  s.host_buffer_live_bytes = pool.liveBytes;
  s.host_buffer_allocations = pool.misses;
  return s;
}

void resetStats() {
  std::lock_guard<std::mutex> lock(detail::statsMutex());
  Stats& s = detail::counters();
  Stats fresh;
  fresh.unsharded_bytes = s.unsharded_bytes;
  fresh.in_flight = s.in_flight;
  fresh.unsharded_grad_bytes = s.unsharded_grad_bytes;
  detail::raisePeaks(fresh);
  s = fresh;
}

std::vector<std::pair<std::string, int64_t>> Stats::items() const {
  return {{"all_gathers", all_gathers},
          {"gather_calls", gather_calls},
          {"bytes_gathered", bytes_gathered},
          {"unsharded_bytes", unsharded_bytes},
          {"peak_unsharded_bytes", peak_unsharded_bytes},
          {"reshards", reshards},
          {"reshard_calls", reshard_calls},
          {"release_all_calls", release_all_calls},
          {"wait_calls", wait_calls},
          {"in_flight", in_flight},
          {"in_flight_peak", in_flight_peak},
          {"agreements", agreements},
          {"grad_reductions", grad_reductions},
          {"unsharded_grad_bytes", unsharded_grad_bytes},
          {"peak_unsharded_grad_bytes", peak_unsharded_grad_bytes},
          {"peak_unsharded_param_and_grad_bytes", peak_unsharded_param_and_grad_bytes},
          {"bytes_sent_world", bytes_sent_world},
          {"bytes_sent_shard_group", bytes_sent_shard_group},
          {"bytes_sent_replica_group", bytes_sent_replica_group},
          {"shm_rounds", shm_rounds},
          {"host_buffer_cached_bytes", host_buffer_cached_bytes},
          {"host_buffer_cache_limit", host_buffer_cache_limit},
          {"host_buffer_live_bytes", host_buffer_live_bytes},
          {"host_buffer_allocations", host_buffer_allocations}};
}

}  // namespace runtime
}  // namespace fsdp_opt
