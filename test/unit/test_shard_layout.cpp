// Unit tests of the sharding / packing layout math (runtime/shard_layout.h, SPEC section 2).
#include "../../runtime/shard_layout.h"

#include <fsdp_opt/format.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

using namespace fsdp_opt::layout;

TEST(ShardLayout, CeilDiv) {
  EXPECT_EQ(ceilDiv(0, 3), 0);
  EXPECT_EQ(ceilDiv(1, 3), 1);
  EXPECT_EQ(ceilDiv(3, 3), 1);
  EXPECT_EQ(ceilDiv(4, 3), 2);
  EXPECT_EQ(ceilDiv(10, 4), 3);
  EXPECT_THROW(ceilDiv(-1, 3), std::invalid_argument);
  EXPECT_THROW(ceilDiv(1, 0), std::invalid_argument);
}

TEST(ShardLayout, RowsPerRankUneven) {
  // N = 10, W = 4: c = 3; ranks hold 3, 3, 3, 1 real rows.
  EXPECT_EQ(shardRows(10, 4), 3);
  EXPECT_EQ(rowBegin(10, 4, 0), 0);
  EXPECT_EQ(rowBegin(10, 4, 3), 9);
  EXPECT_EQ(validRowsOnRank(10, 4, 0), 3);
  EXPECT_EQ(validRowsOnRank(10, 4, 2), 3);
  EXPECT_EQ(validRowsOnRank(10, 4, 3), 1);
}

TEST(ShardLayout, RankPastTheEndHoldsOnlyPadding) {
  // N = 2, W = 4: c = 1; ranks 2 and 3 hold one row of zeros each.
  EXPECT_EQ(shardRows(2, 4), 1);
  EXPECT_EQ(validRowsOnRank(2, 4, 0), 1);
  EXPECT_EQ(validRowsOnRank(2, 4, 1), 1);
  EXPECT_EQ(validRowsOnRank(2, 4, 2), 0);
  EXPECT_EQ(validRowsOnRank(2, 4, 3), 0);
  // N = 5, W = 4: c = 2; rank 2 holds 1 row, rank 3 none.
  EXPECT_EQ(validRowsOnRank(5, 4, 2), 1);
  EXPECT_EQ(validRowsOnRank(5, 4, 3), 0);
  EXPECT_EQ(rowBegin(5, 4, 3), 6);  // past N: begins beyond the end
}

TEST(ShardLayout, ZeroRows) {
  EXPECT_EQ(shardRows(0, 3), 0);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(validRowsOnRank(0, 3, r), 0);
}

TEST(ShardLayout, WorldOneIsIdentity) {
  EXPECT_EQ(shardRows(7, 1), 7);
  EXPECT_EQ(validRowsOnRank(7, 1, 0), 7);
}

TEST(ShardLayout, ValidRowsSumToN) {
  for (int64_t w = 1; w <= 9; ++w) {
    for (int64_t n = 0; n <= 40; ++n) {
      int64_t sum = 0;
      for (int64_t r = 0; r < w; ++r) {
        const int64_t v = validRowsOnRank(n, w, r);
        EXPECT_GE(v, 0);
        EXPECT_LE(v, shardRows(n, w));
        sum += v;
      }
      EXPECT_EQ(sum, n) << "n=" << n << " w=" << w;
    }
  }
}

TEST(ShardLayout, BadRanksAndWorlds) {
  EXPECT_THROW(shardRows(4, 0), std::invalid_argument);
  EXPECT_THROW(shardRows(-1, 2), std::invalid_argument);
  EXPECT_THROW(rowBegin(4, 2, 2), std::invalid_argument);
  EXPECT_THROW(rowBegin(4, 2, -1), std::invalid_argument);
}

TEST(ShardLayout, CheckShardRows) {
  EXPECT_EQ(checkShardRows(3, 10, 4), "");
  EXPECT_EQ(checkShardRows(1, 2, 4), "");
  EXPECT_EQ(checkShardRows(0, 0, 4), "");
  const std::string msg = checkShardRows(2, 10, 4);
  EXPECT_NE(msg.find("2 rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ceil(10/4) = 3"), std::string::npos) << msg;
  EXPECT_NE(checkShardRows(10, 10, 4), "");  // a full tensor is not a shard for W > 1
  EXPECT_NE(checkShardRows(3, 10, 0), "");
}

