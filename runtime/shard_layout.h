// Sharding layout math (SPEC section 2) and the packed-buffer layout that the runtime's
// coalesced all-gather uses. Torch-free on purpose: unit-testable on its own and shared by the
// CPU and CUDA data paths.
//
// Layout of one parameter of N rows on W ranks: every rank holds c = ceil(N / W) rows; rank r's
// rows are [r*c, min((r+1)*c, N)) followed by zero padding up to c rows. Those are the format's
// rows (include/fsdp_opt/format.h, which the writer uses too); the functions here check their
// arguments.
//
// Layout of one coalesced gather: every rank packs the shards of all (deduplicated) parameters of
// a unit back to back into one byte buffer of packedBytes() bytes; parameter i starts at
// offset(i), a multiple of the alignment, and packedBytes() is a multiple of it too (so every
// rank's chunk of the gathered buffer starts aligned, which the CUDA copy kernels' vector
// accesses rely on). The collective concatenates the W packed buffers in rank order
// (gatheredBytes() = W * packedBytes()). unpackSegments(i) lists the byte ranges to copy from
// that gathered buffer into the full tensor of parameter i (padding dropped). The CPU pack and
// unpack below and the CUDA copy plans (copy_plan.h) both work from this one layout.
//
// ParamMajorLayout is the CUDA path's alternative (FSDP_OPT_CUDA_GATHER_LAYOUT=per-param): one
// all-gather per parameter straight into its full buffer, nothing copied out afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_opt {
namespace layout {

/// ceil(a / b) for a >= 0, b > 0.
int64_t ceilDiv(int64_t a, int64_t b);

/// Rows every rank holds for a parameter of `fullRows` rows: ceil(fullRows / world).
int64_t shardRows(int64_t fullRows, int64_t world);

/// First full-tensor row held by `rank` (may be >= fullRows for a rank past the end).
int64_t rowBegin(int64_t fullRows, int64_t world, int64_t rank);

/// Rows of real data (not padding) held by `rank`: min(c, max(0, fullRows - rank*c)).
int64_t validRowsOnRank(int64_t fullRows, int64_t world, int64_t rank);

/// Empty string when a shard of `shardRowsGot` rows is a valid shard of a `fullRows`-row
/// parameter for `world` ranks; otherwise a human-readable reason (no unit/param name in it).
std::string checkShardRows(int64_t shardRowsGot, int64_t fullRows, int64_t world);

/// One parameter of a coalesced gather.
struct ParamSpec {
  int64_t fullRows = 0;  // dim-0 size of the unsharded parameter
  int64_t rowBytes = 0;  // bytes of one dim-0 row: element size * product of sizes[1:]
};

/// A contiguous byte range to copy.
struct Segment {
  int64_t srcOffset = 0;  // in the gathered buffer (W packed chunks, rank order)
  int64_t dstOffset = 0;  // in the full parameter's contiguous bytes
  int64_t bytes = 0;
  int64_t rank = 0;       // the rank whose chunk the bytes come from
};

class PackLayout {
 public:
  /// Default alignment of each parameter inside a packed chunk (bytes). 16 keeps every
  /// dtype aligned and suits vectorised copy kernels.
  static constexpr int64_t kDefaultAlignment = 16;

  PackLayout(std::vector<ParamSpec> params, int64_t world,
             int64_t alignment = kDefaultAlignment);

  int64_t world() const { return world_; }
  size_t numParams() const { return params_.size(); }
  const ParamSpec& param(size_t i) const { return params_.at(i); }

  /// Rows of parameter i's shard (same on every rank).
  int64_t shardRows(size_t i) const;
  /// Bytes of parameter i's shard (padding included): shardRows(i) * rowBytes.
  int64_t shardBytes(size_t i) const;
  /// Bytes of parameter i unsharded: fullRows * rowBytes.
  int64_t fullBytes(size_t i) const;
  /// Byte offset of parameter i's shard inside one rank's packed chunk.
  int64_t offset(size_t i) const { return offsets_.at(i); }
  /// End of parameter i's slot: offset(i + 1), or packedBytes() for the last one. The bytes
  /// [offset(i) + shardBytes(i), slotEnd(i)) are alignment padding (zeroed by packing).
  int64_t slotEnd(size_t i) const;

  /// Bytes one rank contributes (the send buffer size).
  int64_t packedBytes() const { return packedBytes_; }
  /// Bytes of the collective's output: world() * packedBytes().
  int64_t gatheredBytes() const { return packedBytes_ * world_; }
  /// Sum of fullBytes(i) over all parameters.
  int64_t totalFullBytes() const;

