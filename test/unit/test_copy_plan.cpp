// Tests of the CUDA copy kernel's logic on the CPU: the dtype conversions against c10's, and
// copy-in / copy-out plans (runtime/copy_plan.h) run with the kernel's own per-block code
// (copyplan::runOnHost) against the CPU pack/unpack and c10 casts.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../runtime/copy_plan.h"
#include "../../runtime/shard_layout.h"

using namespace fsdp_opt::copyplan;
using fsdp_opt::layout::PackLayout;
using fsdp_opt::layout::ParamSpec;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t c10Half(float f) { return c10::Half(f).x; }
uint16_t c10Bf16(float f) { return c10::BFloat16(f).x; }

// Floats that matter for rounding: around every half/bfloat16 boundary, subnormals, specials.
std::vector<float> interestingFloats() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 997) v.push_back(floatOf(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    // every half, and the floats right at, just below and just above half-way to the next one
    const float f = static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    const uint32_t b = bitsOf(f);
    for (uint32_t d : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
      v.push_back(floatOf(b + d));
      v.push_back(floatOf(b - d));
    }
    const uint32_t bb = static_cast<uint32_t>(h) << 16;  // every bfloat16
    for (uint32_t d : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) v.push_back(floatOf(bb + d));
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 5.9604645e-08f,
                  2.9802322e-08f, 2.9802326e-08f, 6.1035156e-05f, 1e-45f, 3.4028235e38f,
                  INFINITY, -INFINITY}) {
    v.push_back(f);
  }
  return v;
}

bool sameFloatBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return bitsOf(a) == bitsOf(b);
}

}  // namespace

TEST(CopyConversions, FloatToHalfMatchesC10) {
  for (float f : interestingFloats()) {
    ASSERT_EQ(halfFromFloat(f), c10Half(f)) << "float bits 0x" << std::hex << bitsOf(f);
  }
}

TEST(CopyConversions, FloatToBFloat16MatchesC10) {
  for (float f : interestingFloats()) {
    ASSERT_EQ(bf16FromFloat(f), c10Bf16(f)) << "float bits 0x" << std::hex << bitsOf(f);
  }
}

TEST(CopyConversions, HalfAndBFloat16ToFloatAreExact) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto x = static_cast<uint16_t>(h);
    ASSERT_TRUE(sameFloatBits(floatFromHalf(x),
                              static_cast<float>(c10::Half(x, c10::Half::from_bits()))))
        << "half 0x" << std::hex << h;
    ASSERT_TRUE(sameFloatBits(floatFromBf16(x),
                              static_cast<float>(c10::BFloat16(x, c10::BFloat16::from_bits()))))
        << "bfloat16 0x" << std::hex << h;
  }
}

TEST(CopyConversions, DoubleNarrowsThroughFloatLikeC10) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint64_t u = rng();
    double d;
    std::memcpy(&d, &u, 8);
    if (i % 2 == 0) d = std::ldexp(static_cast<double>(rng() % 100000) / 777.0, int(rng() % 80) - 40);
    Segment s;
    uint16_t out = 0;
    s.src = &d;
    s.dst = &out;
    s.count = 1;
    s.srcType = ElemType::kF64;
    s.dstType = ElemType::kF16;
    castRange(s, 0, 1, 0, 1);
    ASSERT_EQ(out, c10::Half(static_cast<float>(d)).x);  // c10::Half(double) converts via float
    s.dstType = ElemType::kBF16;
    castRange(s, 0, 1, 0, 1);
    ASSERT_EQ(out, c10::BFloat16(static_cast<float>(d)).x);
  }
}