TEST(PackLayout, OffsetsAreAlignedAndPacked) {
  // Shards: 3 rows x 12 B = 36 B; 1 row x 2 B = 2 B; 2 rows x 8 B = 16 B (W = 4).
  PackLayout l({{10, 12}, {3, 2}, {5, 8}}, 4);
  EXPECT_EQ(l.shardRows(0), 3);
  EXPECT_EQ(l.shardRows(1), 1);
  EXPECT_EQ(l.shardRows(2), 2);
  EXPECT_EQ(l.offset(0), 0);
  EXPECT_EQ(l.offset(1), 48);  // 36 rounded up to 16
  EXPECT_EQ(l.offset(2), 64);  // 50 rounded up to 16
  EXPECT_EQ(l.packedBytes(), 80);
  EXPECT_EQ(l.gatheredBytes(), 320);
  EXPECT_EQ(l.fullBytes(0), 120);
  EXPECT_EQ(l.totalFullBytes(), 120 + 6 + 40);
  for (size_t i = 0; i < l.numParams(); ++i) EXPECT_EQ(l.offset(i) % 16, 0);
}

TEST(PackLayout, CustomAlignment) {
  PackLayout l({{3, 3}, {3, 5}}, 2, /*alignment=*/1);
  EXPECT_EQ(l.offset(1), 6);
  EXPECT_EQ(l.packedBytes(), 16);
  EXPECT_THROW(PackLayout({{3, 3}}, 2, 3), std::invalid_argument);
  EXPECT_THROW(PackLayout({{3, 3}}, 0), std::invalid_argument);
  EXPECT_THROW(PackLayout({{-3, 3}}, 2), std::invalid_argument);
}

TEST(PackLayout, SegmentsSkipPaddingOnlyRanks) {
  PackLayout l({{2, 4}}, 4);  // c = 1: ranks 2, 3 hold only padding
  const auto segs = l.unpackSegments(0);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].rank, 0);
  EXPECT_EQ(segs[0].srcOffset, 0);
  EXPECT_EQ(segs[0].dstOffset, 0);
  EXPECT_EQ(segs[0].bytes, 4);
  EXPECT_EQ(segs[1].rank, 1);
  EXPECT_EQ(segs[1].srcOffset, l.packedBytes());
  EXPECT_EQ(segs[1].dstOffset, 4);
  EXPECT_EQ(segs[1].bytes, 4);
}

TEST(PackLayout, EmptyUnit) {
  PackLayout l({}, 3);
  EXPECT_EQ(l.packedBytes(), 0);
  EXPECT_EQ(l.gatheredBytes(), 0);
}

TEST(PackLayout, OverflowIsAnError) {
  EXPECT_THROW(PackLayout({{INT64_MAX / 2, 4}}, 1), std::overflow_error);
}

