// Which CUDA device a rank uses for its NCCL communicator (docs/runtime.md, "Device").
//
// torchrun gives every rank of a node a LOCAL_RANK, and the usual mapping is one GPU per local
// rank: cuda:LOCAL_RANK. That mapping fails in ways worth naming before NCCL or CUDA report
// something opaque: more ranks on a node than GPUs it can see, or a launcher that already
// narrowed each rank to one GPU (CUDA_VISIBLE_DEVICES per rank, so LOCAL_RANK 1 has no
// cuda:1). FSDP_OPT_CUDA_DEVICE overrides the mapping: a device index, or `tensors` for the
// device the parameters are on.
//
// Torch-free: the rules are unit-tested on any machine (test/unit/test_device_mapping.cpp);
// createNcclBackend (cuda/nccl_backend.cpp) feeds them the environment and the number of visible
// devices.
#pragma once

#include <optional>
#include <string>

namespace fsdp_opt {
namespace runtime {
namespace detail {

struct CudaDeviceEnv {
  /// FSDP_OPT_CUDA_DEVICE; empty when unset.
  std::string override;
  std::optional<int> localRank;       // LOCAL_RANK
  std::optional<int> localWorldSize;  // LOCAL_WORLD_SIZE
};

struct CudaDeviceChoice {
  int device = -1;
  /// Where the choice came from, for messages: "LOCAL_RANK=1", "FSDP_OPT_CUDA_DEVICE=0",
  /// "the parameters' device".
  std::string origin;
  /// Non-empty when there is no valid choice: one sentence naming the cause.
  std::string error;
};

/// This rank's device for a first CUDA gather of parameters on cuda:`tensorDevice`, when the
/// process sees `visibleDevices` CUDA devices.
CudaDeviceChoice chooseCudaDevice(const CudaDeviceEnv& env, int tensorDevice, int visibleDevices);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
