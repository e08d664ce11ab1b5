// Bitwise comparison of what a model's methods return (SPEC section 8: the sharded model's
// outputs must be bitwise the original's). fsdp-run --check, its --repeat check and
// examples/cpp-pipeline all compare with this one function, so "identical" means one thing.
// In libfsdp_runtime.
#pragma once

#include <optional>
#include <string>

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

namespace fsdp_opt {

/// The format's spelling of a dtype (fsdp_opt/format.h: Python's, "float32", "bfloat16",
/// "int64", "complex64", ...); c10's name for the others.
std::string dtypeName(c10::ScalarType type);

/// Where and how `got` differs from `want`, or nothing when they are bitwise identical.
/// Tensors must have the same dtype and shape and equal bytes (of contiguous CPU copies, so NaNs
/// compare by their bits); floats compare by bits too; ints, bools, strings, None and devices by
/// value; tuples, lists, dicts (in order, keys and values) and objects (their attributes)
/// element by element. The answer names the place from `path`:
/// "output[0][1]: 3 of 24 elements differ bitwise (first at flat index 5)".
std::optional<std::string> bitwiseDifference(const c10::IValue& got, const c10::IValue& want,
                                             const std::string& path = "output");

/// A short description of a value: "Tensor float32[2, 3]", "(Tensor int64[4], 3)".
std::string summarizeValue(const c10::IValue& value);

}  // namespace fsdp_opt
