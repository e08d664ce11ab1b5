// The CUDA unshard path: streams, events, buffer lifetime, and the copy kernel's plans. The
// collective itself is the NCCL backend's (nccl_backend.cpp); everything here also runs at
// world size 1, where there is no NCCL call. Two layouts for the NCCL path: packed (one
// all-gather per unit, copy-in and copy-out kernels) and per-param (one all-gather per
// parameter in one NCCL group, no copy-out). See cuda_data_path.h for the protocol.
#include "cuda_data_path.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "../collective.h"
#include "../collective_backend.h"
#include "../environment.h"
#include "../errors.h"
#include "../process_group.h"
#include "copy_kernels.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace cuda {
namespace {

using copyplan::ElemType;

// FSDP_OPT_CUDA_FORCE_NCCL=1: at world size 1, take the NCCL path (copy-in, a one-rank
// communicator's all-gather, copy-out) instead of the copy-only one. For testing that path on
// a machine with one GPU; read once.
bool forceNccl() {
  static const bool value = envSwitch("FSDP_OPT_CUDA_FORCE_NCCL");
  return value;
}

// FSDP_OPT_CUDA_DEBUG_SYNC=1: synchronise after every copy-kernel launch, so a fault is
// reported by the launch that caused it (named) instead of by whatever CUDA call comes next.
// Costs the overlap of gathers with compute; for debugging. Read once.
bool debugSync() {
  static const bool value = envSwitch("FSDP_OPT_CUDA_DEBUG_SYNC");
  return value;
}

// FSDP_OPT_CUDA_GATHER_LAYOUT, read once; a process may override it (setGatherLayout).
std::atomic<int> g_layoutOverride{-1};

GatherLayout layoutFromEnv() {
  static const GatherLayout value = [] {
    const char* v = envValue("FSDP_OPT_CUDA_GATHER_LAYOUT");
    const std::string s = v == nullptr ? "" : v;
    if (s.empty() || s == "packed") return GatherLayout::kPacked;
    if (s == "per-param") return GatherLayout::kPerParam;
    raise(ErrorKind::kBadInput, c10::str("fsdp: FSDP_OPT_CUDA_GATHER_LAYOUT=", s,
                                         " is not a gather layout; use packed (the default) or "
                                         "per-param"));
  }();  // a bad value throws here, and again at every later gather (the static stays unset)
  return value;
}

// The kernel's (source, destination) types for copying `from` into `to`: plain bytes when
// they are the same dtype.
void kernelTypes(at::ScalarType from, at::ScalarType to, ElemType& src, ElemType& dst) {
  if (from == to) {
    src = dst = ElemType::kBytes;
    return;
  }
  FSDP_CHECK(elemTypeOf(from, src) && elemTypeOf(to, dst), ErrorKind::kInternal,
             "fsdp: the CUDA copy kernel does not convert ", from, " to ", to);
}

// The completion of one CUDA unshard, kept by its groups for nested gathers (data_path.h).
class CudaNestedGatherHook final : public NestedGatherHook {
 public:
  explicit CudaNestedGatherHook(c10::Device device) : device_(device) {}

  at::cuda::CUDAEvent& done() { return done_; }

  /// The caller's current stream waits for the unshard (once per stream: later work on a stream
  /// is ordered after earlier work anyway).
  void orderStream(const c10::cuda::CUDAStream& stream) {
    if (std::find(ordered_.begin(), ordered_.end(), stream.id()) != ordered_.end()) return;
    done_.block(stream);
    ordered_.push_back(stream.id());
  }

  void orderCurrentStream(const at::Tensor& param) override {
    c10::cuda::CUDAGuard deviceGuard(device_);
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    orderStream(caller);
    c10::cuda::CUDACachingAllocator::recordStream(param.storage().data_ptr(), caller);
  }