TEST(CopyPlan, SegmentLookupAndBlockCounts) {
  CopyPlan plan;
  std::vector<char> a(100000), b(100000);
  std::vector<float> f(9000);
  std::vector<uint16_t> h(9000);
  plan.addCopy(a.data(), b.data(), kBlockBytes * 2 + 1);   // 3 blocks
  plan.addZero(b.data(), 10);                              // 1 block
  plan.addCopy(a.data(), b.data(), 0);                     // nothing
  plan.addCast(f.data(), ElemType::kF32, h.data(), ElemType::kF16, kBlockElems * 2);  // 2 blocks
  plan.addCast(f.data(), ElemType::kF32, f.data(), ElemType::kF32, 3);  // same type: a copy
  ASSERT_EQ(plan.segments().size(), 4u);
  EXPECT_EQ(plan.numBlocks(), 3 + 1 + 2 + 1);
  const auto& s = plan.segments();
  EXPECT_EQ(s[0].firstBlock, 0);
  EXPECT_EQ(s[1].firstBlock, 3);
  EXPECT_EQ(s[2].firstBlock, 4);
  EXPECT_EQ(s[3].firstBlock, 6);
  EXPECT_EQ(s[3].srcType, ElemType::kBytes);
  EXPECT_EQ(s[3].count, 12);
  const int n = static_cast<int>(s.size());
  EXPECT_EQ(findSegment(s.data(), n, 0), 0);
  EXPECT_EQ(findSegment(s.data(), n, 2), 0);
  EXPECT_EQ(findSegment(s.data(), n, 3), 1);
  EXPECT_EQ(findSegment(s.data(), n, 4), 2);
  EXPECT_EQ(findSegment(s.data(), n, 5), 2);
  EXPECT_EQ(findSegment(s.data(), n, 6), 3);
  EXPECT_EQ(plan.bytesWritten(), kBlockBytes * 2 + 1 + 10 + kBlockElems * 2 * 2 + 12);
  // A zero reads nothing; the f32 -> f16 cast reads 4 bytes per element and writes 2.
  EXPECT_EQ(plan.bytesRead(), kBlockBytes * 2 + 1 + kBlockElems * 2 * 4 + 12);
  EXPECT_THROW(plan.addCast(f.data(), ElemType::kBytes, h.data(), ElemType::kF16, 1),
               std::invalid_argument);
}

TEST(CopyPlan, ByteCopiesAtEveryAlignmentAndThreadCount) {
  std::mt19937 rng(3);
  std::vector<uint8_t> src(3 * kBlockBytes + 100);
  for (auto& x : src) x = static_cast<uint8_t>(rng());
  for (int srcOff : {0, 1, 4, 8, 12, 16}) {
    for (int dstOff : {0, 3, 8, 16}) {
      for (int threads : {1, 7, 32, 256}) {
        const int64_t n = 2 * kBlockBytes + 37;
        std::vector<uint8_t> dst(src.size() + 32, 0xEE);
        CopyPlan plan;
        plan.addCopy(src.data() + srcOff, dst.data() + dstOff, n);
        runOnHost(plan, threads);
        ASSERT_EQ(0, std::memcmp(dst.data() + dstOff, src.data() + srcOff, static_cast<size_t>(n)))
            << srcOff << " " << dstOff << " " << threads;
        ASSERT_EQ(dst[static_cast<size_t>(dstOff + n)], 0xEE);  // nothing past the end
        if (dstOff > 0) ASSERT_EQ(dst[static_cast<size_t>(dstOff - 1)], 0xEE);
        CopyPlan zero;
        zero.addZero(dst.data() + dstOff, n);
        runOnHost(zero, threads);
        for (int64_t k = 0; k < n; ++k) ASSERT_EQ(dst[static_cast<size_t>(dstOff + k)], 0);
        ASSERT_EQ(dst[static_cast<size_t>(dstOff + n)], 0xEE);
      }
    }
  }
}

namespace {

// A parameter of a simulated unit: its full contents in its own type, and the type it is
// gathered in.
struct TestParam {
  int64_t rows;
  int64_t rowElems;
  ElemType own;
  ElemType gathered;
};

// Every conversion the kernel does, plain bytes, an empty parameter and odd row sizes: the
// unit both gather layouts' round trips are checked on.
std::vector<TestParam> mixedCastParams() {
  const ElemType f16 = ElemType::kF16, bf16 = ElemType::kBF16, f32 = ElemType::kF32,
                 f64 = ElemType::kF64, raw = ElemType::kBytes;
  return {{10, 3, f32, bf16}, {2, 5, f64, f16},  {7, 8, raw, raw},  {1, 8, f16, f32},
          {0, 3, f32, bf16},  {13, 1, bf16, f64}, {9, 2, f32, f32}, {5, 3, f64, f32},
          {3, 7, f32, f16},   {4, 3, bf16, f16}};
}

std::vector<uint8_t> randomElems(std::mt19937_64& rng, ElemType t, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n * elemSize(t)));
  for (int64_t k = 0; k < n; ++k) {
    // finite values over a wide range of magnitudes, in the element's own type
    const double v = std::ldexp(static_cast<double>(static_cast<int64_t>(rng() % 2000001) - 1000000) / 1e6,
                                static_cast<int>(rng() % 200) - 150);
    uint8_t* p = out.data() + k * elemSize(t);
    switch (t) {
      case ElemType::kF16: {
        const uint16_t x = c10::Half(static_cast<float>(v)).x;
        std::memcpy(p, &x, 2);
        break;
      }
      case ElemType::kBF16: {
        const uint16_t x = c10::BFloat16(static_cast<float>(v)).x;
        std::memcpy(p, &x, 2);
        break;
      }
      case ElemType::kF32: {
        const float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case ElemType::kF64:
        std::memcpy(p, &v, 8);
        break;
      default:
        *p = static_cast<uint8_t>(rng());
        break;
    }
  }
  return out;
}

