#include "copy_plan.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace fsdp_opt {
namespace copyplan {

void CopyPlan::push(const Segment& seg, int64_t readBytes, int64_t writtenBytes) {
  if (seg.count < 0) throw std::invalid_argument("fsdp copy plan: negative size");
  if (seg.count == 0) return;
  Segment s = seg;
  s.firstBlock = numBlocks_;
  const int64_t per = blockUnits(s);
  numBlocks_ += s.count / per + (s.count % per != 0 ? 1 : 0);
  segments_.push_back(s);
  bytesRead_ += readBytes;
  bytesWritten_ += writtenBytes;
}

void CopyPlan::addCopy(const void* src, void* dst, int64_t bytes) {
  if (src == nullptr && bytes > 0) throw std::invalid_argument("fsdp copy plan: null source");
  Segment s;
  s.src = src;
  s.dst = dst;
  s.count = bytes;
  push(s, bytes, bytes);
}

void CopyPlan::addCast(const void* src, ElemType srcType, void* dst, ElemType dstType,
                       int64_t count) {
  if (srcType == dstType) {
    addCopy(src, dst, count * elemSize(srcType));
    return;
  }
  if (srcType == ElemType::kBytes || dstType == ElemType::kBytes) {
    throw std::invalid_argument("fsdp copy plan: a cast needs element types on both sides");
  }
  if (src == nullptr && count > 0) throw std::invalid_argument("fsdp copy plan: null source");
  // The kernel loads and stores cast elements as their types, and the GPU faults on a typed
  // access that is not aligned to its element (the host emulation would be undefined behaviour).
  // Tensors' data always is; a caller that computed another address has a bug.
  if (count > 0 && (reinterpret_cast<uintptr_t>(src) % elemSize(srcType) != 0 ||
                    reinterpret_cast<uintptr_t>(dst) % elemSize(dstType) != 0)) {
    throw std::invalid_argument("fsdp copy plan: a cast's source or destination is not aligned "
                                "to its element type");
  }
  Segment s;
  s.src = src;
  s.dst = dst;
  s.count = count;
  s.srcType = srcType;
  s.dstType = dstType;
  push(s, count * elemSize(srcType), count * elemSize(dstType));
}

void CopyPlan::addZero(void* dst, int64_t bytes) {
  Segment s;
  s.dst = dst;
  s.count = bytes;
  push(s, 0, bytes);
}

CopyPlan planCopyIn(const layout::PackLayout& layout, const std::vector<const void*>& shards,
                    const std::vector<ElemType>& srcTypes, const std::vector<ElemType>& dstTypes,
                    void* packed) {
  const size_t n = layout.numParams();
  if (shards.size() != n || srcTypes.size() != n || dstTypes.size() != n) {
    throw std::invalid_argument("fsdp copy plan: copy-in got " + std::to_string(shards.size()) +
                                " shards for " + std::to_string(n) + " parameters");
  }
  CopyPlan plan;
  auto* out = static_cast<char*>(packed);
  for (size_t i = 0; i < n; ++i) {
    const int64_t bytes = layout.shardBytes(i);
    const int dstSize = elemSize(dstTypes[i]);
    if (bytes % dstSize != 0) {
      throw std::invalid_argument("fsdp copy plan: parameter " + std::to_string(i) + " has " +
                                  std::to_string(bytes) + " shard bytes, not a whole number of " +
                                  std::to_string(dstSize) + "-byte elements");
    }
    plan.addCast(shards[i], srcTypes[i], out + layout.offset(i), dstTypes[i], bytes / dstSize);
    const int64_t end = layout.offset(i) + bytes;
    plan.addZero(out + end, layout.slotEnd(i) - end);
  }
  return plan;
}

CopyPlan planCopyOut(const layout::PackLayout& layout, const void* gathered,
                     const std::vector<void*>& fulls) {
  if (fulls.size() != layout.numParams()) {
    throw std::invalid_argument("fsdp copy plan: copy-out got " + std::to_string(fulls.size()) +
                                " outputs for " + std::to_string(layout.numParams()) +
                                " parameters");
  }
  CopyPlan plan;
  const auto* in = static_cast<const char*>(gathered);
  for (size_t i = 0; i < layout.numParams(); ++i) {
    auto* out = static_cast<char*>(fulls[i]);
    for (const layout::Segment& s : layout.unpackSegments(i)) {
      plan.addCopy(in + s.srcOffset, out + s.dstOffset, s.bytes);
    }
  }
  return plan;
}

size_t ParamMajorPlan::numCopiedIn() const {
  size_t n = 0;
  for (SendFrom f : from) n += (f == SendFrom::kCopyIn || f == SendFrom::kStrided) ? 1 : 0;
  return n;
}

ParamMajorPlan planParamMajor(const layout::ParamMajorLayout& layout, int64_t rank,
                              const std::vector<ShardSource>& shards,
                              const std::vector<void*>& recv) {
  const size_t n = layout.numParams();
  if (shards.size() != n || recv.size() != n) {
    throw std::invalid_argument("fsdp copy plan: parameter-major plan got " +
                                std::to_string(shards.size()) + " shards and " +
                                std::to_string(recv.size()) + " buffers for " +
                                std::to_string(n) + " parameters");
  }
  ParamMajorPlan plan;
  plan.from.resize(n, SendFrom::kNothing);
  plan.send.resize(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const int64_t bytes = layout.shardBytes(i);
    if (bytes == 0) continue;
    const ShardSource& s = shards[i];
    if (s.data == nullptr || recv[i] == nullptr) {
      throw std::invalid_argument("fsdp copy plan: parameter " + std::to_string(i) +
                                  " has a null shard or buffer");
    }
    const bool cast = s.type != s.gathered;
    char* slot = static_cast<char*>(recv[i]) + layout.slotOffset(i, rank);
    if (!cast && s.contiguous) {
      plan.from[i] = SendFrom::kShard;
      plan.send[i] = s.data;
      continue;
    }
    plan.send[i] = slot;
    if (!s.contiguous) {
      if (cast) {
        throw std::invalid_argument("fsdp copy plan: parameter " + std::to_string(i) +
                                    " needs a cast but its shard is not contiguous");
      }
      plan.from[i] = SendFrom::kStrided;
      continue;
    }
    const int dstSize = elemSize(s.gathered);
    if (bytes % dstSize != 0) {
      throw std::invalid_argument("fsdp copy plan: parameter " + std::to_string(i) + " has " +
                                  std::to_string(bytes) + " shard bytes, not a whole number of " +
                                  std::to_string(dstSize) + "-byte elements");
    }
    plan.from[i] = SendFrom::kCopyIn;
    plan.copyIn.addCast(s.data, s.type, slot, s.gathered, bytes / dstSize);
  }
  return plan;
}

void runOnHost(const CopyPlan& plan, int threads) {
  const std::vector<Segment>& segs = plan.segments();
  const int n = static_cast<int>(segs.size());
  for (int64_t b = 0; b < plan.numBlocks(); ++b) {
    for (int t = 0; t < threads; ++t) runBlock(segs.data(), n, b, t, threads);
  }
}

}  // namespace copyplan
}  // namespace fsdp_opt