 private:
  c10::Device device_;
  at::cuda::CUDAEvent done_;
  std::vector<c10::StreamId> ordered_;
};

class CudaUnshard final : public PendingUnshard {
 public:
  CudaUnshard(const UnshardRequest& req, const std::string& context)
      : device_(req.device), hook_(std::make_shared<CudaNestedGatherHook>(req.device)) {
    const size_t n = req.shards.size();
    fulls_.resize(n);
    const bool collective = req.world > 1 || forceNccl();
    const bool perParam = gatherLayout() == GatherLayout::kPerParam;  // checks the variable
    perParam_ = collective && perParam;
    std::vector<size_t> work;  // groups that need a full buffer
    for (size_t i = 0; i < n; ++i) {
      if (collective || req.shards[i].scalar_type() != req.dtypes[i]) work.push_back(i);
    }
    if (work.empty()) return;  // world size 1, no cast: the shards are the full tensors

    // The fingerprint goes first, through the host channel (envelope.h): the host learns that
    // every rank issues this collective, with the same sizes, before anything is queued and
    // without waiting for the GPU (an NCCL envelope's result would only reach the host after a
    // synchronisation). Unlike the CPU path, this makes all_gather_start wait for its peers'
    // starts: deferring the enqueueing of the kernels to another thread is not worth it here.
    std::unique_lock<std::mutex> order;
    if (req.world > 1) {
      std::vector<layout::ParamSpec> specs;
      for (size_t i = 0; i < n; ++i) {
        specs.push_back(layout::ParamSpec{req.fullRows[i], rowBytesAs(req.shards[i], req.dtypes[i])});
      }
      const int64_t payload = perParam_ ? layout::ParamMajorLayout(specs, req.world).totalShardBytes()
                                        : layout::PackLayout(specs, req.world).packedBytes();
      if (payload > 0) {
        CollectiveSpec spec = gatherSpec(context, n, payload);
        spec.identity = gatherIdentity(req, perParam_ ? "per-param" : "packed", payload);
        spec.device = req.device;
        order = announceOnHost(spec);
      }
    }

    c10::cuda::CUDAGuard deviceGuard(device_);
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    const c10::cuda::CUDAStream gather = gatherStream(device_.index());
    // The shards may have just been written on the caller's stream.
    at::cuda::CUDAEvent ready;
    ready.record(caller);
    ready.block(gather);

    c10::cuda::CUDAStreamGuard onGather(gather);
    std::vector<at::Tensor> sources(n);
    std::vector<at::Tensor> buffers(n);  // per-param: each parameter's W * shardRows rows
    for (size_t i : work) {
      const at::Tensor& shard = req.shards[i];
      // The shard's memory belongs to the caller's stream; this stream reads it now.
      c10::cuda::CUDACachingAllocator::recordStream(shard.storage().data_ptr(), gather);
      at::Tensor s = shard;
      ElemType from, to;
      if (s.scalar_type() != req.dtypes[i] &&
          !(elemTypeOf(s.scalar_type(), from) && elemTypeOf(req.dtypes[i], to))) {
        s = s.to(req.dtypes[i]);  // a dtype the kernel does not convert (float8, ...): torch's cast
      }
      // The copy kernel reads contiguous memory. Per-param, a shard that needs no cast stays as
      // it is: sent directly when contiguous, else copied (strided) into its slot.
      const bool cast = s.scalar_type() != req.dtypes[i];
      sources[i] = perParam_ && !cast ? s : s.contiguous();
      // Allocated on the gather stream, now: a started gather holds its memory from here on.
      const auto opts = at::TensorOptions().dtype(req.dtypes[i]).device(device_);
      if (perParam_) {
        const int64_t rows = req.world * layout::shardRows(req.fullRows[i], req.world);
        buffers[i] = at::empty(fullSizes(shard, rows), opts);
        fulls_[i] = buffers[i].narrow(0, 0, req.fullRows[i]);  // a view: the padding rows trail it
      } else {
        fulls_[i] = at::empty(fullSizes(shard, req.fullRows[i]), opts);
      }
    }

    if (perParam_) {
      startPerParam(req, context, sources, buffers);
    } else if (!collective) {
      copyplan::CopyPlan plan;
      for (size_t i : work) {
        ElemType src, dst;
        kernelTypes(sources[i].scalar_type(), req.dtypes[i], src, dst);
        plan.addCast(sources[i].data_ptr(), src, fulls_[i].data_ptr(), dst,
                     src == ElemType::kBytes ? sources[i].nbytes() : sources[i].numel());
      }
      launchPlan(plan, gather, "the param_dtype cast of " + context);
    } else {
      std::vector<layout::ParamSpec> specs;
      for (size_t i = 0; i < n; ++i) {
        specs.push_back(layout::ParamSpec{req.fullRows[i], rowBytesAs(req.shards[i], req.dtypes[i])});
      }
      const layout::PackLayout layout(std::move(specs), req.world);
      bytesPerRank_ = layout.packedBytes();
      const auto byteOpts = at::TensorOptions().dtype(at::kByte).device(device_);
      at::Tensor send = at::empty({layout.packedBytes()}, byteOpts);
      at::Tensor recv = at::empty({layout.gatheredBytes()}, byteOpts);
      copyIn(layout, sources, req.dtypes, send, context);
      std::shared_ptr<CollectiveBackend> backend = backendFor(device_, context, CollectiveGroup::kShardGroup);
      backendName_ = backend->name();
      if (layout.packedBytes() > 0) {
        try {
          collective_ = backend->allGatherBytesAsync(send, recv);  // on the current (gather) stream
        } catch (const std::exception& e) {
          raiseCollectiveFailure(gatherSpec(context, n, layout.packedBytes()), e, backendName_);
        }
      }
      copyOut(layout, recv, fulls_, context);
      // send and recv are freed when this scope ends: their memory belongs to the gather
      // stream, whose later work is ordered after the kernels and the collective above.
    }
    hook_->done().record(gather);
    started_ = true;
  }

