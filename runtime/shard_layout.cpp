#include "shard_layout.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "fsdp_opt/format.h"

namespace fsdp_opt {
namespace layout {
namespace {

int64_t mulChecked(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw std::overflow_error(std::string("fsdp layout: overflow computing ") + what);
  }
  return r;
}

int64_t addChecked(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw std::overflow_error(std::string("fsdp layout: overflow computing ") + what);
  }
  return r;
}

void requireWorld(int64_t world) {
  if (world <= 0) {
    throw std::invalid_argument("fsdp layout: world size must be positive, got " +
                                std::to_string(world));
  }
}

void requireRows(int64_t rows) {
  if (rows < 0) {
    throw std::invalid_argument("fsdp layout: row count must be non-negative, got " +
                                std::to_string(rows));
  }
}

}  // namespace

int64_t ceilDiv(int64_t a, int64_t b) {
  if (a < 0 || b <= 0) {
    throw std::invalid_argument("fsdp layout: ceilDiv(" + std::to_string(a) + ", " +
                                std::to_string(b) + ") out of domain");
  }
  return a / b + (a % b != 0 ? 1 : 0);
}

int64_t shardRows(int64_t fullRows, int64_t world) {
  requireRows(fullRows);
  requireWorld(world);
  return fsdp_opt::shardRows(fullRows, world);  // the format's rows (format.h), checked
}

int64_t rowBegin(int64_t fullRows, int64_t world, int64_t rank) {
  if (rank < 0 || rank >= world) {
    throw std::invalid_argument("fsdp layout: rank " + std::to_string(rank) +
                                " out of range for world size " + std::to_string(world));
  }
  return mulChecked(rank, shardRows(fullRows, world), "row offset");
}

int64_t validRowsOnRank(int64_t fullRows, int64_t world, int64_t rank) {
  rowBegin(fullRows, world, rank);  // checks the arguments
  return fsdp_opt::shardValidRows(fullRows, world, rank);
}

std::string checkShardRows(int64_t shardRowsGot, int64_t fullRows, int64_t world) {
  if (world <= 0) return "world size " + std::to_string(world) + " is not positive";
  if (fullRows < 0) return "full row count " + std::to_string(fullRows) + " is negative";
  const int64_t want = fsdp_opt::shardRows(fullRows, world);
  if (shardRowsGot == want) return {};
  std::ostringstream os;
  os << "shard has " << shardRowsGot << " rows, but a parameter of " << fullRows
     << " rows sharded over " << world << " ranks must have ceil(" << fullRows << "/" << world
     << ") = " << want << " rows per rank";
  return os.str();
}

PackLayout::PackLayout(std::vector<ParamSpec> params, int64_t world, int64_t alignment)
    : params_(std::move(params)), world_(world), alignment_(alignment) {
  requireWorld(world_);
  if (alignment_ <= 0 || (alignment_ & (alignment_ - 1)) != 0) {
    throw std::invalid_argument("fsdp layout: alignment must be a power of two, got " +
                                std::to_string(alignment_));
  }
  offsets_.reserve(params_.size());
  int64_t cursor = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    requireRows(params_[i].fullRows);
    if (params_[i].rowBytes < 0) {
      throw std::invalid_argument("fsdp layout: negative row size for parameter " +
                                  std::to_string(i));
    }
    cursor = addChecked(cursor, alignment_ - 1, "packed offset") & ~(alignment_ - 1);
    offsets_.push_back(cursor);
    cursor = addChecked(cursor, shardBytes(i), "packed size");
  }
  // Round the chunk up too: rank r's chunk then starts aligned in the gathered buffer.
  packedBytes_ = addChecked(cursor, alignment_ - 1, "packed size") & ~(alignment_ - 1);
  (void)mulChecked(packedBytes_, world_, "gathered size");
}

int64_t PackLayout::shardRows(size_t i) const {
  return layout::shardRows(params_.at(i).fullRows, world_);
}

int64_t PackLayout::shardBytes(size_t i) const {
  return mulChecked(shardRows(i), params_.at(i).rowBytes, "shard size");
}