  /// Copies that rebuild parameter i from the gathered buffer, in rank order; ranks that hold
  /// only padding contribute no segment.
  std::vector<Segment> unpackSegments(size_t i) const;
  /// Rank `rank`'s segment of parameter i (bytes 0 when it holds only padding). The copy loops
  /// use it: they run on every gather, and a vector per parameter is an allocation per parameter.
  Segment unpackSegment(size_t i, int64_t rank) const;

 private:
  std::vector<ParamSpec> params_;
  std::vector<int64_t> offsets_;
  int64_t world_;
  int64_t alignment_;
  int64_t packedBytes_ = 0;
};

/// Layout of a parameter-major gather: one all-gather per parameter (issued as one group),
/// straight into that parameter's own buffer, so nothing is copied out afterwards. Parameter
/// i's buffer holds world() * shardRows(i) rows: rank r's shard (padding rows included) lands
/// at byte slotOffset(i, r) = r * shardBytes(i), which is exactly where the parameter's rows
/// [r*c, (r+1)*c) belong in a full tensor, so the full parameter is the buffer's first
/// fullRows rows (a view) and the padding rows of the last ranks simply trail it. The price is
/// recvBytes(i) - fullBytes(i) (at most (world-1) rows) of extra memory per parameter and one
/// collective per parameter instead of one per unit. No alignment: a slot starts wherever
/// r * shardBytes(i) falls.
class ParamMajorLayout {
 public:
  ParamMajorLayout(std::vector<ParamSpec> params, int64_t world);

  int64_t world() const { return world_; }
  size_t numParams() const { return params_.size(); }
  const ParamSpec& param(size_t i) const { return params_.at(i); }

  /// Rows of parameter i's shard (same on every rank).
  int64_t shardRows(size_t i) const;
  /// Bytes parameter i's all-gather sends from each rank: shardRows(i) * rowBytes.
  int64_t shardBytes(size_t i) const;
  /// Bytes of parameter i's buffer (what its all-gather receives): world() * shardBytes(i).
  int64_t recvBytes(size_t i) const;
  /// Bytes of parameter i unsharded (the view's bytes): fullRows * rowBytes <= recvBytes(i).
  int64_t fullBytes(size_t i) const;
  /// Where rank r's shard of parameter i lands in its buffer: r * shardBytes(i).
  int64_t slotOffset(size_t i, int64_t rank) const;

  /// All-gathers in the group: parameters with at least one byte to send.
  size_t numCollectives() const;
  /// Sums over the parameters.
  int64_t totalShardBytes() const;
  int64_t totalRecvBytes() const;
  int64_t totalFullBytes() const;
  /// Memory the buffers hold beyond the full parameters: totalRecvBytes - totalFullBytes.
  int64_t paddingBytes() const { return totalRecvBytes() - totalFullBytes(); }

 private:
  std::vector<ParamSpec> params_;
  int64_t world_;
};

/// Reference of a parameter-major gather over raw bytes: parameter i's buffer (recvBytes(i)
/// bytes at recv[i]) gets every rank's shard at its slot; shards[r][i] is rank r's shard of
/// parameter i (shardBytes(i) bytes). Its first fullBytes(i) bytes are then the full parameter.
void allGatherParamMajorCpu(const ParamMajorLayout& layout,
                            const std::vector<std::vector<const void*>>& shards,
                            const std::vector<void*>& recv);

/// Reference CPU implementations over raw bytes (used by the CPU backend and the tests).
/// pack: copies shard i (shardBytes(i) bytes at shards[i]) to `packed + offset(i)` and zeroes
/// the alignment gaps.
void packCpu(const PackLayout& layout, const std::vector<const void*>& shards, void* packed);
/// unpack: fills fulls[i] (fullBytes(i) bytes) from the gathered buffer.
void unpackCpu(const PackLayout& layout, const void* gathered, const std::vector<void*>& fulls);
/// The same from W packed chunks `chunkStride` >= packedBytes() bytes apart (rank r's at
/// gathered + r * chunkStride): packed payloads that travelled inside larger envelopes. With
/// `skipRank` in [0, W), that rank's rows are left as they are (unpackRankCpu wrote them). Here
/// and in unpackRankCpu a null output is skipped: its caller places that parameter's rows itself.
void unpackCpu(const PackLayout& layout, const void* gathered, const std::vector<void*>& fulls,
               int64_t chunkStride, int64_t skipRank = -1);
/// Rank `rank`'s rows of every full parameter from its own shards (shards[i] as for packCpu),
/// without the collective: a rank can place its own rows while its peers' are on the way.
void unpackRankCpu(const PackLayout& layout, int64_t rank, const std::vector<const void*>& shards,
                   const std::vector<void*>& fulls);

}  // namespace layout
}  // namespace fsdp_opt
