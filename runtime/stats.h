// Internal: the counters behind fsdp_opt::runtime::stats() (fsdp::stats). They have a lock of
// their own, the innermost of the runtime's: code holding the registry's lock (a gather), the
// collective order (an envelope) or training's lock counts without taking any other lock, and
// the counters' lock is never held while taking another.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// Applies `update` to the counters under their lock, then raises every peak to its count now
/// (peak_unsharded_bytes, in_flight_peak, peak_unsharded_grad_bytes,
/// peak_unsharded_param_and_grad_bytes): no caller keeps a peak by hand.
void updateStats(const std::function<void(Stats&)>& update);

/// The parameter and gradient bytes unsharded now (stats' unsharded_bytes +
/// unsharded_grad_bytes, which reset_stats keeps): what --max-unsharded-bytes bounds (SPEC 10).
int64_t unshardedParamAndGradBytesNow();

/// Bytes this rank sends in a collective of the group tagged `groupTag` (GroupMembers): the
/// stats' bytes_sent_* of its kind.
void countBytesSent(const std::string& groupTag, int64_t bytes);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