  // The parameter-major layout (FSDP_OPT_CUDA_GATHER_LAYOUT=per-param): copy-in only of the
  // shards that need a cast (one launch, into this rank's slot of their own buffer) or are not
  // contiguous (a strided copy each), then one all-gather per parameter in one NCCL group,
  // straight into the buffers. No send or receive buffer, no copy-out.
  void startPerParam(const UnshardRequest& req, const std::string& context,
                     const std::vector<at::Tensor>& sources, const std::vector<at::Tensor>& buffers) {
    const size_t n = req.shards.size();
    std::vector<layout::ParamSpec> specs;
    std::vector<copyplan::ShardSource> src(n);
    std::vector<void*> recv(n);
    for (size_t i = 0; i < n; ++i) {
      specs.push_back(layout::ParamSpec{req.fullRows[i], rowBytesAs(req.shards[i], req.dtypes[i])});
      kernelTypes(sources[i].scalar_type(), req.dtypes[i], src[i].type, src[i].gathered);
      src[i].data = sources[i].numel() > 0 ? sources[i].data_ptr() : nullptr;
      src[i].contiguous = sources[i].is_contiguous();
      recv[i] = buffers[i].numel() > 0 ? buffers[i].data_ptr() : nullptr;
    }
    const layout::ParamMajorLayout pm(std::move(specs), req.world);
    const copyplan::ParamMajorPlan plan = copyplan::planParamMajor(pm, req.rank, src, recv);
    bytesPerRank_ = pm.totalShardBytes();
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
    launchPlan(plan.copyIn, stream, "the per-param copy-in of " + context);
    std::vector<at::Tensor> inputs, outputs;
    for (size_t i = 0; i < n; ++i) {
      if (plan.from[i] == copyplan::SendFrom::kNothing) continue;
      const int64_t c = pm.shardRows(i);
      if (plan.from[i] == copyplan::SendFrom::kStrided) {
        buffers[i].narrow(0, req.rank * c, c).copy_(sources[i]);  // torch's strided copy, this stream
      }
      at::Tensor out = buffers[i].view({-1}).view(at::kByte);
      at::Tensor in = plan.from[i] == copyplan::SendFrom::kShard
                          ? sources[i].view({-1}).view(at::kByte)
                          : out.narrow(0, pm.slotOffset(i, req.rank), pm.shardBytes(i));  // in place
      TORCH_INTERNAL_ASSERT(in.data_ptr() == plan.send[i] && in.numel() == pm.shardBytes(i) &&
                            out.numel() == pm.recvBytes(i));
      inputs.push_back(std::move(in));
      outputs.push_back(std::move(out));
    }
    std::shared_ptr<CollectiveBackend> backend = backendFor(device_, context, CollectiveGroup::kShardGroup);
    backendName_ = backend->name();
    if (!inputs.empty()) {
      try {
        collective_ = backend->allGatherBytesGroupedAsync(inputs, outputs);  // on this stream
      } catch (const std::exception& e) {
        raiseCollectiveFailure(gatherSpec(context, n, bytesPerRank_), e, backendName_);
      }
    }
    // The shards read directly belong to the caller's stream and were recorded on this one;
    // the buffers were allocated here: nothing else to keep alive past the start.
  }