// The reference cast: c10's scalar conversions, element by element.
std::vector<uint8_t> c10Cast(const std::vector<uint8_t>& in, ElemType from, ElemType to) {
  if (from == to) return in;
  const int64_t n = static_cast<int64_t>(in.size()) / elemSize(from);
  std::vector<uint8_t> out(static_cast<size_t>(n * elemSize(to)));
  for (int64_t k = 0; k < n; ++k) {
    const uint8_t* p = in.data() + k * elemSize(from);
    double d = 0;
    float f = 0;
    bool isDouble = false;
    switch (from) {
      case ElemType::kF16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        f = static_cast<float>(c10::Half(x, c10::Half::from_bits()));
        break;
      }
      case ElemType::kBF16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        f = static_cast<float>(c10::BFloat16(x, c10::BFloat16::from_bits()));
        break;
      }
      case ElemType::kF32:
        std::memcpy(&f, p, 4);
        break;
      default:
        std::memcpy(&d, p, 8);
        isDouble = true;
        break;
    }
    uint8_t* q = out.data() + k * elemSize(to);
    switch (to) {
      case ElemType::kF16: {
        const uint16_t x = isDouble ? c10::Half(static_cast<float>(d)).x : c10::Half(f).x;
        std::memcpy(q, &x, 2);
        break;
      }
      case ElemType::kBF16: {
        const uint16_t x = isDouble ? c10::BFloat16(static_cast<float>(d)).x : c10::BFloat16(f).x;
        std::memcpy(q, &x, 2);
        break;
      }
      case ElemType::kF32: {
        const float x = isDouble ? static_cast<float>(d) : f;
        std::memcpy(q, &x, 4);
        break;
      }
      default: {
        const double x = isDouble ? d : static_cast<double>(f);
        std::memcpy(q, &x, 8);
        break;
      }
    }
  }
  return out;
}