int64_t PackLayout::fullBytes(size_t i) const {
  return mulChecked(params_.at(i).fullRows, params_.at(i).rowBytes, "full size");
}

int64_t PackLayout::slotEnd(size_t i) const {
  (void)offsets_.at(i);
  return i + 1 < offsets_.size() ? offsets_[i + 1] : packedBytes_;
}

int64_t PackLayout::totalFullBytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) total = addChecked(total, fullBytes(i), "total");
  return total;
}

Segment PackLayout::unpackSegment(size_t i, int64_t rank) const {
  const ParamSpec& p = params_.at(i);
  Segment s;
  s.rank = rank;
  s.srcOffset = rank * packedBytes_ + offsets_[i];
  const int64_t rows = validRowsOnRank(p.fullRows, world_, rank);
  if (rows == 0) return s;
  s.dstOffset = rowBegin(p.fullRows, world_, rank) * p.rowBytes;
  s.bytes = rows * p.rowBytes;
  return s;
}

std::vector<Segment> PackLayout::unpackSegments(size_t i) const {
  std::vector<Segment> segs;
  for (int64_t r = 0; r < world_; ++r) {
    const Segment s = unpackSegment(i, r);
    if (s.bytes > 0) segs.push_back(s);
  }
  return segs;
}

ParamMajorLayout::ParamMajorLayout(std::vector<ParamSpec> params, int64_t world)
    : params_(std::move(params)), world_(world) {
  requireWorld(world_);
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    requireRows(params_[i].fullRows);
    if (params_[i].rowBytes < 0) {
      throw std::invalid_argument("fsdp layout: negative row size for parameter " +
                                  std::to_string(i));
    }
    total = addChecked(total, recvBytes(i), "parameter-major buffer sizes");  // overflow check
  }
}

int64_t ParamMajorLayout::shardRows(size_t i) const {
  return layout::shardRows(params_.at(i).fullRows, world_);
}

int64_t ParamMajorLayout::shardBytes(size_t i) const {
  return mulChecked(shardRows(i), params_.at(i).rowBytes, "shard size");
}

int64_t ParamMajorLayout::recvBytes(size_t i) const {
  return mulChecked(shardBytes(i), world_, "parameter-major buffer size");
}

int64_t ParamMajorLayout::fullBytes(size_t i) const {
  return mulChecked(params_.at(i).fullRows, params_.at(i).rowBytes, "full size");
}

int64_t ParamMajorLayout::slotOffset(size_t i, int64_t rank) const {
  if (rank < 0 || rank >= world_) {
    throw std::invalid_argument("fsdp layout: rank " + std::to_string(rank) +
                                " out of range for world size " + std::to_string(world_));
  }
  return rank * shardBytes(i);  // <= recvBytes(i), checked at construction
}

size_t ParamMajorLayout::numCollectives() const {
  size_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) n += shardBytes(i) > 0 ? 1 : 0;
  return n;
}

int64_t ParamMajorLayout::totalShardBytes() const {
  int64_t t = 0;
  for (size_t i = 0; i < params_.size(); ++i) t = addChecked(t, shardBytes(i), "total");
  return t;
}

int64_t ParamMajorLayout::totalRecvBytes() const {
  int64_t t = 0;
  for (size_t i = 0; i < params_.size(); ++i) t = addChecked(t, recvBytes(i), "total");
  return t;
}

int64_t ParamMajorLayout::totalFullBytes() const {
  int64_t t = 0;
  for (size_t i = 0; i < params_.size(); ++i) t = addChecked(t, fullBytes(i), "total");
  return t;
}