  void finish() override {
    if (!started_) return;
    c10::cuda::CUDAGuard deviceGuard(device_);
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    // The communicator's state first: after a fault every CUDA call below fails too, and the
    // watchdog's abort reason says more than their error.
    if (collective_) {
      auto c = std::move(collective_);
      c->wait();  // NCCL: the communicator's error state (a bounded host wait in blocking mode)
    }
    hook_->orderStream(caller);
    for (const at::Tensor& f : fulls_) {
      if (f.defined()) c10::cuda::CUDACachingAllocator::recordStream(f.storage().data_ptr(), caller);
    }
  }

  void abandon() noexcept override {
    // The buffers belong to the gather stream and were never used elsewhere: freeing them is
    // stream-ordered. Only the collective's error state is left to drop.
    collective_.reset();
  }

  std::string backendName() const override { return backendName_; }
  int64_t bytesPerRank() const override { return bytesPerRank_; }
  std::shared_ptr<NestedGatherHook> nestedGatherHook() const override {
    return started_ ? hook_ : nullptr;
  }

 private:
  c10::Device device_;
  std::shared_ptr<CudaNestedGatherHook> hook_;  // holds the `done` event
  bool started_ = false;
  std::unique_ptr<PendingCollective> collective_;
  std::string backendName_ = "copy";
  int64_t bytesPerRank_ = 0;
  bool perParam_ = false;
};

}  // namespace

GatherLayout gatherLayout() {
  const int o = g_layoutOverride.load();
  return o >= 0 ? static_cast<GatherLayout>(o) : layoutFromEnv();
}

void setGatherLayout(GatherLayout layout) { g_layoutOverride.store(static_cast<int>(layout)); }

const char* gatherLayoutName(GatherLayout layout) {
  return layout == GatherLayout::kPerParam ? "per-param" : "packed";
}

bool elemTypeOf(at::ScalarType dtype, ElemType& out) {
  switch (dtype) {
    case at::kHalf:
      out = ElemType::kF16;
      return true;
    case at::kBFloat16:
      out = ElemType::kBF16;
      return true;
    case at::kFloat:
      out = ElemType::kF32;
      return true;
    case at::kDouble:
      out = ElemType::kF64;
      return true;
    default:
      return false;
  }
}

c10::cuda::CUDAStream gatherStream(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, cudaStream_t>* streams =
      new std::map<c10::DeviceIndex, cudaStream_t>();  // leaked: streams live as long as the process
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams->find(device);
  if (it == streams->end()) {
    c10::cuda::CUDAGuard guard(device);
    int least = 0;
    int greatest = 0;
    C10_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    it = streams->emplace(device, s).first;
  }
  return c10::cuda::getStreamFromExternal(it->second, device);
}

