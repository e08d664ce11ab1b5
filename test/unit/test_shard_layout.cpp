// Unit tests of the sharding / packing layout math (runtime/shard_layout.h, SPEC section 2).
#include "../../runtime/shard_layout.h"

#include <gtest/gtest.h>

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
      if (rows > 0) {
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