// A whole coalesced gather in host memory: every rank's copy-in plan (with casts) into its
// chunk of the gathered buffer (what the collective produces), then the copy-out plan; each
// full parameter must equal the c10 cast of the original, and each rank's packed chunk must be
// byte for byte what packCpu makes of the c10-cast shards.
void gatherRoundTrip(const std::vector<TestParam>& params, int64_t world, uint64_t seed,
                     int threads, int misalign) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> originals;
  std::vector<ParamSpec> specs;
  std::vector<ElemType> own, gathered;
  for (const TestParam& p : params) {
    originals.push_back(randomElems(rng, p.own, p.rows * p.rowElems));
    specs.push_back({p.rows, p.rowElems * elemSize(p.gathered)});
    own.push_back(p.own);
    gathered.push_back(p.gathered);
  }
  const PackLayout l(specs, world);
  std::vector<uint8_t> gatheredBuf(static_cast<size_t>(l.gatheredBytes()), 0xAB);
  for (int64_t r = 0; r < world; ++r) {
    // own type, zero padded, shifted off 16-byte alignment by `misalign` (rounded up to the
    // element: a tensor's data is always aligned to its dtype, and the kernel relies on it)
    std::vector<std::vector<uint8_t>> shards;
    std::vector<std::vector<uint8_t>> castShards;  // reference: c10-cast shards
    std::vector<const void*> ptrs, castPtrs;
    for (size_t i = 0; i < params.size(); ++i) {
      const TestParam& p = params[i];
      const int64_t rowBytes = p.rowElems * elemSize(p.own);
      const int64_t c = fsdp_opt::layout::shardRows(p.rows, world);
      const int64_t elem = elemSize(p.own);
      const int64_t shift = (misalign + elem - 1) / elem * elem;
      std::vector<uint8_t> shard(static_cast<size_t>(c * rowBytes + shift), 0);
      const int64_t rows = fsdp_opt::layout::validRowsOnRank(p.rows, world, r);
      const int64_t begin = fsdp_opt::layout::rowBegin(p.rows, world, r);
      if (rows > 0) {
        std::memcpy(shard.data() + shift, originals[i].data() + begin * rowBytes,
                    static_cast<size_t>(rows * rowBytes));
      }
      castShards.push_back(c10Cast(std::vector<uint8_t>(shard.begin() + shift, shard.end()),
                                   p.own, p.gathered));
      shards.push_back(std::move(shard));
      ptrs.push_back(shards.back().data() + shift);
      castPtrs.push_back(castShards.back().data());
    }
    uint8_t* chunk = gatheredBuf.data() + r * l.packedBytes();
    runOnHost(planCopyIn(l, ptrs, own, gathered, chunk), threads);
    std::vector<uint8_t> reference(static_cast<size_t>(l.packedBytes()), 0xCD);
    fsdp_opt::layout::packCpu(l, castPtrs, reference.data());
    ASSERT_EQ(0, std::memcmp(chunk, reference.data(), reference.size()))
        << "copy-in of rank " << r << " differs from packCpu of the cast shards";
  }
  std::vector<std::vector<uint8_t>> fulls;
  std::vector<void*> outs;
  for (size_t i = 0; i < params.size(); ++i) {
    fulls.emplace_back(static_cast<size_t>(l.fullBytes(i)), 0xCD);
    outs.push_back(fulls.back().data());
  }
  const CopyPlan out = planCopyOut(l, gatheredBuf.data(), outs);
  EXPECT_EQ(out.bytesWritten(), l.totalFullBytes());
  runOnHost(out, threads);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(fulls[i], c10Cast(originals[i], params[i].own, params[i].gathered))
        << "param " << i << " world " << world;
  }
}

}  // namespace

TEST(CopyPlan, GatherRoundTripWithCasts) {
  const std::vector<TestParam> params = mixedCastParams();
  for (int64_t w = 1; w <= 5; ++w) {
    for (int misalign : {0, 2, 8}) gatherRoundTrip(params, w, static_cast<uint64_t>(w), 32, misalign);
  }
  gatherRoundTrip(params, 3, 99, kThreadsPerBlock, 0);
}

TEST(CopyPlan, MisalignedCastsAreRefused) {
  alignas(16) uint8_t src[64] = {};
  alignas(16) uint8_t dst[64] = {};
  CopyPlan plan;
  EXPECT_THROW(plan.addCast(src + 2, ElemType::kF32, dst, ElemType::kBF16, 4), std::invalid_argument);
  EXPECT_THROW(plan.addCast(src, ElemType::kF16, dst + 1, ElemType::kF32, 4), std::invalid_argument);
  EXPECT_TRUE(plan.empty());
  plan.addCast(src + 4, ElemType::kF32, dst + 2, ElemType::kBF16, 4);  // each aligned to its type
  plan.addCopy(src + 3, dst + 5, 7);                                      // bytes: any address
  EXPECT_EQ(plan.segments().size(), 2u);
}

TEST(CopyPlan, GatherRoundTripLargeAndMany) {
  // Parameters spanning several blocks, and a unit with more segments than a launch passes
  // inline (the CUDA path then uploads the descriptors).
  std::vector<TestParam> params = {{3000, 17, ElemType::kF32, ElemType::kBF16},
                                   {1000, 33, ElemType::kBytes, ElemType::kBytes}};
  for (int i = 0; i < 80; ++i) {
    params.push_back({static_cast<int64_t>(i % 7), 3, ElemType::kF32, ElemType::kF16});
  }
  gatherRoundTrip(params, 4, 5, 64, 0);
}

