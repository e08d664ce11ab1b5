// Internal: the data path of one unshard (how its bytes move), behind the unshard state machine
// in unshard_state.cpp (registry, reference counts, storage swap, stats), and the table that
// says which data path and which collective backend serve tensors of each device type.
//
// The state machine hands over the shards of the *fresh* groups of one gather (parameters that
// are not gathered yet, deduplicated) and gets back a PendingUnshard holding one full buffer per
// group. startUnshard() issues everything it can without blocking (on CPU: the cast and pack, then
// the asynchronous collective; on CUDA: copy-in, collective and copy-out on the runtime's gather
// stream); finish() makes the full buffers valid for the caller (CPU: waits for the collective and
// unpacks; CUDA: makes the caller's current stream wait on the gather's completion event).
//
// Paths, by the shards' device (docs/runtime.md, "Backends"):
//   - world size 1, a device without a path of its own: copy-only. A group whose gathered dtype
//     is its own needs no buffer at all (the shard is the full tensor); one that is cast gets a
//     cast copy.
//   - CPU: copy-only at world size 1; above it the host path (cast with at::Tensor::to, pack,
//     the CPU backend's byte all-gather, unpack), whichever backend serves CPU tensors (Gloo).
//   - CUDA (built with FSDP_OPT_ENABLE_CUDA): runtime/cuda/, NCCL for world size > 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/DimVector.h>

#include "collective.h"
#include "fsdp_opt/runtime/compare.h"  // dtypeName: the format's spelling
#include "collective_backend.h"
#include "fingerprint.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {

struct UnshardRequest {
  /// Shard of each group, exactly as the module holds it (ceil(N/W) rows, any strides).
  std::vector<at::Tensor> shards;
  /// Unsharded dim-0 size of each group.
  std::vector<int64_t> fullRows;
  /// dtype of each group's full tensor: the shard's own, or the param_dtype it is cast to.
  std::vector<at::ScalarType> dtypes;
  c10::Device device{c10::kCPU};
  int rank = 0;
  int world = 1;
  /// The unit (or the merged units) being gathered: part of the collective's fingerprint.
  std::string unit;
  /// all_gather_start: starting the unshard must not wait for the peers (the payload's collective
  /// goes out once the fingerprints cleared, from the issuer thread: collective_order.h).
  bool asyncStart = false;
};

/// The fingerprint identity of `request`'s collective: the unit, `payloadBytes` per rank, and a
/// layout hash over every group's rows, row bytes and gathered dtype plus `layout` (how the
/// backend lays them out: "packed", "per-param"; ranks laying out differently diverge too).
fingerprint::Identity gatherIdentity(const UnshardRequest& request, const char* layout,
                                     int64_t payloadBytes);

/// The distinct names of `dtypes` in first-seen order, joined by '+' ("float32+int64"): a
/// fingerprint's readable dtypes.
std::string joinedDtypeNames(const std::vector<at::ScalarType>& dtypes);

/// What a gather that finds a group already gathered (a nested gather) must do before its
/// caller may use the group's full storage: on CUDA, the caller's current stream, which may not
/// be the stream the unshard was waited on, waits for the unshard to complete, and the storage
/// is recorded on that stream so the caching allocator keeps it until that stream's work is
/// done (docs/runtime.md, "Nested gathers across streams"). CPU paths have nothing to do.
class NestedGatherHook {
 public:
  virtual ~NestedGatherHook() = default;
  /// `param`: a parameter of a group of this unshard, pointing at its full storage.
  virtual void orderCurrentStream(const at::Tensor& param) = 0;
};

class PendingUnshard {
 public:
  virtual ~PendingUnshard() = default;

  /// One entry per group: its full tensor (contiguous, dtypes[i], fullRows[i] rows), allocated
  /// when the unshard started; undefined where no buffer is needed (world size 1, same dtype:
  /// the shard already is the full tensor). The data is valid only after finish().
  const std::vector<at::Tensor>& fulls() const { return fulls_; }

  /// Completes the unshard. Throws on failure or timeout (the caller adds the op and unit).
  virtual void finish() = 0;
  /// Gives the unshard up (release_all): waits for whatever still uses the buffers, as far as
  /// freeing them requires, and swallows errors.
  virtual void abandon() noexcept = 0;

  /// For error messages: the backend that moves the bytes ("copy" when none), and the bytes one
  /// rank contributes to the collective.
  virtual std::string backendName() const = 0;
  virtual int64_t bytesPerRank() const = 0;

  /// Shared by every group of this unshard after finish(); null when nested gathers need
  /// nothing (CPU, or no full buffer was made).
  virtual std::shared_ptr<NestedGatherHook> nestedGatherHook() const { return nullptr; }

 protected:
  std::vector<at::Tensor> fulls_;
};

/// Issues the unshard of `request` on the path its device selects. Throws when it cannot be
/// issued (no backend for the device, a backend that fails to start the collective).
std::unique_ptr<PendingUnshard> startUnshard(const UnshardRequest& request,
                                             const std::string& context);

/// What serves tensors of one device type: its data path and its collective backend.
struct DevicePath {
  c10::DeviceType device;
  /// The unshard of a request on this device, at any world size.
  std::unique_ptr<PendingUnshard> (*start)(const UnshardRequest& request,
                                           const std::string& context);
  /// The backend of `group` for these tensors, created at the first gather that needs one.
  std::unique_ptr<CollectiveBackend> (*createBackend)(const BackendRendezvous& group,
                                                      const c10::Device& tensors,
                                                      const std::string& context);
};

/// The entry for `device`'s type, or nullptr when this build has none (world size 1 still
/// works there, copy-only). The CUDA entry lives in libfsdp_runtime_cuda, which the first CUDA
/// lookup loads from libfsdp_runtime's own directory (see registerDevicePath).
const DevicePath* devicePathFor(const c10::Device& device);

/// Adds the path of a device type that libfsdp_runtime itself does not serve; called once by
/// the static initialiser of the library that implements it (libfsdp_runtime_cuda, a library
/// of its own so that CPU-only processes never load torch's CUDA libraries: docs/runtime.md,
/// "CUDA", "Building").
void registerDevicePath(const DevicePath& path);

/// Throws the runtime's error for tensors on a device without a path, naming `context`.
[[noreturn]] void throwNoDevicePath(const c10::Device& device, const std::string& context);

/// The spec (collective.h) of an all-gather of `numParams` parameters, each rank sending
/// `bytesPerRank`, within the shard group; its failure reads "CONTEXT: all-gather of N
/// parameters (B bytes per rank) on backend NAME failed on rank R of W; a peer may have died or
/// runs a different program: <cause>". Identity, device and backend are the issuer's to set.
CollectiveSpec gatherSpec(const std::string& context, size_t numParams, int64_t bytesPerRank);

/// Bytes of one dim-0 row of `t` in `dtype`.
int64_t rowBytesAs(const at::Tensor& t, at::ScalarType dtype);

/// `shard`'s sizes with dim 0 set to `fullRows`.
c10::DimVector fullSizes(const at::Tensor& shard, int64_t fullRows);

/// The strides of the full tensor gathered from `shard` when it keeps the shard's memory layout
/// (format.h, "memory layout of a shard": a channels_last shard gives a channels_last parameter);
/// empty when the full tensor is contiguous (a contiguous shard, or one whose layout does not
/// scale to a dense one of `fullRows` rows). The CPU paths gather into it; the CUDA path
/// gathers contiguous (docs/runtime.md, "Not supported yet").
c10::DimVector fullStridesOf(const at::Tensor& shard, int64_t fullRows);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
