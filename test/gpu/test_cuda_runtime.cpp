// GPU tests of the CUDA runtime (ctest label `gpu`): the copy kernel against a CPU reference, the
// fsdp:: ops on CUDA tensors at world size 1, and the stream/event protocol. Without a CUDA
// device it prints "skipped: no CUDA device" and exits 77 (ctest: skipped).
//
//   test_cuda_runtime            copy-only path at world size 1
//   FSDP_OPT_CUDA_FORCE_NCCL=1 test_cuda_runtime
//                                the same ops through the NCCL path (a one-rank communicator)
//   FSDP_OPT_CUDA_FORCE_NCCL=1 FSDP_OPT_CUDA_GATHER_LAYOUT=per-param test_cuda_runtime
//                                the same through the parameter-major layout (one grouped
//                                all-gather per parameter, no copy-out)
//   FSDP_OPT_CUDA_GATHER_LAYOUT=bogus test_cuda_runtime --expect-bad-layout
//                                a bad layout name fails the gather, naming the variable
//   test_cuda_runtime --only=copy_,direct_unshard_
//                                only the tests whose names start with one of the prefixes
//                                (scripts/gpu-check.sh runs the copy-kernel tests so under
//                                compute-sanitizer's memcheck)
//   FSDP_OPT_CUDA_FORCE_NCCL=1 FSDP_OPT_TIMEOUT_S=1 test_cuda_runtime --only=prefetch_
//                                a gather queued behind a kernel that runs longer than the
//                                timeout is not aborted: its time counts from its start
//   FSDP_OPT_CUDA_DEBUG_SYNC=1 test_cuda_runtime --expect-kernel-fault
//                                a copy kernel that faults is named by the error
//   FSDP_OPT_CUDA_FORCE_NCCL=1 test_cuda_runtime --expect-watchdog-abort
//                                a kernel fault while a collective is in flight aborts the
//                                communicator with that cause; the process goes on
//
// On the NCCL path, direct unshards (no engine: a non-contiguous shard, casts, an empty
// parameter) also run under both layouts in one process (setGatherLayout), bitwise against the
// CPU reference.
//
// No GoogleTest: a GPU machine may not have it; the harness is the few lines below.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective_backend.h"
#include "cuda/cuda_data_path.h"
#include "fsdp_opt/runtime/runtime.h"
#include "process_group.h"
#include "shard_layout.h"
#include "data_path.h"

namespace {

int g_passed = 0;
int g_failed = 0;
std::vector<std::string> g_only;  // --only: name prefixes; empty: every test

struct Failure : std::exception {
  std::string msg;
  explicit Failure(std::string m) : msg(std::move(m)) {}
  const char* what() const noexcept override { return msg.c_str(); }
};

void expect(bool ok, const std::string& what) {
  if (!ok) throw Failure(what);
}

// `ownRun`: a test that needs settings of its own (a short timeout) and runs only when --only
// selects it (its own ctest entry).
void run(const char* name, const std::function<void()>& fn, bool ownRun = false) {
  const bool selected = std::any_of(g_only.begin(), g_only.end(), [&](const std::string& p) {
    return std::string(name).rfind(p, 0) == 0;
  });
  if (ownRun ? !selected : !g_only.empty() && !selected) return;
  try {
    fn();
    ++g_passed;
    std::printf("PASS %s\n", name);
  } catch (const std::exception& e) {
    ++g_failed;
    std::printf("FAIL %s: %s\n", name, e.what());
  }
  std::fflush(stdout);
}

bool sameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.detach().cpu().contiguous();
  at::Tensor y = b.detach().cpu().contiguous();
  return x.numel() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Finite values over a wide range of magnitudes (subnormals, overflow past half's range, +-0).
at::Tensor randomFull(std::vector<int64_t> shape, at::ScalarType dtype, int64_t seed) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  if (!at::isFloatingType(dtype)) {
    return at::randint(-1000000, 1000000, shape, gen, at::TensorOptions().dtype(dtype));
  }
  at::Tensor x = at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble));
  at::Tensor e = at::randint(-150, 90, shape, gen, at::TensorOptions().dtype(at::kDouble));
  x = x * at::pow(2.0, e);
  x.view(-1).slice(0, 0, c10::nullopt, 7).zero_();
  return x.to(dtype);
}

