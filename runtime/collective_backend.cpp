#include "collective_backend.h"
#include "errors.h"

#include <c10/util/Exception.h>

namespace fsdp_opt {
namespace runtime {

void CollectiveBackend::unsupported(const std::string& what) const {
  detail::raise(ErrorKind::kInternal, c10::str("backend ", name(), " does not support ", what));
}

void CollectiveBackend::checkAllGatherArgs(const at::Tensor& input,
                                           const at::Tensor& output) const {
  FSDP_CHECK(input.defined() && output.defined(), ErrorKind::kInternal, "backend ", name(),
             ": allGatherBytes needs defined tensors");
  FSDP_CHECK(input.scalar_type() == at::kByte && output.scalar_type() == at::kByte,
             ErrorKind::kInternal, "backend ", name(),
             ": allGatherBytes works on uint8 buffers, got ", input.scalar_type(), " and ",
             output.scalar_type());
  FSDP_CHECK(
      input.dim() == 1 && output.dim() == 1 && input.is_contiguous() && output.is_contiguous(),
      ErrorKind::kInternal, "backend ", name(), ": allGatherBytes needs contiguous 1-d buffers");
  FSDP_CHECK(output.numel() == input.numel() * size(), ErrorKind::kInternal, "backend ", name(),
             ": allGatherBytes output has ", output.numel(), " bytes, expected ", size(), " x ",
             input.numel());
  FSDP_CHECK(input.device() == output.device(), ErrorKind::kInternal, "backend ", name(),
             ": input and output of allGatherBytes are on different devices (", input.device(),
             " vs ", output.device(), ")");
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  const auto* out = static_cast<const uint8_t*>(output.data_ptr());
  const int64_t n = input.numel();
  const bool disjoint = in + n <= out || out + output.numel() <= in;
  FSDP_CHECK(disjoint || in == out + rank() * n, ErrorKind::kInternal, "backend ", name(),
             ": allGatherBytes input overlaps its output other than as rank ", rank(), "'s slot");
}

void CollectiveBackend::checkAllToAllArgs(const at::Tensor& input, const at::Tensor& output) const {
  FSDP_CHECK(input.scalar_type() == at::kByte && output.scalar_type() == at::kByte && input.is_contiguous() &&
                 output.is_contiguous() && input.numel() == output.numel() && input.numel() % size() == 0,
             ErrorKind::kInternal, "backend ", name(), ": all-to-all of ", input.numel(), " and ", output.numel(),
             " bytes over ", size(), " ranks");
}

void CollectiveBackend::checkBroadcastArgs(const at::Tensor& buffer, int root) const {
  FSDP_CHECK(buffer.scalar_type() == at::kByte && buffer.dim() == 1 && buffer.is_contiguous() &&
                 buffer.device().is_cpu() && root >= 0 && root < size(),
             ErrorKind::kInternal, "backend ", name(), ": broadcastBytes needs a contiguous 1-d CPU "
             "uint8 buffer and a root rank below ", size());
}

std::unique_ptr<PendingCollective> CollectiveBackend::allGatherBytesAsync(const at::Tensor&,
                                                                          const at::Tensor&) {
  unsupported("asynchronous all-gather");
}

std::unique_ptr<PendingCollective> CollectiveBackend::allGatherBytesGroupedAsync(
    const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {
  unsupported("grouped all-gathers");
}

std::unique_ptr<PendingCollective> CollectiveBackend::allToAllBytesAsync(const at::Tensor&, const at::Tensor&) {
  unsupported("all-to-all");
}

std::unique_ptr<PendingCollective> CollectiveBackend::broadcastBytesAsync(const at::Tensor&, int) {
  unsupported("broadcasts");
}

void CollectiveBackend::checkTensorDevice(const c10::Device&, const std::string&) const {}

}  // namespace runtime
}  // namespace fsdp_opt
