// fsdp_opt::runtime::broadcastBytes: one rank's bytes to every rank, for module states that
// must start equal on every rank (fsdp_opt::shardForRank with ModuleStates::kSyncFromRank0, the
// counterpart of FSDP1's sync_module_states=True). Like every collective of the runtime it goes
// out behind its fingerprint envelope (envelope.h), so a rank that broadcasts while another
// gathers fails with the divergence error instead of pairing the two.
#include <ATen/ATen.h>

#include "collective.h"
#include "errors.h"
#include "fsdp_opt/runtime/runtime.h"
#include "process_group.h"

namespace fsdp_opt {
namespace runtime {

void broadcastBytes(void* data, int64_t bytes, int root, const std::string& what) {
  const detail::RankInfo group = detail::ensureGroup();
  FSDP_CHECK(bytes >= 0 && root >= 0 && root < group.world, ErrorKind::kBadInput,
             "fsdp: broadcastBytes of ", bytes, " bytes from rank ", root, " in a group of ",
             group.world);
  if (group.world == 1) return;
  const std::string context = "fsdp: broadcasting " + what;
  auto backend = detail::backendFor(c10::Device(c10::kCPU), context);
  detail::CollectiveSpec spec;
  spec.identity.kind = fingerprint::Kind::kBroadcast;
  spec.identity.unit = what;
  spec.identity.payloadBytes = bytes;
  spec.identity.numTensors = 1;
  spec.identity.layoutHash = fingerprint::LayoutHash().add("broadcast").add(root).add(bytes).value();
  spec.identity.dtypes = "uint8";
  at::Tensor buffer = at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte));
  spec.backend = backend;
  spec.context = context;
  spec.failed = c10::str(context, " (", bytes, " bytes)");
  detail::runCollective(spec, [&]() -> std::unique_ptr<PendingCollective> {
    if (bytes == 0) return nullptr;
    return backend->broadcastBytesAsync(buffer, root);
  });
}

}  // namespace runtime
}  // namespace fsdp_opt