at::Tensor shardOf(const at::Tensor& full, int64_t world, int64_t rank) {
  const int64_t n = full.size(0);
  const int64_t c = fsdp_opt::layout::shardRows(n, world);
  const int64_t b = std::min(rank * c, n);
  const int64_t e = std::min((rank + 1) * c, n);
  at::Tensor rows = full.slice(0, b, e);
  std::vector<int64_t> padShape = full.sizes().vec();
  padShape[0] = c - (e - b);
  return at::cat({rows, at::zeros(padShape, full.options())}).contiguous();
}

c10::ScalarType gatheredDtype(c10::ScalarType own, c10::optional<c10::ScalarType> pd) {
  return pd && at::isFloatingType(own) ? *pd : own;
}

// ---- the copy kernel against the CPU reference ----------------------------------------------

struct Spec {
  std::vector<int64_t> shape;
  at::ScalarType own;
};

// Every rank's copy-in into its chunk of one gathered buffer (what the all-gather produces),
// then the copy-out: fulls must be bitwise full.to(dtype) of the CPU originals, and each rank's
// packed chunk bitwise packCpu of the CPU-cast shards.
void copyRoundTrip(const std::vector<Spec>& specs, int64_t world, c10::optional<at::ScalarType> pd,
                   int misalign) {
  const at::Device dev(at::kCUDA, 0);
  std::vector<at::Tensor> fulls;
  std::vector<fsdp_opt::layout::ParamSpec> lspecs;
  std::vector<at::ScalarType> dtypes;
  for (size_t i = 0; i < specs.size(); ++i) {
    fulls.push_back(randomFull(specs[i].shape, specs[i].own, 100 + static_cast<int64_t>(i)));
    const at::ScalarType d = gatheredDtype(specs[i].own, pd);
    dtypes.push_back(d);
    int64_t rowBytes = static_cast<int64_t>(c10::elementSize(d));
    for (size_t k = 1; k < specs[i].shape.size(); ++k) rowBytes *= specs[i].shape[k];
    lspecs.push_back({specs[i].shape[0], rowBytes});
  }
  const fsdp_opt::layout::PackLayout layout(lspecs, world);
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(dev);
  at::Tensor gathered = at::full({layout.gatheredBytes()}, 0xAB, bytes);
  for (int64_t r = 0; r < world; ++r) {
    std::vector<at::Tensor> shards;
    std::vector<at::Tensor> keep;
    std::vector<const void*> castPtrs;
    for (size_t i = 0; i < specs.size(); ++i) {
      at::Tensor s = shardOf(fulls[i], world, r);
      // a misaligned copy on the device: a view `misalign` elements into a bigger buffer
      at::Tensor big = at::empty({s.numel() + misalign}, s.options().device(dev));
      at::Tensor view = big.narrow(0, misalign, s.numel()).view(s.sizes());
      view.copy_(s);
      shards.push_back(view);
      keep.push_back(s.to(dtypes[i]).contiguous());
      castPtrs.push_back(keep.back().data_ptr());
    }
    at::Tensor send = at::full({layout.packedBytes()}, 0xEE, bytes);
    fsdp_opt::runtime::detail::cuda::copyIn(layout, shards, dtypes, send, "copyRoundTrip");
    gathered.narrow(0, r * layout.packedBytes(), layout.packedBytes()).copy_(send);
    std::vector<uint8_t> ref(static_cast<size_t>(layout.packedBytes()));
    fsdp_opt::layout::packCpu(layout, castPtrs, ref.data());
    at::Tensor got = send.cpu();
    expect(ref.empty() || std::memcmp(got.data_ptr(), ref.data(), ref.size()) == 0,
           "copy-in of rank " + std::to_string(r) + " differs from packCpu of the cast shards");
  }
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < specs.size(); ++i) {
    outs.push_back(at::full(specs[i].shape, 0, at::TensorOptions().dtype(dtypes[i]).device(dev)));
  }
  fsdp_opt::runtime::detail::cuda::copyOut(layout, gathered, outs, "copyRoundTrip");
  for (size_t i = 0; i < specs.size(); ++i) {
    expect(sameBits(outs[i], fulls[i].to(dtypes[i])),
           "param " + std::to_string(i) + " is not bitwise full.to(" +
               std::string(c10::toString(dtypes[i])) + ") at world size " + std::to_string(world));
  }
}

