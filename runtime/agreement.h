// fsdp::rank_any (agreement.cpp): whether any rank has its flag set, one fingerprinted
// collective on the backend of `like`'s device; the rank-uniform loops' agreement.
#pragma once

#include <ATen/ATen.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

bool rankAny(bool flag, const at::Tensor& like);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
