// Copy plans: the work of ONE launch of the runtime's CUDA copy kernel, as a list of segments
// (copy_kernel_body.h). A unit's copy-in (every shard into the packed send buffer, cast to its
// gathered dtype, alignment gaps zeroed) is one plan; its copy-out (the gathered buffer into
// every full parameter, tail padding dropped) is another; a world-size-1 cast is a third kind.
// Every byte of the destination is written exactly once. The parameter-major layout
// (layout::ParamMajorLayout) needs no copy-out: planParamMajor() says, per parameter, whether
// its all-gather sends the shard itself or a slot the copy-in (a cast) wrote first.
//
// The plans are built from the same PackLayout the CPU pack/unpack use (shard_layout.h), and
// runOnHost() executes a plan with the kernel's own per-block code, so all of this is tested on
// machines without a GPU (test/unit/test_copy_plan.cpp). Torch-free and CUDA-free.
#pragma once

#include <cstdint>
#include <vector>

#include "copy_kernel_body.h"
#include "shard_layout.h"

namespace fsdp_opt {
namespace copyplan {

class CopyPlan {
 public:
  /// Copies `bytes` bytes.
  void addCopy(const void* src, void* dst, int64_t bytes);
  /// Converts `count` elements; the same type on both sides is a plain copy.
  void addCast(const void* src, ElemType srcType, void* dst, ElemType dstType, int64_t count);
  /// Zeroes `bytes` bytes.
  void addZero(void* dst, int64_t bytes);

  const std::vector<Segment>& segments() const { return segments_; }
  /// Thread blocks the kernel launch needs (segments' blocks, back to back).
  int64_t numBlocks() const { return numBlocks_; }
  bool empty() const { return segments_.empty(); }
  /// Bytes the plan reads and writes (for bandwidth figures).
  int64_t bytesRead() const { return bytesRead_; }
  int64_t bytesWritten() const { return bytesWritten_; }

 private:
  void push(const Segment& s, int64_t readBytes, int64_t writtenBytes);

  std::vector<Segment> segments_;
  int64_t numBlocks_ = 0;
  int64_t bytesRead_ = 0;
  int64_t bytesWritten_ = 0;
};

/// Copy-in of one rank: shard i (layout.shardRows(i) rows, contiguous, of type srcTypes[i]) to
/// `packed + layout.offset(i)`, as dstTypes[i] (the layout's row sizes are in dstTypes), and
/// zeroes of every gap, so all layout.packedBytes() bytes are written.
CopyPlan planCopyIn(const layout::PackLayout& layout, const std::vector<const void*>& shards,
                    const std::vector<ElemType>& srcTypes, const std::vector<ElemType>& dstTypes,
                    void* packed);

/// Copy-out: every full parameter i (layout.fullBytes(i) bytes at fulls[i]) from the gathered
/// buffer (layout.gatheredBytes() bytes, W packed chunks in rank order).
CopyPlan planCopyOut(const layout::PackLayout& layout, const void* gathered,
                     const std::vector<void*>& fulls);

/// How one parameter's all-gather gets its send bytes in a parameter-major gather.
enum class SendFrom : uint8_t {
  kNothing,  // the shard has no bytes: no all-gather for this parameter
  kShard,    // the shard itself (contiguous, already the gathered type): no copy at all
  kCopyIn,   // this rank's slot of the parameter's buffer, written by the plan's copy-in (a
             // cast); the all-gather then runs in place
  kStrided,  // this rank's slot, written by the caller's own strided copy (a non-contiguous
             // shard that needs no cast; the copy kernel reads contiguous memory only); in place
};

/// One rank's shard of one parameter, as the parameter-major plan sees it.
struct ShardSource {
  const void* data = nullptr;             // first byte of the shard
  ElemType type = ElemType::kBytes;       // its element type (kBytes: not converted)
  ElemType gathered = ElemType::kBytes;   // the gathered type (== type when no cast)
  bool contiguous = true;                 // dense, shardRows rows, row-major
};

/// The work of a parameter-major gather on one rank besides the grouped all-gather itself.
struct ParamMajorPlan {
  std::vector<SendFrom> from;          // per parameter
  std::vector<const void*> send;       // per parameter: the all-gather's input (null: kNothing)
  CopyPlan copyIn;                     // ONE launch: every kCopyIn shard cast into its slot
  size_t numCopiedIn() const;          // parameters whose send bytes are written first
};

/// Plans rank `rank`'s side of a parameter-major gather (layout::ParamMajorLayout; the layout's
/// row sizes are in the gathered types) into the buffers recv[i] (layout.recvBytes(i) bytes).
/// A contiguous shard in the gathered type is sent as it is; one that needs a cast is cast by
/// the copy-in into this rank's slot of its own buffer (in place, no send buffer); a
/// non-contiguous one that needs no cast is left to the caller's strided copy (kStrided). A
/// non-contiguous shard that needs a cast is an error: make it contiguous first.
ParamMajorPlan planParamMajor(const layout::ParamMajorLayout& layout, int64_t rank,
                              const std::vector<ShardSource>& shards,
                              const std::vector<void*>& recv);

/// Runs every block of `plan` on the calling thread, emulating `threads` threads per block
/// with the kernel's per-block code (the reference implementation, and the CPU tests).
void runOnHost(const CopyPlan& plan, int threads = kThreadsPerBlock);

}  // namespace copyplan
}  // namespace fsdp_opt