// ---- the ops -----------------------------------------------------------------------------

std::vector<c10::IValue> callOp(const char* name, const char* overload,
                                std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  std::vector<c10::IValue> stack(std::make_move_iterator(args.begin()),
                                 std::make_move_iterator(args.end()));
  op.callBoxed(&stack);
  return stack;
}

c10::IValue dtypeArg(c10::optional<at::ScalarType> pd) {
  return pd ? c10::IValue(static_cast<int64_t>(*pd)) : c10::IValue();
}

struct Unit {
  std::vector<at::Tensor> fulls;   // CPU
  std::vector<at::Tensor> params;  // on the GPU, what a module holds (world size 1: full)
  std::vector<int64_t> rows;
  std::vector<void*> ptrs;
};

// fsdp::all_gather / fsdp::reshard of a whole unit, on the current stream.
void gatherUnit(const Unit& u, const char* name, c10::optional<at::ScalarType> pd) {
  callOp("fsdp::all_gather", "", {c10::IValue(u.params), c10::IValue(u.rows),
                                  c10::IValue(std::string(name)), dtypeArg(pd)});
}
void reshardUnit(const Unit& u, const char* name) {
  callOp("fsdp::reshard", "", {c10::IValue(u.params), c10::IValue(std::string(name))});
}

Unit makeUnit(const std::vector<Spec>& specs, int64_t seed) {
  Unit u;
  for (size_t i = 0; i < specs.size(); ++i) {
    u.fulls.push_back(randomFull(specs[i].shape, specs[i].own, seed + static_cast<int64_t>(i)));
    at::Tensor p = u.fulls.back().to(at::kCUDA).clone();
    p.set_requires_grad(at::isFloatingType(specs[i].own));
    u.params.push_back(p);
    u.rows.push_back(specs[i].shape[0]);
    u.ptrs.push_back(p.data_ptr());
  }
  c10::cuda::device_synchronize();  // the tests below use other streams
  return u;
}

void checkFull(const Unit& u, c10::optional<at::ScalarType> pd) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    const at::Tensor want = u.fulls[i].to(gatheredDtype(u.fulls[i].scalar_type(), pd));
    expect(sameBits(u.params[i], want), "param " + std::to_string(i) + " is not bitwise full.to(" +
                                            std::string(c10::toString(want.scalar_type())) + ")");
  }
}

void checkSharded(const Unit& u) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    expect(u.params[i].data_ptr() == u.ptrs[i], "param " + std::to_string(i) + " left its storage");
    expect(sameBits(u.params[i], u.fulls[i]), "param " + std::to_string(i) + " changed");
  }
}

const std::vector<Spec>& unitSpecs() {
  static const std::vector<Spec> s = {{{10, 3}, at::kFloat}, {{2, 5}, at::kDouble},
                                      {{7}, at::kLong},      {{1, 4, 2}, at::kHalf},
                                      {{0, 3}, at::kFloat},  {{13}, at::kBFloat16},
                                      {{300, 70}, at::kFloat}};
  return s;
}