namespace {

// Simulates a whole coalesced all-gather in memory: shard every parameter for `world` ranks as
// SPEC section 2 says, pack each rank's chunk, concatenate the chunks in rank order, unpack, and
// compare with the originals byte for byte.
void roundTrip(const std::vector<ParamSpec>& specs, int64_t world, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> originals;
  for (const ParamSpec& s : specs) {
    std::vector<uint8_t> bytes(static_cast<size_t>(s.fullRows * s.rowBytes));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    originals.push_back(std::move(bytes));
  }
  const PackLayout l(specs, world);
  std::vector<uint8_t> gathered(static_cast<size_t>(l.gatheredBytes()), 0xAB);
  for (int64_t r = 0; r < world; ++r) {
    std::vector<std::vector<uint8_t>> shards;
    std::vector<const void*> ptrs;
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      std::vector<uint8_t> shard(static_cast<size_t>(l.shardBytes(i)), 0);  // zero padding
      const int64_t rows = validRowsOnRank(s.fullRows, world, r);
      const int64_t begin = rowBegin(s.fullRows, world, r);
      if (rows * s.rowBytes > 0) {  // an empty vector's data() may be null, which memcpy forbids
        std::memcpy(shard.data(), originals[i].data() + begin * s.rowBytes,
                    static_cast<size_t>(rows * s.rowBytes));
      }
      shards.push_back(std::move(shard));
      ptrs.push_back(shards.back().data());
    }
    packCpu(l, ptrs, gathered.data() + r * l.packedBytes());
  }
  std::vector<std::vector<uint8_t>> fulls;
  std::vector<void*> outs;
  for (size_t i = 0; i < specs.size(); ++i) {
    fulls.emplace_back(static_cast<size_t>(l.fullBytes(i)), 0xCD);
    outs.push_back(fulls.back().data());
  }
  unpackCpu(l, gathered.data(), outs);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(fulls[i], originals[i]) << "param " << i << " world " << world;
  }
  // The same chunks inside larger envelopes: a 64-byte header before each, 48 bytes of tail.
  const int64_t stride = l.packedBytes() + 64 + 48;
  std::vector<uint8_t> enveloped(static_cast<size_t>(world * stride), 0xEE);
  for (int64_t r = 0; r < world && l.packedBytes() > 0; ++r) {  // no memcpy from an empty vector's data()
    std::memcpy(enveloped.data() + r * stride + 64, gathered.data() + r * l.packedBytes(),
                static_cast<size_t>(l.packedBytes()));
  }
  for (auto& f : fulls) std::fill(f.begin(), f.end(), 0xCD);
  unpackCpu(l, enveloped.data() + 64, outs, stride);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(fulls[i], originals[i]) << "param " << i << " world " << world << " (in envelopes)";
  }
  EXPECT_THROW(unpackCpu(l, enveloped.data(), outs, l.packedBytes() - 1), std::invalid_argument);
  // Each rank's own rows from its shards first, then everyone else's from the chunks: the same
  // fulls, whichever rank goes first.
  for (int64_t own = 0; own < world; ++own) {
    for (auto& f : fulls) std::fill(f.begin(), f.end(), 0xCD);
    std::vector<const void*> ownChunk;
    for (size_t i = 0; i < specs.size(); ++i) ownChunk.push_back(gathered.data() + own * l.packedBytes() + l.offset(i));
    unpackRankCpu(l, own, ownChunk, outs);
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t begin = rowBegin(specs[i].fullRows, world, own) * specs[i].rowBytes;
      const int64_t rows = validRowsOnRank(specs[i].fullRows, world, own) * specs[i].rowBytes;
      for (int64_t b = 0; b < l.fullBytes(i); ++b) {
        const bool mine = b >= begin && b < begin + rows;
        ASSERT_EQ(fulls[i][b], mine ? originals[i][b] : 0xCD) << "param " << i << " byte " << b << " rank " << own;
      }
    }
    unpackCpu(l, enveloped.data() + 64, outs, stride, own);
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(fulls[i], originals[i]) << "param " << i << " world " << world << " own rank " << own;
    }
  }
}

}  // namespace

TEST(PackLayout, RoundTripMixedRowSizes) {
  // Row sizes of float32 [*, 3], float16 [*, 5], int64 [*], float32 [*, 4, 2], and odd sizes.
  const std::vector<ParamSpec> specs = {{10, 12}, {2, 10}, {7, 8}, {1, 32}, {0, 12}, {13, 3}};
  for (int64_t w = 1; w <= 6; ++w) roundTrip(specs, w, static_cast<uint32_t>(w));
}

TEST(PackLayout, RoundTripManyShapes) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<ParamSpec> specs;
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      specs.push_back({static_cast<int64_t>(rng() % 17), static_cast<int64_t>(rng() % 9)});
    }
    roundTrip(specs, 1 + static_cast<int64_t>(rng() % 8), rng());
  }
}

