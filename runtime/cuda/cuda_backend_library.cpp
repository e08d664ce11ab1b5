// libfsdp_runtime_cuda: the CUDA/NCCL backend as a library of its own, which libfsdp_runtime
// loads at the first gather of CUDA tensors (data_path.h, registerDevicePath). Loading it
// registers the CUDA device path; nothing else here.
#include "../collective_backend.h"
#include "../data_path.h"
#include "cuda_data_path.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

const bool kRegistered = [] {
  registerDevicePath({c10::DeviceType::CUDA, cuda::startCudaUnshard, createNcclBackend});
  return true;
}();

}  // namespace
}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
