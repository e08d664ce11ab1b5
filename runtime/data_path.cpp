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
#include "fsdp_opt/format.h"
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
                      ? pooledEmptyCpu(shard.sizes(), fullStridesOf(shard, shard.size(0)), req.dtypes[i])
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
// serves CPU tensors, unpack into the full tensors at finish(). A full tensor has its shard's
// memory layout (fullStridesOf). Where each row is still one run of bytes (channels_last), the
// rows travel as they lie in memory and are copied as runs; where it is not (a transposed
// parameter), they travel row-major and are copied into place strided (kStridedRows).
// Ahead of it, the envelope with the gather's fingerprint (envelope.h), checked before the
// payload's all-gather is issued; the shards are packed while it is on its way. A payload that
// fits in the envelope (always one of at most 448 bytes, and any payload of up to 1 MiB once the
// collectives before it repeat) is packed into it and needs no all-gather of its own; it is
// unpacked from every rank's envelope once the fingerprints matched. all_gather_start leaves
// both the check and the payload to the issuer thread (collective_order.h).
class HostCollectiveUnshard final : public PendingUnshard {
 public:
  HostCollectiveUnshard(const UnshardRequest& req, const std::string& context)
      : layout_(specsOf(req), req.world) {
    backend_ = backendFor(req.device, context, CollectiveGroup::kShardGroup);
    // Pool buffers (host_buffer_pool.h): the same sizes come back on every gather of the unit.
    // Allocated now, filled at finish(): the memory of a started gather is held from here on
    // (what peak_unsharded_bytes counts).
    rowLayouts_.reserve(req.shards.size());
    for (size_t i = 0; i < req.shards.size(); ++i) {
      const at::Tensor& shard = req.shards[i];
      const c10::DimVector strides = fullStridesOf(shard, req.fullRows[i]);
      RowLayout rows = RowLayout::kRowMajor;
      if (!strides.empty()) {
        rows = strides[0] * shard.size(0) == shard.numel() ? RowLayout::kKeptRuns : RowLayout::kStridedRows;
      }
      rowLayouts_.push_back(rows);
      fulls_.push_back(pooledEmptyCpu(fullSizes(shard, req.fullRows[i]), strides, req.dtypes[i]));
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
    // This rank's rows are in place already (placeOwnRows).
    const char* chunks = static_cast<const char*>(recv_.data_ptr()) + chunkOffset_;
    layout::unpackCpu(layout_, chunks, runDestinations(), chunkStride_, backend_->rank());
    for (size_t i = 0; i < fulls_.size(); ++i) {
      if (rowLayouts_[i] != RowLayout::kStridedRows) continue;
      for (int64_t r = 0; r < layout_.world(); ++r) {
        if (r == backend_->rank()) continue;
        const layout::Segment seg = layout_.unpackSegment(i, r);
        if (seg.bytes == 0) continue;
        const char* rows = chunks + seg.srcOffset + r * (chunkStride_ - layout_.packedBytes());
        copyRowsInto(i, seg, at::from_blob(const_cast<char*>(rows), rowsShape(i, seg),
                                           fulls_[i].options()));
      }
    }
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
      const bool runs = shard.is_contiguous() || rowLayouts_[i] == RowLayout::kKeptRuns;
      if (shard.scalar_type() == req.dtypes[i] && runs) {
        packedSources_.push_back(shard);  // read as it is: no new tensor on every gather
      } else if (rowLayouts_[i] == RowLayout::kKeptRuns) {
        // Cast into the same layout, so the bytes travel in the order the full tensor keeps.
        at::Tensor cast = at::empty_strided(shard.sizes(), shard.strides(), shard.options().dtype(req.dtypes[i]));
        cast.copy_(shard);
        packedSources_.push_back(std::move(cast));
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
    const int64_t rank = backend_->rank();
    layout::unpackRankCpu(layout_, rank, src, runDestinations());
    for (size_t i = 0; i < fulls_.size(); ++i) {
      if (rowLayouts_[i] != RowLayout::kStridedRows) continue;
      const layout::Segment seg = layout_.unpackSegment(i, rank);
      if (seg.bytes > 0) copyRowsInto(i, seg, packedSources_[i].narrow(0, 0, seg.bytes / layout_.param(i).rowBytes));
    }
    packedSources_.clear();
  }

  // The full tensors' data for the copies by runs of bytes: null for those copied strided.
  std::vector<void*> runDestinations() const {
    std::vector<void*> dst;
    dst.reserve(fulls_.size());
    for (size_t i = 0; i < fulls_.size(); ++i) {
      dst.push_back(rowLayouts_[i] == RowLayout::kStridedRows ? nullptr : fulls_[i].data_ptr());
    }
    return dst;
  }

  // The shape of segment `seg`'s rows of parameter i.
  c10::DimVector rowsShape(size_t i, const layout::Segment& seg) const {
    c10::DimVector shape(fulls_[i].sizes());
    shape[0] = seg.bytes / layout_.param(i).rowBytes;
    return shape;
  }

  // Copies `rows` (row-major) to where segment `seg` of parameter i belongs in its strided full
  // tensor.
  void copyRowsInto(size_t i, const layout::Segment& seg, const at::Tensor& rows) {
    const int64_t rowBytes = layout_.param(i).rowBytes;
    fulls_[i].narrow(0, seg.dstOffset / rowBytes, seg.bytes / rowBytes).copy_(rows);
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

  // How a parameter's rows travel and land.
  enum class RowLayout : uint8_t {
    kRowMajor,     // a contiguous full tensor: rows as runs of bytes, row-major
    kKeptRuns,     // the shard's layout kept, each row still one run of bytes: copied as runs
    kStridedRows,  // the shard's layout kept, rows strided in it: they travel row-major and
                   // land through a strided copy
  };

  std::vector<RowLayout> rowLayouts_;  // per parameter; set before the pack
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
    const at::Tensor& shard = request.shards[i];
    hash.add(request.fullRows[i]).add(rowBytesAs(shard, request.dtypes[i])).add(dtypeName(request.dtypes[i]));
    // A kept layout changes the order in which a row's bytes travel on the CPU path: ranks whose
    // shards are laid out differently must not read each other's rows as their own.
    if (!hasRowMajorStrides(shard.sizes().data(), shard.strides().data(), shard.dim())) {
      hash.add("strides");
      for (int64_t stride : shard.strides()) hash.add(stride);
    }
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

namespace {

// Whether `strides` lay out `sizes` densely: every element at its own offset, none skipped.
// Tensor::is_non_overlapping_and_dense() asks it of a tensor; here the tensor is not made yet, and
// torch 1.13 has no function over bare sizes and strides (2.x's c10/core/Contiguity.h does).
bool isDenseLayout(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  c10::DimVector dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;
    if (sizes[d] != 1) dims.push_back(static_cast<int64_t>(d));
  }
  std::sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

}  // namespace

c10::DimVector fullStridesOf(const at::Tensor& shard, int64_t fullRows) {
  const int64_t dims = shard.dim();
  if (dims < 2 || shard.size(0) == 0 || hasRowMajorStrides(shard.sizes().data(), shard.strides().data(), dims) ||
      !shard.is_non_overlapping_and_dense()) {
    return {};
  }
  c10::DimVector strides(dims);
  stridesForRows(shard.sizes().data(), shard.strides().data(), dims, shard.size(0), fullRows, strides.data());
  if (!isDenseLayout(fullSizes(shard, fullRows), strides)) return {};
  return strides;
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