TEST(PackLayout, PackZeroesAlignmentGaps) {
  PackLayout l({{2, 3}, {2, 3}}, 2);  // shard 3 bytes each; second at offset 16
  std::vector<uint8_t> a{1, 2, 3}, b{4, 5, 6};
  std::vector<uint8_t> packed(static_cast<size_t>(l.packedBytes()), 0xFF);
  packCpu(l, {a.data(), b.data()}, packed.data());
  for (int64_t k = 3; k < 16; ++k) EXPECT_EQ(packed[static_cast<size_t>(k)], 0) << k;
  EXPECT_EQ(packed[16], 4);
  EXPECT_THROW(packCpu(l, {a.data()}, packed.data()), std::invalid_argument);
}

// ---- parameter-major layout (one all-gather per parameter, no copy-out) --------------------

TEST(ParamMajorLayout, SizesAndSlots) {
  // 10 rows of 12 bytes on 4 ranks: 3 rows a rank, a buffer of 12 rows, the full tensor its
  // first 10 (2 padding rows of the last rank trail it).
  const ParamMajorLayout l({{10, 12}, {0, 8}, {3, 5}, {7, 0}}, 4);
  EXPECT_EQ(l.numParams(), 4u);
  EXPECT_EQ(l.shardRows(0), 3);
  EXPECT_EQ(l.shardBytes(0), 36);
  EXPECT_EQ(l.recvBytes(0), 144);
  EXPECT_EQ(l.fullBytes(0), 120);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(l.slotOffset(0, r), r * 36);
  EXPECT_EQ(l.shardBytes(1), 0);  // zero rows
  EXPECT_EQ(l.recvBytes(1), 0);
  EXPECT_EQ(l.shardRows(2), 1);   // 3 rows on 4 ranks: rank 3 holds only padding
  EXPECT_EQ(l.recvBytes(2), 20);
  EXPECT_EQ(l.fullBytes(2), 15);
  EXPECT_EQ(l.shardBytes(3), 0);  // zero-byte rows
  EXPECT_EQ(l.numCollectives(), 2u);
  EXPECT_EQ(l.totalShardBytes(), 36 + 5);
  EXPECT_EQ(l.totalRecvBytes(), 144 + 20);
  EXPECT_EQ(l.totalFullBytes(), 120 + 15);
  EXPECT_EQ(l.paddingBytes(), 24 + 5);
  EXPECT_THROW(l.slotOffset(0, 4), std::invalid_argument);
  EXPECT_THROW(l.slotOffset(0, -1), std::invalid_argument);
}

TEST(ParamMajorLayout, WorldOneHasNoPadding) {
  const ParamMajorLayout l({{10, 12}, {1, 3}}, 1);
  EXPECT_EQ(l.recvBytes(0), l.fullBytes(0));
  EXPECT_EQ(l.paddingBytes(), 0);
}

TEST(ParamMajorLayout, BadInputs) {
  EXPECT_THROW(ParamMajorLayout({{1, 1}}, 0), std::invalid_argument);
  EXPECT_THROW(ParamMajorLayout({{-1, 1}}, 2), std::invalid_argument);
  EXPECT_THROW(ParamMajorLayout({{1, -1}}, 2), std::invalid_argument);
  EXPECT_THROW(ParamMajorLayout({{INT64_MAX / 2, 4}}, 1), std::overflow_error);
  EXPECT_THROW(ParamMajorLayout({{INT64_MAX / 8, 1}, {INT64_MAX / 8, 1}, {INT64_MAX / 8, 1},
                                 {INT64_MAX / 8, 1}, {INT64_MAX / 8, 1}, {INT64_MAX / 8, 1},
                                 {INT64_MAX / 8, 1}, {INT64_MAX / 8, 1}, {INT64_MAX / 8, 1}},
                                1),
               std::overflow_error);  // the sum of the buffers overflows
}

