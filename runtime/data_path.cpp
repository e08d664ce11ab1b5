// The copy-only (world size 1) and host (CPU, world size > 1) data paths, and the table of paths
// by device. See data_path.h.
#include "data_path.h"

#include <dlfcn.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "collective_order.h"
#include "envelope.h"
#include "errors.h"
#include "fsdp_opt/runtime/runtime.h"
#include "host_buffer_pool.h"
#include "process_group.h"
#include "shard_layout.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// World size 1, any device: the shard is the full tensor. A group gathered in another dtype
// gets a contiguous cast copy (at::Tensor::copy_, the kernel behind Tensor::to, so the result is
// bitwise `shard.to(dtype)`); the others need nothing.
class CopyOnlyUnshard final : public PendingUnshard {
 public:
  explicit CopyOnlyUnshard(const UnshardRequest& req) {
    fulls_.resize(req.shards.size());
    for (size_t i = 0; i < req.shards.size(); ++i) {
      const at::Tensor& shard = req.shards[i];
      if (shard.scalar_type() == req.dtypes[i]) continue;
      fulls_[i] = shard.device().is_cpu()
                      ? pooledEmptyCpu(shard.sizes(), req.dtypes[i])
                      : at::empty(shard.sizes(), shard.options().dtype(req.dtypes[i]));
      fulls_[i].copy_(shard);
    }
  }
  void finish() override {}
  void abandon() noexcept override {}
  std::string backendName() const override { return "copy"; }
  int64_t bytesPerRank() const override { return 0; }
};

// CPU, world size > 1: cast (at::Tensor::to) and pack every shard into this rank's slot of the
// receive buffer, one asynchronous in-place byte all-gather of those slots on the backend that
// serves CPU tensors, unpack into the full tensors at finish(). Ahead of it, the envelope with
// the gather's fingerprint (envelope.h), checked before the payload's all-gather is issued; the
// shards are packed while it is on its way. A payload that fits in the envelope (always one of at most 448 bytes, and
// any payload of up to 1 MiB once the collectives before it repeat) is packed into it and needs
// no all-gather of its own; it is unpacked from every rank's envelope once the fingerprints
// matched. all_gather_start leaves both the check and the payload to the issuer thread
// (collective_order.h).
class HostCollectiveUnshard final : public PendingUnshard {
 public:
  HostCollectiveUnshard(const UnshardRequest& req, const std::string& context)
      : layout_(specsOf(req), req.world) {
    backend_ = backendFor(req.device, context, CollectiveGroup::kShardGroup);
    // Pool buffers (host_buffer_pool.h): the same sizes come back on every gather of the unit.
    // Allocated now, filled at finish(): the memory of a started gather is held from here on
    // (what peak_unsharded_bytes counts).
    for (size_t i = 0; i < req.shards.size(); ++i) {
      fulls_.push_back(pooledEmptyCpu(fullSizes(req.shards[i], req.fullRows[i]), req.dtypes[i]));
    }
    const int64_t bytes = layout_.packedBytes();
    if (bytes == 0) return;  // nothing to send on any rank: no collective, no fingerprint
    CollectiveSpec spec = gatherSpec(context, req.shards.size(), bytes);
    spec.identity = gatherIdentity(req, "packed", bytes);
    spec.device = req.device;
    spec.backend = backend_;
    // The payload rides in the envelope when the envelope is large enough (the same collectives
    // came before: envelope.h), packed straight into it: one collective, no send buffer.
    OpenedCollective opened = openCollective(spec, [&](void* dst) { pack(req, dst); });
    std::unique_ptr<Envelope>& envelope = opened.envelope;
    const bool carried = envelope->carriesPayload();
    if (carried) {
      recv_ = envelope->received();  // its bytes are valid once the envelope is finished
      chunkStride_ = envelope->bytes();
      chunkOffset_ = static_cast<int64_t>(fingerprint::kHeaderBytes);
    } else {
      recv_ = pooledEmptyCpu({layout_.gatheredBytes()}, at::kByte);
      chunkStride_ = bytes;
      // In place: the shards are packed straight into this rank's slot of the receive buffer,
      // which the backend sends from (a large gather broadcasts each slot where it lies).
      send_ = recv_.narrow(0, backend_->rank() * bytes, bytes);
      pack(req, send_.data_ptr());  // while the envelope is on its way
    }
    if (carried) placeOwnRows();  // the envelope, payload and all, is on its way
    if (req.asyncStart) {
      // The issuer thread checks the envelope (and issues a payload that did not ride in it); it
      // drops its references to the buffers right after, and this unshard keeps its own until
      // finish(), so they go back to the pool here, not on that thread.
      std::function<std::unique_ptr<PendingCollective>()> issue = [] {
        return std::unique_ptr<PendingCollective>();
      };
      if (!carried) {
        issue = [backend = backend_, send = send_, recv = recv_] {
          return backend->allGatherBytesAsync(send, recv);
        };
      }
      deferred_ = issueAfter(opened.order, std::move(envelope), nullptr, std::move(issue));
      if (!carried) placeOwnRows();
      return;
    }
    try {
      envelope->finish();
      if (!carried) collective_ = backend_->allGatherBytesAsync(send_, recv_);
    } catch (const std::exception& e) {
      raiseCollectiveFailure(spec, e);
    }
    if (!carried) placeOwnRows();
  }

