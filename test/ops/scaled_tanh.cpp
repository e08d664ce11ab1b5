// fsdp_test::scaled_tanh(x, scale) = tanh(x) * scale: an op no torch library registers, so a
// model that calls it loads only where this library was loaded first.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

at::Tensor scaledTanh(const at::Tensor& x, double scale) { return at::tanh(x) * scale; }

}  // namespace

TORCH_LIBRARY(fsdp_test, m) { m.def("scaled_tanh(Tensor x, float scale) -> Tensor", scaledTanh); }