namespace {

// Every rank's shards of every parameter (SPEC section 2, zero padded) gathered parameter-major:
// each buffer's first fullBytes must be the original, and equal the packed path's unpack.
void paramMajorRoundTrip(const std::vector<ParamSpec>& specs, int64_t world, uint32_t seed) {
  std::mt19937 rng(seed);
  const ParamMajorLayout l(specs, world);
  const PackLayout packed(specs, world);
  std::vector<std::vector<uint8_t>> originals;
  for (const ParamSpec& s : specs) {
    std::vector<uint8_t> bytes(static_cast<size_t>(s.fullRows * s.rowBytes));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    originals.push_back(std::move(bytes));
  }
  std::vector<std::vector<std::vector<uint8_t>>> shards(static_cast<size_t>(world));
  std::vector<std::vector<const void*>> ptrs(static_cast<size_t>(world));
  std::vector<uint8_t> gathered(static_cast<size_t>(packed.gatheredBytes()), 0xAB);
  for (int64_t r = 0; r < world; ++r) {
    auto& mine = shards[static_cast<size_t>(r)];
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      std::vector<uint8_t> shard(static_cast<size_t>(l.shardBytes(i)), 0);
      const int64_t rows = validRowsOnRank(s.fullRows, world, r);
      if (rows * s.rowBytes > 0) {  // an empty vector's data() may be null, which memcpy forbids
        std::memcpy(shard.data(), originals[i].data() + rowBegin(s.fullRows, world, r) * s.rowBytes,
                    static_cast<size_t>(rows * s.rowBytes));
      }
      mine.push_back(std::move(shard));
    }
    for (const auto& s : mine) ptrs[static_cast<size_t>(r)].push_back(s.data());
    packCpu(packed, ptrs[static_cast<size_t>(r)], gathered.data() + r * packed.packedBytes());
  }
  std::vector<std::vector<uint8_t>> bufs, unpacked;
  std::vector<void*> recv, outs;
  for (size_t i = 0; i < specs.size(); ++i) {
    bufs.emplace_back(static_cast<size_t>(l.recvBytes(i)), 0xCD);
    recv.push_back(bufs.back().data());
    unpacked.emplace_back(static_cast<size_t>(packed.fullBytes(i)), 0xEF);
    outs.push_back(unpacked.back().data());
  }
  allGatherParamMajorCpu(l, ptrs, recv);
  unpackCpu(packed, gathered.data(), outs);
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<uint8_t> view(bufs[i].begin(), bufs[i].begin() + l.fullBytes(i));
    EXPECT_EQ(view, originals[i]) << "param " << i << " world " << world;
    EXPECT_EQ(view, unpacked[i]) << "param " << i << " world " << world;
    for (size_t k = static_cast<size_t>(l.fullBytes(i)); k < bufs[i].size(); ++k) {
      ASSERT_EQ(bufs[i][k], 0) << "the trailing rows are the last ranks' zero padding";
    }
  }
}

}  // namespace

TEST(ParamMajorLayout, RoundTripMatchesThePackedLayout) {
  const std::vector<ParamSpec> specs = {{10, 12}, {2, 10}, {7, 8}, {1, 32}, {0, 12}, {13, 3}};
  for (int64_t w = 1; w <= 6; ++w) paramMajorRoundTrip(specs, w, static_cast<uint32_t>(w));
  std::mt19937 rng(4321);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<ParamSpec> many;
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      many.push_back({static_cast<int64_t>(rng() % 17), static_cast<int64_t>(rng() % 9)});
    }
    paramMajorRoundTrip(many, 1 + static_cast<int64_t>(rng() % 8), rng());
  }
}

TEST(ParamMajorLayout, CpuGatherChecksItsArguments) {
  const ParamMajorLayout l({{4, 2}}, 2);
  std::vector<uint8_t> a(4), buf(8);
  EXPECT_THROW(allGatherParamMajorCpu(l, {{a.data()}}, {buf.data()}), std::invalid_argument);
  EXPECT_THROW(allGatherParamMajorCpu(l, {{a.data()}, {}}, {buf.data()}), std::invalid_argument);
  EXPECT_THROW(allGatherParamMajorCpu(l, {{a.data()}, {a.data()}}, {}), std::invalid_argument);
}