  void finish() override {
    if (deferred_) collective_ = takeDeferred();
    if (collective_) {
      auto c = std::move(collective_);
      c->wait();
    }
    std::vector<void*> dst;
    for (const at::Tensor& f : fulls_) dst.push_back(f.data_ptr());
    // This rank's rows are in place already (placeOwnRows).
    layout::unpackCpu(layout_, static_cast<const char*>(recv_.data_ptr()) + chunkOffset_, dst,
                      chunkStride_, backend_->rank());
    send_.reset();
    recv_.reset();
  }

  void abandon() noexcept override {
    try {
      if (deferred_) collective_ = takeDeferred();
    } catch (...) {
    }
    try {
      if (collective_) {
        auto c = std::move(collective_);
        c->wait();  // Gloo writes into recv_ until then
      }
    } catch (...) {
    }
    send_.reset();
    recv_.reset();
  }

  std::string backendName() const override { return backend_->name(); }
  int64_t bytesPerRank() const override { return layout_.packedBytes(); }

 private:
  void pack(const UnshardRequest& req, void* dst) {
    packedSources_.clear();  // keeps cast copies alive until placeOwnRows
    packedSources_.reserve(req.shards.size());
    std::vector<const void*> src;
    src.reserve(req.shards.size());
    for (size_t i = 0; i < req.shards.size(); ++i) {
      const at::Tensor& shard = req.shards[i];
      if (shard.scalar_type() == req.dtypes[i] && shard.is_contiguous()) {
        packedSources_.push_back(shard);  // read as it is: no new tensor on every gather
      } else {
        packedSources_.push_back(shard.detach().to(req.dtypes[i]).contiguous());
      }
      src.push_back(packedSources_.back().data_ptr());
    }
    layout::packCpu(layout_, src, dst);
  }

  // This rank's rows go into the full tensors once the collective is on its way, from the same
  // tensors the pack read (nothing runs between the two), so finish() copies only the peers' rows
  // after the wait. Not from this rank's packed slot: some backends rewrite it while the
  // collective runs (the all-to-all of W > 2 copies its send slot there).
  void placeOwnRows() {
    std::vector<const void*> src;
    for (const at::Tensor& s : packedSources_) src.push_back(s.data_ptr());
    std::vector<void*> dst;
    for (const at::Tensor& f : fulls_) dst.push_back(f.data_ptr());
    layout::unpackRankCpu(layout_, backend_->rank(), src, dst);
    packedSources_.clear();
  }

  std::unique_ptr<PendingCollective> takeDeferred() {
    auto d = std::move(deferred_);
    return d->take();
  }

  static std::vector<layout::ParamSpec> specsOf(const UnshardRequest& req) {
    std::vector<layout::ParamSpec> specs;
    for (size_t i = 0; i < req.shards.size(); ++i) {
      specs.push_back(layout::ParamSpec{req.fullRows[i], rowBytesAs(req.shards[i], req.dtypes[i])});
    }
    return specs;
  }

  layout::PackLayout layout_;
  std::shared_ptr<CollectiveBackend> backend_;
  at::Tensor send_;  // this rank's slot of recv_; undefined when the payload rides in its envelope
  at::Tensor recv_;  // every rank's packed chunk: the payload's receive buffer, or the envelopes'
  std::vector<at::Tensor> packedSources_;  // the shards as packed, until placeOwnRows
  int64_t chunkStride_ = 0;  // rank r's packed chunk is at recv_ + chunkOffset_ + r * chunkStride_
  int64_t chunkOffset_ = 0;
  std::shared_ptr<DeferredCollective> deferred_;  // all_gather_start: the issuer thread's part
  std::unique_ptr<PendingCollective> collective_;
};

std::unique_ptr<PendingUnshard> startHostUnshard(const UnshardRequest& request,
                                                 const std::string& context) {
  if (request.world == 1) return std::make_unique<CopyOnlyUnshard>(request);
  return std::make_unique<HostCollectiveUnshard>(request, context);
}

// The devices served at world size > 1: CPU here, others as their libraries register.
struct DevicePathTable {
  std::mutex mutex;
  std::deque<DevicePath> paths;  // a deque: entries handed out stay where they are
};

DevicePathTable& devicePathTable() {
  static auto* table = new DevicePathTable{{}, {{c10::DeviceType::CPU, startHostUnshard, createHostBackend}}};
  return *table;
}

const DevicePath* registeredPath(c10::DeviceType type) {
  DevicePathTable& table = devicePathTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  for (const DevicePath& path : table.paths) {
    if (path.device == type) return &path;
  }
  return nullptr;
}