void launchPlan(const copyplan::CopyPlan& plan, const c10::cuda::CUDAStream& stream,
                const std::string& what) {
  if (plan.empty()) return;
  const std::vector<copyplan::Segment>& segs = plan.segments();
  const int n = static_cast<int>(segs.size());
  cudaError_t err = cudaSuccess;
  if (n <= cuda_kernels::kMaxInlineSegments) {
    err = cuda_kernels::launchCopyPlan(segs.data(), nullptr, n, plan.numBlocks(), stream.stream());
  } else {
    // Through pinned memory: the copy is asynchronous on `stream`, and torch's copy records the
    // pinned block's use so it is not reused before the copy ran. The device copy is freed on
    // return; its memory belongs to `stream`, so the kernel below still reads it safely.
    const int64_t bytes = static_cast<int64_t>(segs.size() * sizeof(copyplan::Segment));
    at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    std::memcpy(host.data_ptr(), segs.data(), static_cast<size_t>(bytes));
    c10::cuda::CUDAStreamGuard guard(stream);
    at::Tensor dev = host.to(at::TensorOptions().device(stream.device()), /*non_blocking=*/true);
    err = cuda_kernels::launchCopyPlan(segs.data(),
                                       static_cast<const copyplan::Segment*>(dev.data_ptr()), n,
                                       plan.numBlocks(), stream.stream());
  }
  FSDP_CHECK(err == cudaSuccess, ErrorKind::kBackend, "fsdp: launching the copy kernel for ", what,
             " (", n, " segments, ", plan.numBlocks(),
             " blocks) failed: ", cudaGetErrorString(err));
  if (debugSync()) {
    const cudaError_t ran = cudaStreamSynchronize(stream.stream());
    FSDP_CHECK(ran == cudaSuccess, ErrorKind::kBackend, "fsdp: the copy kernel for ", what, " (", n,
               " segments, ", plan.numBlocks(),
               " blocks) failed (FSDP_OPT_CUDA_DEBUG_SYNC=1 synchronised "
               "right after its launch): ",
               cudaGetErrorString(ran));
  }
}

void copyIn(const layout::PackLayout& layout, const std::vector<at::Tensor>& shards,
            const std::vector<at::ScalarType>& dtypes, const at::Tensor& send,
            const std::string& context) {
  FSDP_CHECK(shards.size() == layout.numParams() && dtypes.size() == layout.numParams(),
             ErrorKind::kInternal, "fsdp: copy-in got ", shards.size(), " shards for ",
             layout.numParams(), " parameters");
  FSDP_CHECK(send.is_cuda() && send.is_contiguous() &&
                 send.nbytes() >= static_cast<size_t>(layout.packedBytes()),
             ErrorKind::kInternal, "fsdp: copy-in needs a contiguous CUDA send buffer of ",
             layout.packedBytes(), " bytes");
  std::vector<const void*> ptrs;
  std::vector<ElemType> src(shards.size()), dst(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    FSDP_CHECK(shards[i].is_contiguous() && shards[i].device() == send.device(),
               ErrorKind::kInternal, "fsdp: copy-in needs contiguous shards on ", send.device());
    kernelTypes(shards[i].scalar_type(), dtypes[i], src[i], dst[i]);
    ptrs.push_back(shards[i].data_ptr());
  }
  launchPlan(copyplan::planCopyIn(layout, ptrs, src, dst, send.data_ptr()),
             c10::cuda::getCurrentCUDAStream(send.device().index()), "the copy-in of " + context);
}

void copyOut(const layout::PackLayout& layout, const at::Tensor& gathered,
             const std::vector<at::Tensor>& fulls, const std::string& context) {
  FSDP_CHECK(gathered.is_cuda() && gathered.is_contiguous() &&
                 gathered.nbytes() >= static_cast<size_t>(layout.gatheredBytes()),
             ErrorKind::kInternal, "fsdp: copy-out needs a contiguous CUDA buffer of ",
             layout.gatheredBytes(), " bytes");
  std::vector<void*> ptrs;
  for (size_t i = 0; i < fulls.size(); ++i) {
    FSDP_CHECK(fulls[i].is_contiguous() && fulls[i].device() == gathered.device() &&
                   static_cast<int64_t>(fulls[i].nbytes()) == layout.fullBytes(i),
               ErrorKind::kInternal, "fsdp: copy-out output ", i, " is not a contiguous ",
               layout.fullBytes(i), "-byte tensor on ", gathered.device());
    ptrs.push_back(fulls[i].data_ptr());
  }
  launchPlan(copyplan::planCopyOut(layout, gathered.data_ptr(), ptrs),
             c10::cuda::getCurrentCUDAStream(gathered.device().index()), "the copy-out of " + context);
}

std::unique_ptr<PendingUnshard> startCudaUnshard(const UnshardRequest& request,
                                                 const std::string& context) {
  return std::make_unique<CudaUnshard>(request, context);
}

}  // namespace cuda
}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