TEST(CopyPlan, CopyInWritesEveryPackedByte) {
  const PackLayout l({{5, 6}, {3, 2}, {0, 4}, {7, 1}}, 3);  // gaps everywhere, tail padding
  std::vector<std::vector<uint8_t>> shards;
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < l.numParams(); ++i) {
    shards.emplace_back(static_cast<size_t>(l.shardBytes(i)), 0x11);
    ptrs.push_back(shards.back().data());
  }
  std::vector<uint8_t> packed(static_cast<size_t>(l.packedBytes()), 0xEE);
  const std::vector<ElemType> raw(l.numParams(), ElemType::kBytes);
  const CopyPlan plan = planCopyIn(l, ptrs, raw, raw, packed.data());
  EXPECT_EQ(plan.bytesWritten(), l.packedBytes());
  runOnHost(plan);
  for (size_t k = 0; k < packed.size(); ++k) ASSERT_NE(packed[k], 0xEE) << k;
  EXPECT_EQ(l.packedBytes() % PackLayout::kDefaultAlignment, 0);
}

// ---- parameter-major gathers: per-parameter all-gathers, no copy-out ----------------------

using fsdp_opt::layout::ParamMajorLayout;

TEST(ParamMajorPlan, SendsContiguousShardsAsTheyAre) {
  const ElemType f32 = ElemType::kF32, bf16 = ElemType::kBF16, raw = ElemType::kBytes;
  // rows, row bytes (in the gathered type): a plain shard, a cast one, an empty one, a
  // non-contiguous one without a cast, a raw (integer) one
  const ParamMajorLayout l({{10, 3 * 2}, {4, 8 * 4}, {0, 4}, {6, 5 * 4}, {7, 8}}, 3);
  std::vector<std::vector<uint8_t>> shards, bufs;
  std::vector<void*> recv;
  for (size_t i = 0; i < l.numParams(); ++i) {
    shards.emplace_back(static_cast<size_t>(l.shardBytes(i) * 2 + 8), 0x22);
    bufs.emplace_back(static_cast<size_t>(l.recvBytes(i)), 0xEE);
    recv.push_back(bufs.back().data());
  }
  std::vector<ShardSource> src = {{shards[0].data(), f32, bf16, true},
                                  {shards[1].data(), f32, f32, true},
                                  {shards[2].data(), f32, f32, true},
                                  {shards[3].data(), f32, f32, false},
                                  {shards[4].data(), raw, raw, true}};
  const ParamMajorPlan p = planParamMajor(l, 1, src, recv);
  ASSERT_EQ(p.from.size(), 5u);
  EXPECT_EQ(p.from[0], SendFrom::kCopyIn);
  EXPECT_EQ(p.send[0], bufs[0].data() + l.slotOffset(0, 1));  // in place: this rank's slot
  EXPECT_EQ(p.from[1], SendFrom::kShard);
  EXPECT_EQ(p.send[1], shards[1].data());
  EXPECT_EQ(p.from[2], SendFrom::kNothing);
  EXPECT_EQ(p.send[2], nullptr);
  EXPECT_EQ(p.from[3], SendFrom::kStrided);
  EXPECT_EQ(p.send[3], bufs[3].data() + l.slotOffset(3, 1));
  EXPECT_EQ(p.from[4], SendFrom::kShard);
  EXPECT_EQ(p.numCopiedIn(), 2u);
  // ONE launch: the cast of parameter 0 only, writing exactly its slot.
  ASSERT_EQ(p.copyIn.segments().size(), 1u);
  EXPECT_EQ(p.copyIn.bytesWritten(), l.shardBytes(0));
  EXPECT_EQ(p.copyIn.segments()[0].dst, bufs[0].data() + l.slotOffset(0, 1));

  // a cast of a non-contiguous shard, and mismatched argument counts, are errors
  src[3].gathered = bf16;
  EXPECT_THROW(planParamMajor(l, 1, src, recv), std::invalid_argument);
  src.pop_back();
  EXPECT_THROW(planParamMajor(l, 1, src, recv), std::invalid_argument);
  EXPECT_THROW(planParamMajor(l, 3, {}, {}), std::invalid_argument);
}

TEST(ParamMajorPlan, NothingToCopyWithoutCasts) {
  const ParamMajorLayout l({{5, 8}, {3, 4}}, 2);
  std::vector<uint8_t> a(24), b(8);
  std::vector<uint8_t> x(static_cast<size_t>(l.recvBytes(0))), y(static_cast<size_t>(l.recvBytes(1)));
  const ParamMajorPlan p =
      planParamMajor(l, 0,
                     {{a.data(), ElemType::kF64, ElemType::kF64, true},
                      {b.data(), ElemType::kBytes, ElemType::kBytes, true}},
                     {x.data(), y.data()});
  EXPECT_TRUE(p.copyIn.empty());
  EXPECT_EQ(p.numCopiedIn(), 0u);
}

