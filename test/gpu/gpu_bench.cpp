// fsdp-gpu-bench: the CUDA runtime's GPU benchmark (scripts/gpu-check.sh runs it).
//
//   fsdp-gpu-bench [--sizes=1048576,1073741824] [--small-params=1024] [--reps=N]
//
// For a unit of each size (8 float32 parameters of uneven row counts), and for a unit of many
// small float32 parameters (--small-params of them, rows of 256 B, 1 to 64 rows each; 0: none):
//   - copy-in (pack into the send buffer; plain, and cast to bfloat16) and copy-out (gathered
//     buffer of 8 ranks into the full parameters): time per launch and bandwidth, as a fraction
//     of a device-to-device cudaMemcpyAsync of the same bytes written, measured in the same run;
//   - per-call cost of fsdp::all_gather + fsdp::reshard (through the dispatcher, like a
//     TorchScript call) at world size 1: host time per call, device time per call and wall time
//     per call, without a cast and with param_dtype=bfloat16. On the copy-only path (the
//     default at world size 1) that is no copy at all, resp. one cast launch. With
//     FSDP_OPT_CUDA_FORCE_NCCL=1 (the NCCL path on a one-rank communicator) it is measured
//     under BOTH gather layouts side by side, packed (copy-in, ncclAllGather, copy-out) and
//     per-param (one grouped ncclAllGather per parameter, copy-in only for casts), with the
//     faster one named. A one-rank gather moves no bytes between GPUs: these figures are the
//     layouts' per-call and on-device costs, not their network behaviour.
// Without a CUDA device: "skipped: no CUDA device", exit 77.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collective_backend.h"
#include "cuda/cuda_data_path.h"
#include "fsdp_opt/runtime/runtime.h"
#include "shard_layout.h"

