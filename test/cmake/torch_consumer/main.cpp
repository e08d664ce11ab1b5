// Prints the file that provides c10 to this process (the check: it is the found torch's, not
// another installation's) and a small computation through libtorch (the check: it runs).
#include <dlfcn.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

int main() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || info.dli_fname == nullptr) {
    std::fprintf(stderr, "error: dladdr cannot name the library of c10::GetCPUAllocator\n");
    return 1;
  }
  const at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3});
  std::printf("c10: %s\n", info.dli_fname);
  std::printf("sum: %g\n", static_cast<double>(t.matmul(t.t()).sum().item<float>()));
  return 0;
}