namespace {

// A whole parameter-major gather in host memory with casts: every rank plans and runs its
// copy-in (with the kernel's per-block code) into its own buffers, the all-gather copies every
// rank's send bytes into every rank's slot, and each rank's first fullBytes must be the c10 cast
// of the original: the same bytes the packed path produces (GatherRoundTripWithCasts).
void paramMajorGather(const std::vector<TestParam>& params, int64_t world, uint64_t seed,
                      int threads) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> originals;
  std::vector<ParamSpec> specs;
  for (const TestParam& p : params) {
    originals.push_back(randomElems(rng, p.own, p.rows * p.rowElems));
    specs.push_back({p.rows, p.rowElems * elemSize(p.gathered)});
  }
  const ParamMajorLayout l(specs, world);
  // per rank: its shards (own type, zero padded) and its buffers
  std::vector<std::vector<std::vector<uint8_t>>> shards(static_cast<size_t>(world));
  std::vector<std::vector<std::vector<uint8_t>>> bufs(static_cast<size_t>(world));
  std::vector<ParamMajorPlan> plans;
  for (int64_t r = 0; r < world; ++r) {
    std::vector<ShardSource> src;
    std::vector<void*> recv;
    for (size_t i = 0; i < params.size(); ++i) {
      const TestParam& p = params[i];
      const int64_t rowBytes = p.rowElems * elemSize(p.own);
      std::vector<uint8_t> shard(static_cast<size_t>(l.shardRows(i) * rowBytes), 0);
      const int64_t rows = fsdp_opt::layout::validRowsOnRank(p.rows, world, r);
      if (rows > 0) {
        std::memcpy(shard.data(),
                    originals[i].data() + fsdp_opt::layout::rowBegin(p.rows, world, r) * rowBytes,
                    static_cast<size_t>(rows * rowBytes));
      }
      shards[static_cast<size_t>(r)].push_back(std::move(shard));
      bufs[static_cast<size_t>(r)].emplace_back(static_cast<size_t>(l.recvBytes(i)), 0xAB);
      src.push_back({shards[static_cast<size_t>(r)].back().data(), p.own, p.gathered, true});
      recv.push_back(bufs[static_cast<size_t>(r)].back().data());
    }
    plans.push_back(planParamMajor(l, r, src, recv));
    runOnHost(plans.back().copyIn, threads);
  }
  // the grouped all-gather: rank q's send bytes of parameter i into every rank's slot q
  for (int64_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < params.size(); ++i) {
      for (int64_t q = 0; q < world; ++q) {
        const ParamMajorPlan& pq = plans[static_cast<size_t>(q)];
        if (pq.from[i] == SendFrom::kNothing) continue;
        uint8_t* dst = bufs[static_cast<size_t>(r)][i].data() + l.slotOffset(i, q);
        if (r == q && pq.send[i] == dst) continue;  // in place
        std::memmove(dst, pq.send[i], static_cast<size_t>(l.shardBytes(i)));
      }
    }
  }
  for (int64_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& b = bufs[static_cast<size_t>(r)][i];
      const std::vector<uint8_t> view(b.begin(), b.begin() + l.fullBytes(i));
      EXPECT_EQ(view, c10Cast(originals[i], params[i].own, params[i].gathered))
          << "param " << i << " on rank " << r << " of " << world;
    }
  }
}

}  // namespace

TEST(ParamMajorPlan, GatherWithCastsEqualsC10Cast) {
  const std::vector<TestParam> params = mixedCastParams();
  for (int64_t w = 1; w <= 5; ++w) paramMajorGather(params, w, static_cast<uint64_t>(w), 32);
  std::vector<TestParam> many = {{3000, 17, ElemType::kF32, ElemType::kBF16},
                                 {1000, 33, ElemType::kBytes, ElemType::kBytes}};
  for (int i = 0; i < 80; ++i) {
    many.push_back({static_cast<int64_t>(i % 7), 3, ElemType::kF32, ElemType::kF16});
  }
  paramMajorGather(many, 4, 5, kThreadsPerBlock);
}