// One unshard straight through startCudaUnshard (world size 1), without the engine: the shard
// of parameter 0 is non-contiguous (a transposed tensor), so the per-param layout copies it
// into its slot with a strided copy, and the packed one makes it contiguous first. Every full
// tensor must be bitwise full.to(dtype), contiguous, of fullRows rows.
void directUnshard(c10::optional<at::ScalarType> pd) {
  namespace d = fsdp_opt::runtime::detail;
  d::ensureGroup();
  const at::Device dev(at::kCUDA, 0);
  std::vector<at::Tensor> cpuFulls;
  d::UnshardRequest req;
  req.device = dev;
  req.rank = 0;
  req.world = 1;
  cpuFulls.push_back(randomFull({5, 7}, at::kFloat, 60).t());  // [7, 5], non-contiguous
  for (const Spec& sp : unitSpecs()) {
    cpuFulls.push_back(randomFull(sp.shape, sp.own, 61 + static_cast<int64_t>(cpuFulls.size())));
  }
  for (const at::Tensor& f : cpuFulls) {
    at::Tensor g = f.is_contiguous() ? f.to(dev) : f.t().to(dev).t();  // keeps the strides
    req.shards.push_back(g);
    req.fullRows.push_back(f.size(0));
    req.dtypes.push_back(gatheredDtype(f.scalar_type(), pd));
  }
  expect(!req.shards[0].is_contiguous(), "the test's shard 0 should be non-contiguous");
  c10::cuda::device_synchronize();
  auto pending = d::cuda::startCudaUnshard(req, "direct");
  pending->finish();
  for (size_t i = 0; i < cpuFulls.size(); ++i) {
    const at::Tensor& f = pending->fulls()[i];
    const at::Tensor want = cpuFulls[i].to(req.dtypes[i]);
    const at::Tensor got = f.defined() ? f : req.shards[i];  // undefined: the shard is the full
    expect(!f.defined() || (f.is_contiguous() && f.size(0) == req.fullRows[i]),
           "full " + std::to_string(i) + " is not a contiguous tensor of fullRows rows");
    expect(sameBits(got, want), "direct unshard: param " + std::to_string(i) +
                                    " is not bitwise full.to(" +
                                    std::string(c10::toString(req.dtypes[i])) + ")");
  }
}

int64_t stat(const char* key) {
  auto items = fsdp_opt::runtime::stats().items();
  for (const auto& kv : items) {
    if (kv.first == key) return kv.second;
  }
  return -1;
}

// FSDP_OPT_CUDA_GATHER_LAYOUT holds a bad value: every CUDA gather must fail, naming it.
int expectBadLayout() {
  Unit u = makeUnit(unitSpecs(), 70);
  try {
    callOp("fsdp::all_gather", "", {c10::IValue(u.params), c10::IValue(u.rows),
                                    c10::IValue(std::string("bad")), c10::IValue()});
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    const bool ok = msg.find("FSDP_OPT_CUDA_GATHER_LAYOUT") != std::string::npos &&
                    msg.find("per-param") != std::string::npos;
    std::printf("%s bad_layout_is_an_error: %s\n", ok ? "PASS" : "FAIL", msg.substr(0, 300).c_str());
    return ok ? 0 : 1;
  }
  std::printf("FAIL bad_layout_is_an_error: the gather succeeded\n");
  return 1;
}

// A copy plan whose source is an address no allocation covers: the kernel faults.
fsdp_opt::copyplan::CopyPlan faultingPlan(void* dst) {
  fsdp_opt::copyplan::CopyPlan plan;
  plan.addCopy(reinterpret_cast<const void*>(0x100), dst, 4096);
  return plan;
}

