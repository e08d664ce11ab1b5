// Internal: how training sums gradients over the ranks (gradient_reduction.cpp). Called by
// backward's hooks (training.cpp), which decide when; this decides how.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fsdp_opt {
namespace runtime {
namespace detail {

/// One parameter's full gradient, of a parameter with `fullRows` rows in dim 0.
struct FullGradient {
  at::Tensor full;
  int64_t fullRows = 0;
};

/// A unit's full gradients (one dtype) to this rank's rows of their mean over the W ranks, in
/// order: ONE all-to-all within the shard group, added in group-rank order, then under HSDP the
/// shard groups' sums all-gathered over the replica group and added in group order, then the
/// division by W. Counts one gradient reduction.
std::vector<at::Tensor> reduceToShardRows(const std::string& unit, const std::vector<FullGradient>& grads);

/// A replicated parameter's gradient to its mean over the world: ONE all-gather, the additions
/// in rank order on every rank alike. Counts one gradient reduction.
at::Tensor averageOverWorld(const at::Tensor& grad);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