void allGatherParamMajorCpu(const ParamMajorLayout& layout,
                            const std::vector<std::vector<const void*>>& shards,
                            const std::vector<void*>& recv) {
  if (shards.size() != static_cast<size_t>(layout.world()) ||
      recv.size() != layout.numParams()) {
    throw std::invalid_argument("fsdp layout: allGatherParamMajorCpu got shards of " +
                                std::to_string(shards.size()) + " ranks and " +
                                std::to_string(recv.size()) + " buffers for " +
                                std::to_string(layout.world()) + " ranks and " +
                                std::to_string(layout.numParams()) + " parameters");
  }
  for (int64_t r = 0; r < layout.world(); ++r) {
    if (shards[static_cast<size_t>(r)].size() != layout.numParams()) {
      throw std::invalid_argument("fsdp layout: allGatherParamMajorCpu: rank " +
                                  std::to_string(r) + " has the wrong number of shards");
    }
    for (size_t i = 0; i < layout.numParams(); ++i) {
      const int64_t n = layout.shardBytes(i);
      if (n > 0) {
        std::memcpy(static_cast<char*>(recv[i]) + layout.slotOffset(i, r),
                    shards[static_cast<size_t>(r)][i], static_cast<size_t>(n));
      }
    }
  }
}

void packCpu(const PackLayout& layout, const std::vector<const void*>& shards, void* packed) {
  if (shards.size() != layout.numParams()) {
    throw std::invalid_argument("fsdp layout: packCpu got " + std::to_string(shards.size()) +
                                " shards for " + std::to_string(layout.numParams()) +
                                " parameters");
  }
  auto* out = static_cast<char*>(packed);
  for (size_t i = 0; i < layout.numParams(); ++i) {
    const int64_t off = layout.offset(i);
    const int64_t n = layout.shardBytes(i);
    if (n > 0) std::memcpy(out + off, shards[i], static_cast<size_t>(n));
    const int64_t gap = layout.slotEnd(i) - (off + n);
    if (gap > 0) std::memset(out + off + n, 0, static_cast<size_t>(gap));
  }
}

void unpackCpu(const PackLayout& layout, const void* gathered, const std::vector<void*>& fulls) {
  unpackCpu(layout, gathered, fulls, layout.packedBytes());
}

void unpackCpu(const PackLayout& layout, const void* gathered, const std::vector<void*>& fulls,
               int64_t chunkStride, int64_t skipRank) {
  if (chunkStride < layout.packedBytes()) {
    throw std::invalid_argument("fsdp layout: unpackCpu chunks " + std::to_string(chunkStride) +
                                " bytes apart cannot hold " + std::to_string(layout.packedBytes()) +
                                " packed bytes each");
  }
  if (fulls.size() != layout.numParams()) {
    throw std::invalid_argument("fsdp layout: unpackCpu got " + std::to_string(fulls.size()) +
                                " outputs for " + std::to_string(layout.numParams()) +
                                " parameters");
  }
  const auto* in = static_cast<const char*>(gathered);
  for (size_t i = 0; i < layout.numParams(); ++i) {
    auto* out = static_cast<char*>(fulls[i]);
    if (out == nullptr) continue;
    for (int64_t r = 0; r < layout.world(); ++r) {
      if (r == skipRank) continue;
      const Segment s = layout.unpackSegment(i, r);
      if (s.bytes == 0) continue;
      const int64_t src = s.srcOffset + s.rank * (chunkStride - layout.packedBytes());
      std::memcpy(out + s.dstOffset, in + src, static_cast<size_t>(s.bytes));
    }
  }
}

void unpackRankCpu(const PackLayout& layout, int64_t rank, const std::vector<const void*>& shards,
                   const std::vector<void*>& fulls) {
  if (shards.size() != layout.numParams() || fulls.size() != layout.numParams()) {
    throw std::invalid_argument("fsdp layout: unpackRankCpu got " + std::to_string(shards.size()) +
                                " shards and " + std::to_string(fulls.size()) + " outputs for " +
                                std::to_string(layout.numParams()) + " parameters");
  }
  for (size_t i = 0; i < layout.numParams(); ++i) {
    const Segment s = layout.unpackSegment(i, rank);
    if (s.bytes > 0 && fulls[i] != nullptr) {
      std::memcpy(static_cast<char*>(fulls[i]) + s.dstOffset, shards[i], static_cast<size_t>(s.bytes));
    }
  }
}

}  // namespace layout
}  // namespace fsdp_opt