// Leaves without running destructors or atexit handlers: after a kernel fault the CUDA context
// is unusable, and tearing torch down on it only adds noise to the log.
[[noreturn]] void leave(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

// FSDP_OPT_CUDA_DEBUG_SYNC=1: a faulting copy kernel is reported by its own launch, named.
int expectKernelFault() {
  namespace cu = fsdp_opt::runtime::detail::cuda;
  at::Tensor dst = at::empty({4096}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  c10::cuda::device_synchronize();
  try {
    cu::launchPlan(faultingPlan(dst.data_ptr()), c10::cuda::getCurrentCUDAStream(), "a planted fault");
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    const bool ok = msg.find("a planted fault") != std::string::npos &&
                    msg.find("FSDP_OPT_CUDA_DEBUG_SYNC") != std::string::npos;
    std::printf("%s kernel_fault_is_named: %s\n", ok ? "PASS" : "FAIL", msg.c_str());
    leave(ok ? 0 : 1);
  }
  std::printf("FAIL kernel_fault_is_named: no error from the launch (is FSDP_OPT_CUDA_DEBUG_SYNC=1 set?)\n");
  leave(1);
}

// A collective is in flight (queued behind a sleep) when a kernel on another stream faults:
// the watchdog's event query throws, and it must abort the communicator with that cause instead
// of terminating the process; the wait then reports it.
int expectWatchdogAbort(const std::vector<int64_t>& rows, std::vector<at::Tensor> params) {
  namespace cu = fsdp_opt::runtime::detail::cuda;
  if (std::getenv("FSDP_OPT_CUDA_FORCE_NCCL") == nullptr) {
    std::printf("FAIL watchdog_aborts_on_a_fault: needs FSDP_OPT_CUDA_FORCE_NCCL=1 (a collective to watch)\n");
    return 1;
  }
  at::cuda::sleep(1000LL * 1000 * 1000);  // about half a second: the gather queues behind it
  auto h = callOp("fsdp::all_gather_start", "",
                  {c10::IValue(params), c10::IValue(rows), c10::IValue(std::string("f")), c10::IValue()});
  c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 0);
  at::Tensor dst = at::empty({4096}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  cu::launchPlan(faultingPlan(dst.data_ptr()), other, "a planted fault");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the watchdog polls every 100 ms
  try {
    callOp("fsdp::all_gather_wait", "", {h.at(0)});
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    const bool ok = msg.find("the communicator was aborted") != std::string::npos;
    std::printf("%s watchdog_aborts_on_a_fault: %s\n", ok ? "PASS" : "FAIL", msg.c_str());
    leave(ok ? 0 : 1);
  }
  std::printf("FAIL watchdog_aborts_on_a_fault: the wait succeeded after a kernel fault\n");
  leave(1);
}

}  // namespace

int main(int argc, char** argv) {
  // Arguments first, so a dry run on a machine without a GPU still checks them.
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode.rfind("--only=", 0) == 0) {
    std::stringstream prefixes(mode.substr(7));
    for (std::string p; std::getline(prefixes, p, ',');) g_only.push_back(p);
  } else if (!mode.empty() && mode != "--expect-bad-layout" && mode != "--expect-kernel-fault" &&
             mode != "--expect-watchdog-abort") {
    std::fprintf(stderr, "usage: test_cuda_runtime [--only=PREFIX,...|--expect-bad-layout|"
                 "--expect-kernel-fault|--expect-watchdog-abort]\n");
    return 2;
  }
  if (!at::cuda::is_available()) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  namespace cu = fsdp_opt::runtime::detail::cuda;
  if (mode == "--expect-bad-layout") return expectBadLayout();
  if (mode == "--expect-kernel-fault") return expectKernelFault();
  if (mode == "--expect-watchdog-abort") {
    Unit u = makeUnit({{{1024, 256}, at::kFloat}}, 80);
    return expectWatchdogAbort(u.rows, u.params);
  }
  const bool nccl = std::getenv("FSDP_OPT_CUDA_FORCE_NCCL") != nullptr;
  const cu::GatherLayout envLayout = cu::gatherLayout();
  std::printf("CUDA runtime tests on %s (%s path at world size 1, %s layout), NCCL %d\n",
              at::cuda::getCurrentDeviceProperties()->name, nccl ? "NCCL" : "copy-only",
              cu::gatherLayoutName(envLayout), fsdp_opt::runtime::ncclVersionLinked());
  expect(fsdp_opt::runtime::hasCudaBackend(), "runtime built without the CUDA backend");
  run("layout_from_the_environment", [&] {
    const char* v = std::getenv("FSDP_OPT_CUDA_GATHER_LAYOUT");
    const std::string want = v == nullptr || *v == '\0' ? "packed" : v;
    expect(want == cu::gatherLayoutName(envLayout), "FSDP_OPT_CUDA_GATHER_LAYOUT=" + want +
                                                        " but the runtime uses " +
                                                        cu::gatherLayoutName(envLayout));
  });

  const at::ScalarType f16 = at::kHalf, bf16 = at::kBFloat16, f32 = at::kFloat, f64 = at::kDouble;
  for (int64_t w = 1; w <= 4; ++w) {
    for (c10::optional<at::ScalarType> pd : {c10::optional<at::ScalarType>(), c10::optional<at::ScalarType>(bf16),
                                             c10::optional<at::ScalarType>(f16), c10::optional<at::ScalarType>(f32),
                                             c10::optional<at::ScalarType>(f64)}) {
      const std::string name = "copy_roundtrip_w" + std::to_string(w) + "_" +
                               (pd ? std::string(c10::toString(*pd)) : std::string("own"));
      run(name.c_str(), [&] {
        copyRoundTrip(unitSpecs(), w, pd, 0);
        copyRoundTrip(unitSpecs(), w, pd, 1);
      });
    }
  }
  run("copy_roundtrip_many_segments", [&] {
    std::vector<Spec> many;
    for (int i = 0; i < 90; ++i) many.push_back({{1 + i % 5, 3}, i % 2 ? f32 : bf16});
    copyRoundTrip(many, 3, c10::optional<at::ScalarType>(f16), 0);  // > 64 segments: uploaded
  });
  run("copy_roundtrip_large", [&] {
    copyRoundTrip({{{4099, 1025}, f32}, {{77, 3}, f64}}, 4, c10::optional<at::ScalarType>(bf16), 0);
  });

  for (c10::optional<at::ScalarType> pd :
       {c10::optional<at::ScalarType>(), c10::optional<at::ScalarType>(bf16), c10::optional<at::ScalarType>(f16)}) {
    const std::string name = std::string("all_gather_w1_") + (pd ? c10::toString(*pd) : "own");
    run(name.c_str(), [&] {
      Unit u = makeUnit(unitSpecs(), 10);
      fsdp_opt::runtime::resetStats();
      callOp("fsdp::all_gather", "", {c10::IValue(u.params), c10::IValue(u.rows),
                                      c10::IValue(std::string("u")), dtypeArg(pd)});
      checkFull(u, pd);
      if (!pd && !nccl) {
        for (size_t i = 0; i < u.params.size(); ++i) {
          expect(u.params[i].data_ptr() == u.ptrs[i], "world size 1 without a cast copied");
        }
      }
      expect(stat("all_gathers") == 1, "all_gathers != 1");
      callOp("fsdp::reshard", "", {c10::IValue(u.params), c10::IValue(std::string("u"))});
      checkSharded(u);
    });
  }

  run("start_wait_w1", [&] {
    Unit u = makeUnit(unitSpecs(), 20);
    auto h = callOp("fsdp::all_gather_start", "",
                    {c10::IValue(u.params), c10::IValue(u.rows), c10::IValue(std::string("s")),
                     dtypeArg(bf16)});
    checkSharded(u);
    expect(stat("in_flight") == 1, "in_flight != 1 after start");
    at::Tensor x = at::randn({512, 512}, at::kCUDA);
    at::Tensor y = at::mm(x, x);  // work between start and wait
    callOp("fsdp::all_gather_wait", "", {h.at(0)});
    checkFull(u, bf16);
    expect(y.size(0) == 512, "work between start and wait");
    callOp("fsdp::reshard", "", {c10::IValue(u.params), c10::IValue(std::string("s"))});
    checkSharded(u);
  });

  run("release_all_drops_cuda_handle", [&] {
    Unit u = makeUnit(unitSpecs(), 30);
    callOp("fsdp::all_gather_start", "",
           {c10::IValue(u.params), c10::IValue(u.rows), c10::IValue(std::string("r")), dtypeArg(f16)});
    callOp("fsdp::release_all", "", {});
    checkSharded(u);
    expect(stat("in_flight") == 0 && stat("unsharded_bytes") == 0, "state after release_all");
  });

  run("gather_waits_for_the_callers_stream", [&] {
    // The shards are written on a side stream behind a long sleep; the gather must see them.
    Unit u = makeUnit({{{1024, 256}, f32}}, 40);
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
    {
      c10::cuda::CUDAStreamGuard g(side);
      at::cuda::sleep(50 * 1000 * 1000);
      u.params[0].detach().fill_(1.5);
    }
    c10::cuda::CUDAStreamGuard g(side);
    callOp("fsdp::all_gather", "", {c10::IValue(u.params), c10::IValue(u.rows),
                                    c10::IValue(std::string("w")), dtypeArg(bf16)});
    at::Tensor sum = u.params[0].to(at::kDouble).sum();  // on `side`, after the gather
    expect(sum.item<double>() == 1.5 * 1024 * 256, "the gather did not wait for the caller's stream");
    callOp("fsdp::reshard", "", {c10::IValue(u.params), c10::IValue(std::string("w"))});
  });

  run("full_buffer_outlives_reads_on_the_callers_stream", [&] {
    // Unit A is gathered and read on stream S1 behind a sleep, then resharded at once (host).
    // Unit B (same size) is then gathered from stream S2. Without recordStream, B's full buffer
    // could reuse A's memory while S1 still has to read it.
    Unit a = makeUnit({{{2048, 512}, f32}}, 50);
    Unit b = makeUnit({{{2048, 512}, f32}}, 51);
    c10::cuda::CUDAStream s1 = c10::cuda::getStreamFromPool(false, 0);
    c10::cuda::CUDAStream s2 = c10::cuda::getStreamFromPool(false, 0);
    at::Tensor readA;
    {
      c10::cuda::CUDAStreamGuard g(s1);
      callOp("fsdp::all_gather", "", {c10::IValue(a.params), c10::IValue(a.rows),
                                      c10::IValue(std::string("a")), dtypeArg(bf16)});
      at::cuda::sleep(100 * 1000 * 1000);
      readA = a.params[0].clone();  // read on s1 after the sleep
      callOp("fsdp::reshard", "", {c10::IValue(a.params), c10::IValue(std::string("a"))});
    }
    {
      c10::cuda::CUDAStreamGuard g(s2);
      callOp("fsdp::all_gather", "", {c10::IValue(b.params), c10::IValue(b.rows),
                                      c10::IValue(std::string("b")), dtypeArg(bf16)});
      callOp("fsdp::reshard", "", {c10::IValue(b.params), c10::IValue(std::string("b"))});
    }
    s1.synchronize();
    expect(sameBits(readA, a.fulls[0].to(bf16)), "A's gathered data was overwritten before S1 read it");
  });

  run("nested_gather_from_another_stream_waits_for_the_gather", [&] {
    // Unit U is gathered from S1 behind a long sleep, so its buffer is filled late. A nested
    // gather of U from S2 returns at once (U is gathered already); S2's read must still come
    // after the gather's kernels, not read the buffer before they wrote it.
    Unit u = makeUnit({{{1024, 256}, f32}}, 90);
    c10::cuda::CUDAStream s1 = c10::cuda::getStreamFromPool(false, 0);
    c10::cuda::CUDAStream s2 = c10::cuda::getStreamFromPool(false, 0);
    {
      c10::cuda::CUDAStreamGuard g(s1);
      at::cuda::sleep(100 * 1000 * 1000);
      gatherUnit(u, "n", bf16);
    }
    at::Tensor seen;
    {
      c10::cuda::CUDAStreamGuard g(s2);
      gatherUnit(u, "n", bf16);
      seen = u.params[0].clone();  // on S2, queued right away
      reshardUnit(u, "n");
    }
    {
      c10::cuda::CUDAStreamGuard g(s1);
      reshardUnit(u, "n");
    }
    c10::cuda::device_synchronize();
    expect(sameBits(seen, u.fulls[0].to(bf16)),
           "S2 read the full buffer before the gather (waited on S1) had written it");
    checkSharded(u);
  });

  run("nested_gather_keeps_the_buffer_for_the_other_stream", [&] {
    // U is gathered from S1 and again (nested) from S2, which reads it behind a long sleep;
    // both reshards happen at once on the host. Unit V, of the same size, is then gathered from
    // S1: unless U's buffer was recorded on S2 by the nested gather, the caching allocator may
    // hand it to V while S2 still has to read it.
    Unit u = makeUnit({{{2048, 512}, f32}}, 91);
    Unit v = makeUnit({{{2048, 512}, f32}}, 92);
    c10::cuda::CUDAStream s1 = c10::cuda::getStreamFromPool(false, 0);
    c10::cuda::CUDAStream s2 = c10::cuda::getStreamFromPool(false, 0);
    at::Tensor seen;
    {
      c10::cuda::CUDAStreamGuard g(s1);
      gatherUnit(u, "u", bf16);
    }
    {
      c10::cuda::CUDAStreamGuard g(s2);
      gatherUnit(u, "u", bf16);
      at::cuda::sleep(100 * 1000 * 1000);
      seen = u.params[0].clone();
      reshardUnit(u, "u");
    }
    {
      c10::cuda::CUDAStreamGuard g(s1);
      reshardUnit(u, "u");
      gatherUnit(v, "v", bf16);
      reshardUnit(v, "v");
    }
    c10::cuda::device_synchronize();
    expect(sameBits(seen, u.fulls[0].to(bf16)),
           "U's full buffer was reused while S2 (a nested gather's stream) still had to read it");
  });

  run("prefetch_behind_a_long_kernel_is_not_timed_out", [&] {
    // Run with FSDP_OPT_CUDA_FORCE_NCCL=1 and a short FSDP_OPT_TIMEOUT_S (ctest: 1 s): the
    // collective is queued behind a kernel that runs about twice the timeout. Its time counts
    // from its start, so the communicator must survive and the result be right.
    const double timeout = static_cast<double>(fsdp_opt::runtime::defaultTimeout().count()) / 1000.0;
    expect(nccl && timeout <= 2.0, "needs FSDP_OPT_CUDA_FORCE_NCCL=1 and FSDP_OPT_TIMEOUT_S <= 2");
    Unit u = makeUnit({{{512, 64}, f32}}, 93);
    int khz = 0;  // the peak clock: the sleep lasts at least this long
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    at::cuda::sleep(static_cast<int64_t>(2.5 * timeout * 1000.0 * khz));
    const auto t0 = std::chrono::steady_clock::now();
    auto h = callOp("fsdp::all_gather_start", "", {c10::IValue(u.params), c10::IValue(u.rows),
                                                  c10::IValue(std::string("p")), c10::IValue()});
    callOp("fsdp::all_gather_wait", "", {h.at(0)});
    at::Tensor seen = u.params[0].clone();
    c10::cuda::device_synchronize();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect(waited > timeout, "the kernel ahead of the gather ran " + std::to_string(waited) +
                                 " s, not longer than the timeout: the test proves nothing");
    expect(sameBits(seen, u.fulls[0]), "the gathered parameter is wrong");
    reshardUnit(u, "p");
    gatherUnit(u, "p", c10::nullopt);  // the communicator is still usable
    reshardUnit(u, "p");
    checkSharded(u);
  }, /*ownRun=*/true);

  // Direct unshards under each layout the path has (both on the NCCL path), then back to the
  // environment's layout.
  std::vector<cu::GatherLayout> layouts = {cu::GatherLayout::kPacked};
  if (nccl) layouts.push_back(cu::GatherLayout::kPerParam);
  for (cu::GatherLayout l : layouts) {
    for (c10::optional<at::ScalarType> pd : {c10::optional<at::ScalarType>(),
                                             c10::optional<at::ScalarType>(bf16),
                                             c10::optional<at::ScalarType>(f64)}) {
      const std::string name = std::string("direct_unshard_") + cu::gatherLayoutName(l) + "_" +
                               (pd ? std::string(c10::toString(*pd)) : std::string("own"));
      run(name.c_str(), [&] {
        cu::setGatherLayout(l);
        directUnshard(pd);
      });
    }
  }
  cu::setGatherLayout(envLayout);

  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  if (g_passed + g_failed == 0) {
    std::printf("FAIL: no test matched %s\n", mode.c_str());
    return 1;
  }
  return g_failed == 0 ? 0 : 1;
}
