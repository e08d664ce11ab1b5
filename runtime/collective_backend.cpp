#include "collective_backend.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {

void CollectiveBackend::unsupported(const std::string& what) const {
  TORCH_CHECK(false, "backend ", name(), " does not support ", what);
}

void CollectiveBackend::checkAllGatherArgs(const at::Tensor& input,
                                           const at::Tensor& output) const {
  TORCH_CHECK(input.defined() && output.defined(), "backend ", name(),
              ": allGatherBytes needs defined tensors");
  TORCH_CHECK(input.scalar_type() == at::kByte && output.scalar_type() == at::kByte, "backend ",
              name(), ": allGatherBytes works on uint8 buffers, got ", input.scalar_type(), " and ",
              output.scalar_type());
  TORCH_CHECK(input.dim() == 1 && output.dim() == 1 && input.is_contiguous() &&
                  output.is_contiguous(),
              "backend ", name(), ": allGatherBytes needs contiguous 1-d buffers");
  TORCH_CHECK(output.numel() == input.numel() * size(), "backend ", name(),
              ": allGatherBytes output has ", output.numel(), " bytes, expected ", size(), " x ",
              input.numel());
  TORCH_CHECK(input.device() == output.device(), "backend ", name(),
              ": input and output of allGatherBytes are on different devices (", input.device(),
              " vs ", output.device(), ")");
}

std::unique_ptr<PendingCollective> CollectiveBackend::allGatherBytesAsync(const at::Tensor&,
                                                                          const at::Tensor&) {
  unsupported("asynchronous all-gather");
}

std::unique_ptr<PendingCollective> CollectiveBackend::allGatherBytesGroupedAsync(
    const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {
  unsupported("grouped all-gathers");
}

void CollectiveBackend::checkTensorDevice(const c10::Device&, const std::string&) const {}

}  // namespace runtime
}  // namespace fsdp_opt