#ifdef FSDP_OPT_CUDA_BACKEND_FILE
// Where this build's CUDA backend library is: beside libfsdp_runtime itself (the build tree's
// lib/, an install's lib/, the pip package's fsdp_opt/lib).
std::string cudaBackendPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&devicePathFor), &info) == 0 || info.dli_fname == nullptr) {
    return FSDP_OPT_CUDA_BACKEND_FILE;  // the loader's search path
  }
  std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? std::string(FSDP_OPT_CUDA_BACKEND_FILE)
                                    : self.substr(0, slash + 1) + FSDP_OPT_CUDA_BACKEND_FILE;
}

struct CudaBackendLoad {
  std::string path;
  std::string error;  // dlopen's complaint; empty once loaded
};

// Loaded at the first lookup of the CUDA path (a gather of CUDA tensors, has_cuda_backend()),
// once per process, and never unloaded: its backends live until the process group is torn down.
const CudaBackendLoad& loadCudaBackend() {
  static const CudaBackendLoad load = [] {
    CudaBackendLoad l;
    l.path = cudaBackendPath();
    if (dlopen(l.path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      const char* why = dlerror();
      l.error = why ? why : "dlopen failed";
    } else if (registeredPath(c10::DeviceType::CUDA) == nullptr) {
      l.error = "it registered no CUDA path";
    }
    return l;
  }();
  return load;
}
#endif

}  // namespace

void registerDevicePath(const DevicePath& path) {
  DevicePathTable& table = devicePathTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  for (const DevicePath& known : table.paths) {
    if (known.device == path.device) return;
  }
  table.paths.push_back(path);
}

const DevicePath* devicePathFor(const c10::Device& device) {
#ifdef FSDP_OPT_CUDA_BACKEND_FILE
  if (device.is_cuda()) loadCudaBackend();
#endif
  return registeredPath(device.type());
}

void throwNoDevicePath(const c10::Device& device, const std::string& context) {
  if (device.is_cuda()) {
#ifdef FSDP_OPT_CUDA_BACKEND_FILE
    const CudaBackendLoad& load = loadCudaBackend();
    raise(ErrorKind::kBadInput,
          c10::str(context, ": parameters are on ", device.str(), " but the CUDA backend ",
                   load.path, " could not be loaded: ", load.error));
#else
    raise(ErrorKind::kBadInput,
          c10::str(context, ": parameters are on ", device.str(),
                   " but no CUDA backend is built into libfsdp_runtime (only gloo for CPU "
                   "tensors; build with -DFSDP_OPT_ENABLE_CUDA=ON)"));
#endif
  }
  raise(ErrorKind::kBadInput,
        c10::str(context, ": no collective backend for tensors on ", device.str()));
}

std::unique_ptr<PendingUnshard> startUnshard(const UnshardRequest& request,
                                             const std::string& context) {
  if (const DevicePath* path = devicePathFor(request.device)) return path->start(request, context);
  if (request.world == 1) return std::make_unique<CopyOnlyUnshard>(request);
  throwNoDevicePath(request.device, context);
}

fingerprint::Identity gatherIdentity(const UnshardRequest& request, const char* layout,
                                     int64_t payloadBytes) {
  fingerprint::Identity id;
  id.kind = fingerprint::Kind::kGather;
  id.unit = request.unit;
  id.payloadBytes = payloadBytes;
  id.numTensors = static_cast<int64_t>(request.shards.size());
  fingerprint::LayoutHash hash;
  hash.add(layout);
  for (size_t i = 0; i < request.shards.size(); ++i) {
    hash.add(request.fullRows[i]).add(rowBytesAs(request.shards[i], request.dtypes[i])).add(dtypeName(request.dtypes[i]));
  }
  id.layoutHash = hash.value();
  id.dtypes = joinedDtypeNames(request.dtypes);
  return id;
}

std::string joinedDtypeNames(const std::vector<at::ScalarType>& dtypes) {
  std::vector<std::string> names;
  for (at::ScalarType dtype : dtypes) {
    std::string name = dtypeName(dtype);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : "+") + n;
  return joined;
}

int64_t rowBytesAs(const at::Tensor& t, at::ScalarType dtype) {
  int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

c10::DimVector fullSizes(const at::Tensor& shard, int64_t fullRows) {
  c10::DimVector sizes(shard.sizes());
  sizes[0] = fullRows;
  return sizes;
}

CollectiveSpec gatherSpec(const std::string& context, size_t numParams, int64_t bytesPerRank) {
  CollectiveSpec spec;
  spec.scope = CollectiveGroup::kShardGroup;
  spec.context = context;
  spec.failed = c10::str(context, ": all-gather of ", numParams, " parameters (", bytesPerRank, " bytes per rank)");
  return spec;
}

}  // namespace detail

bool hasCudaBackend() { return detail::devicePathFor(c10::Device(c10::kCUDA)) != nullptr; }

}  // namespace runtime
}  // namespace fsdp_opt