TEST(PackLayout, UnpackSkipsNullOutputs) {
  // A parameter whose rows the caller places itself (a strided full tensor) gets no bytes here.
  const PackLayout l({{4, 2}, {3, 4}}, 2);
  std::vector<uint8_t> gathered(static_cast<size_t>(l.gatheredBytes()));
  std::iota(gathered.begin(), gathered.end(), 1);
  std::vector<uint8_t> second(static_cast<size_t>(l.fullBytes(1)), 0);
  unpackCpu(l, gathered.data(), {nullptr, second.data()});
  EXPECT_NE(second, std::vector<uint8_t>(second.size(), 0));
  std::vector<uint8_t> own(static_cast<size_t>(l.fullBytes(1)), 0);
  unpackRankCpu(l, 0, {gathered.data(), gathered.data() + l.offset(1)}, {nullptr, own.data()});
  EXPECT_TRUE(std::equal(own.begin(), own.begin() + 8, gathered.begin() + l.offset(1)));
}

// format.h, "memory layout of a shard".
namespace {

std::vector<int64_t> forRows(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                             int64_t toRows) {
  std::vector<int64_t> out(strides.size());
  fsdp_opt::stridesForRows(sizes.data(), strides.data(), static_cast<int64_t>(strides.size()), sizes[0], toRows,
                           out.data());
  return out;
}

}  // namespace

TEST(ShardMemoryLayout, RowMajorStridesIncludeSize1Dims) {
  using fsdp_opt::hasRowMajorStrides;
  const std::vector<int64_t> sizes = {2, 3, 4}, rowMajor = {12, 4, 1};
  EXPECT_TRUE(hasRowMajorStrides(sizes.data(), rowMajor.data(), 3));
  // A 1x1 kernel in channels_last: contiguous to is_contiguous(), not row-major.
  const std::vector<int64_t> kernel = {8, 4, 1, 1}, channelsLast = {4, 1, 4, 4}, contiguous = {4, 1, 1, 1};
  EXPECT_FALSE(hasRowMajorStrides(kernel.data(), channelsLast.data(), 4));
  EXPECT_TRUE(hasRowMajorStrides(kernel.data(), contiguous.data(), 4));
  const std::vector<int64_t> empty = {0, 3}, emptyStrides = {3, 1};
  EXPECT_TRUE(hasRowMajorStrides(empty.data(), emptyStrides.data(), 2));
}

TEST(ShardMemoryLayout, ChannelsLastRowsAreUnchanged) {
  // conv weight [64, 3, 7, 7] in channels_last: dim 0 is outermost, no stride spans its rows.
  const std::vector<int64_t> sizes = {64, 3, 7, 7}, strides = {147, 1, 21, 3};
  EXPECT_EQ(forRows(sizes, strides, 22), strides);
  // A depthwise [4, 1, 3, 3] and a 1x1 [8, 4, 1, 1] kernel keep their size-1 dims' strides.
  EXPECT_EQ(forRows({4, 1, 3, 3}, {9, 1, 3, 1}, 2), (std::vector<int64_t>{9, 1, 3, 1}));
  EXPECT_EQ(forRows({8, 4, 1, 1}, {4, 1, 4, 4}, 1), (std::vector<int64_t>{4, 1, 4, 4}));
}

TEST(ShardMemoryLayout, StridesSpanningRowsScaleBothWays) {
  // A transposed [301, 96] weight (strides (1, 301)): its shard of 151 rows has strides (1, 151).
  EXPECT_EQ(forRows({301, 96}, {1, 301}, 151), (std::vector<int64_t>{1, 151}));
  EXPECT_EQ(forRows({151, 96}, {1, 151}, 301), (std::vector<int64_t>{1, 301}));
  // [4, 5, 6] laid out dim 1, dim 0, dim 2 (outer to inner): dim 1 spans the rows.
  EXPECT_EQ(forRows({4, 5, 6}, {6, 24, 1}, 2), (std::vector<int64_t>{6, 12, 1}));
  EXPECT_EQ(forRows({2, 5, 6}, {6, 12, 1}, 4), (std::vector<int64_t>{6, 24, 1}));
  // One row per shard (more ranks than rows) and back.
  EXPECT_EQ(forRows({3, 5}, {1, 3}, 1), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(forRows({1, 5}, {1, 1}, 3), (std::vector<int64_t>{1, 3}));
}
