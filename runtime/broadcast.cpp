// fsdp_opt::runtime::broadcastBytes: one rank's bytes to every rank, for module states that
// must start equal on every rank (fsdp_opt::shardForRank with ModuleStates::kSyncFromRank0, the
// counterpart of FSDP1's sync_module_states=True). Like every collective of the runtime it goes
// out behind its fingerprint envelope (envelope.h), so a rank that broadcasts while another
// gathers fails with the divergence error instead of pairing the two.
#include <ATen/ATen.h>

#include <mutex>

#include "collective_order.h"
#include "envelope.h"
#include "errors.h"
#include "fsdp_opt/runtime.h"
#include "process_group.h"

namespace fsdp_opt {
namespace runtime {

void broadcastBytes(void* data, int64_t bytes, int root, const std::string& what) {
  const detail::GroupInfo group = detail::ensureGroup();
  FSDP_CHECK(bytes >= 0 && root >= 0 && root < group.world, ErrorKind::kBadInput,
             "fsdp: broadcastBytes of ", bytes, " bytes from rank ", root, " in a group of ",
             group.world);
  if (group.world == 1) return;
  const std::string context = "fsdp: broadcasting " + what;
  auto backend = detail::backendFor(c10::Device(c10::kCPU), context);
  fingerprint::Identity identity;
  identity.kind = fingerprint::Kind::kBroadcast;
  identity.unit = what;
  identity.payloadBytes = bytes;
  identity.numTensors = 1;
  identity.layoutHash = fingerprint::LayoutHash().add("broadcast").add(root).add(bytes).value();
  identity.dtypes = "uint8";
  at::Tensor buffer = at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte));
  try {
    std::unique_lock<std::mutex> order = detail::lockCollectiveOrder();
    detail::Envelope envelope(backend, c10::Device(c10::kCPU), identity, at::Tensor());
    envelope.finish();
    if (bytes > 0) backend->broadcastBytesAsync(buffer, root)->wait();
  } catch (const std::exception& e) {
    const ErrorKind kind = detail::kindOr(e, ErrorKind::kPeerLost);
    if (kind == ErrorKind::kDivergence) {
      detail::raise(kind, c10::str(context, ": ", detail::describeException(e)));
    }
    detail::raise(kind, c10::str(context, " (", bytes, " bytes) on backend ", backend->name(),
                                 " failed on rank ", group.rank, " of ", group.world,
                                 "; a peer may have died or runs a different program: ",
                                 detail::describeException(e)));
  }
}

}  // namespace runtime
}  // namespace fsdp_opt