namespace {

using fsdp_opt::layout::PackLayout;
using fsdp_opt::layout::ParamSpec;
namespace rt = fsdp_opt::runtime::detail::cuda;

// A unit: the dim-0 sizes of its float32 parameters, all with rows of rowElems elements.
struct UnitShape {
  std::string what;
  std::vector<int64_t> rows;
  int64_t rowElems;
};

// Device time of one call of `fn` on the current stream: average over `reps` after a warm-up.
double deviceMs(int reps, const std::function<void()>& fn) {
  fn();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  start.record(stream);
  for (int i = 0; i < reps; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(start.elapsed_time(stop)) / reps;
}

std::string human(int64_t bytes) {
  std::ostringstream os;
  os.precision(3);
  if (bytes >= (1LL << 30)) {
    os << static_cast<double>(bytes) / (1LL << 30) << " GiB";
  } else {
    os << static_cast<double>(bytes) / (1LL << 20) << " MiB";
  }
  return os.str();
}

void report(const char* what, int64_t bytes, int64_t written, double ms, double d2dMs) {
  std::printf("  %-28s %10s  %9.1f us  %7.1f GB/s written  = %.2f x D2D copy of the same bytes "
              "(%.1f us)\n",
              what, human(bytes).c_str(), ms * 1e3, static_cast<double>(written) / (ms * 1e6),
              d2dMs / ms, d2dMs * 1e3);
}

std::vector<c10::IValue> callOp(const char* name, std::vector<c10::IValue> args) {
  static std::map<std::string, c10::OperatorHandle> ops;
  auto it = ops.find(name);
  if (it == ops.end()) {
    it = ops.emplace(name, c10::Dispatcher::singleton().findSchemaOrThrow(name, "")).first;
  }
  it->second.callBoxed(&args);
  return args;
}

// 8 parameters of uneven row counts, rows of 4 KiB, about unitBytes in all.
UnitShape eightParams(int64_t unitBytes) {
  constexpr int64_t kRowElems = 1024;
  const int64_t totalRows = std::max<int64_t>(8, unitBytes / (kRowElems * 4));
  UnitShape u{"8 float32 parameters, rows of 4 KiB", {}, kRowElems};
  for (int i = 0; i < 8; ++i) u.rows.push_back(totalRows / 8 + (i % 2 == 0 ? 1 : -1) * (i / 2));
  return u;
}

// `n` small parameters (1 to 64 rows of 256 B), like a unit of many biases and norms.
UnitShape smallParams(int n) {
  UnitShape u{std::to_string(n) + " small float32 parameters, 1-64 rows of 256 B", {}, 64};
  for (int i = 0; i < n; ++i) u.rows.push_back(1 + (i * 37) % 64);
  return u;
}

struct CallCost {
  double hostUs, devUs, wallUs;
  int calls;
};

// fsdp::all_gather + fsdp::reshard of `fulls` per call, under the layout now selected.
CallCost measureCalls(const std::vector<at::Tensor>& fulls, const std::vector<int64_t>& rowList,
                      const c10::IValue& dtype, int calls) {
  auto once = [&] {
    callOp("fsdp::all_gather", {c10::IValue(fulls), c10::IValue(rowList), c10::IValue(std::string("bench")), dtype});
    callOp("fsdp::reshard", {c10::IValue(fulls), c10::IValue(std::string("bench"))});
  };
  once();
  c10::cuda::device_synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) once();
  const auto t1 = std::chrono::steady_clock::now();
  c10::cuda::device_synchronize();
  const auto t2 = std::chrono::steady_clock::now();
  CallCost c;
  c.calls = calls;
  c.hostUs = std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
  c.wallUs = std::chrono::duration<double, std::micro>(t2 - t0).count() / calls;
  c.devUs = deviceMs(calls, once) * 1e3;
  return c;
}

void benchUnit(const UnitShape& shape, int reps) {
  const at::Device dev(at::kCUDA, 0);
  const int64_t rowElems = shape.rowElems;
  const int64_t rowBytes = rowElems * 4;
  const std::vector<int64_t>& rows = shape.rows;
  const size_t np = rows.size();
  int64_t bytes = 0;
  int64_t totalRows = 0;
  std::vector<at::Tensor> fulls;
  for (int64_t r : rows) {
    fulls.push_back(at::randn({r, rowElems}, at::TensorOptions().device(dev)));
    bytes += r * rowBytes;
    totalRows += r;
  }
  std::printf("unit of %s (%s, %lld rows)\n", human(bytes).c_str(), shape.what.c_str(),
              static_cast<long long>(totalRows));

  auto specsFor = [&](at::ScalarType d) {
    std::vector<ParamSpec> s;
    for (int64_t r : rows) s.push_back({r, rowElems * static_cast<int64_t>(c10::elementSize(d))});
    return s;
  };
  const auto byteOpts = at::TensorOptions().dtype(at::kByte).device(dev);
  // copy-in as at world size 1 (the whole unit packed: the same bytes as the full tensors)
  const PackLayout in32(specsFor(at::kFloat), 1);
  const PackLayout in16(specsFor(at::kBFloat16), 1);
  at::Tensor send = at::empty({in32.packedBytes()}, byteOpts);
  at::Tensor src = at::empty({bytes}, byteOpts);
  at::Tensor dst = at::empty({bytes}, byteOpts);
  const std::vector<at::ScalarType> f32s(np, at::kFloat), bf16s(np, at::kBFloat16);

  // The reference every kernel is compared with; a failed copy would make it meaningless.
  auto d2dCopy = [&](int64_t n) {
    C10_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(n),
                                   cudaMemcpyDeviceToDevice, c10::cuda::getCurrentCUDAStream()));
  };
  const double d2d = deviceMs(reps, [&] { d2dCopy(bytes); });
  const double d2dHalf = deviceMs(reps, [&] { d2dCopy(bytes / 2); });
  report("copy-in (pack)", bytes, in32.packedBytes(),
         deviceMs(reps, [&] { rt::copyIn(in32, fulls, f32s, send, "bench"); }), d2d);
  report("copy-in (pack + cast bf16)", bytes, in16.packedBytes(),
         deviceMs(reps, [&] { rt::copyIn(in16, fulls, bf16s, send, "bench"); }), d2dHalf);
  // copy-out of an 8-rank gather (a segment per rank and parameter)
  const PackLayout out8(specsFor(at::kFloat), 8);
  at::Tensor gathered = at::zeros({out8.gatheredBytes()}, byteOpts);
  std::vector<at::Tensor> outs;
  for (int64_t r : rows) outs.push_back(at::empty({r, rowElems}, at::TensorOptions().device(dev)));
  report("copy-out (8 ranks)", bytes, out8.totalFullBytes(),
         deviceMs(reps, [&] { rt::copyOut(out8, gathered, outs, "bench"); }), d2d);
  send = at::Tensor();
  gathered = at::Tensor();
  outs.clear();
  src = at::Tensor();
  dst = at::Tensor();

  // per-call cost of the op at world size 1: under both layouts on the NCCL path
  const bool nccl = std::getenv("FSDP_OPT_CUDA_FORCE_NCCL") != nullptr;
  const rt::GatherLayout envLayout = rt::gatherLayout();
  std::vector<rt::GatherLayout> layouts = {envLayout};
  if (nccl) layouts = {rt::GatherLayout::kPacked, rt::GatherLayout::kPerParam};
  const int calls = bytes >= (1LL << 28) ? std::max(reps, 10)
                    : np > 64           ? std::max(reps, 100)
                                        : std::max(reps, 1000);
  std::vector<int64_t> rowList(rows.begin(), rows.end());
  for (int withCast = 0; withCast < 2; ++withCast) {
    const c10::IValue dtype = withCast ? c10::IValue(static_cast<int64_t>(at::kBFloat16)) : c10::IValue();
    std::vector<CallCost> costs;
    for (rt::GatherLayout l : layouts) {
      rt::setGatherLayout(l);
      costs.push_back(measureCalls(fulls, rowList, dtype, calls));
    }
    rt::setGatherLayout(envLayout);
    std::printf("  fsdp::all_gather+reshard %-9s %10s (%d calls)", withCast ? "bf16" : "own dtype",
                human(bytes).c_str(), calls);
    for (size_t k = 0; k < layouts.size(); ++k) {
      std::printf("%s %s: host %.1f device %.1f wall %.1f us/call", k == 0 ? "" : "  |",
                  nccl ? rt::gatherLayoutName(layouts[k]) : "copy-only", costs[k].hostUs,
                  costs[k].devUs, costs[k].wallUs);
    }
    if (costs.size() == 2) {
      const bool perParamWins = costs[1].wallUs < costs[0].wallUs;
      const double ratio = perParamWins ? costs[0].wallUs / costs[1].wallUs
                                        : costs[1].wallUs / costs[0].wallUs;
      std::printf("  => faster (wall): %s, %.2fx", perParamWins ? "per-param" : "packed", ratio);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!at::cuda::is_available()) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  std::vector<int64_t> sizes = {1LL << 20, 1LL << 30};
  int smallCount = 1024;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      std::stringstream ss(a.substr(8));
      std::string item;
      while (std::getline(ss, item, ',')) sizes.push_back(std::stoll(item));
    } else if (a.rfind("--small-params=", 0) == 0) {
      smallCount = std::stoi(a.substr(15));
    } else if (a.rfind("--reps=", 0) == 0) {
      reps = std::stoi(a.substr(7));
    } else {
      std::fprintf(stderr, "usage: fsdp-gpu-bench [--sizes=B,B...] [--small-params=N] [--reps=N]\n");
      return 2;
    }
  }
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const bool nccl = std::getenv("FSDP_OPT_CUDA_FORCE_NCCL") != nullptr;
  std::printf("fsdp-gpu-bench on %s (%d SMs), %s path at world size 1, NCCL %d\n", prop->name,
              prop->multiProcessorCount,
              nccl ? "NCCL (both gather layouts)" : "copy-only (no gather layout)",
              fsdp_opt::runtime::ncclVersionLinked());
  for (int64_t s : sizes) benchUnit(eightParams(s), reps);
  if (smallCount > 0) benchUnit(smallParams(smallCount), reps);
  return 0;
}
