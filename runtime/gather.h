// Internal: the unshard/reshard engine behind fsdp::all_gather / fsdp::reshard /
// fsdp::release_all (storage swap, per-TensorImpl registry, reference counts, stats).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

std::vector<at::Tensor> allGather(const std::vector<at::Tensor>& params,
                                  const std::vector<int64_t>& fullRows, const std::string& unit);
void reshard(const std::vector<at::Tensor>& params, const std::string& unit);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
