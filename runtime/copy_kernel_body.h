// The body of the runtime's copy kernel: what ONE thread block does to one block-sized piece of
// a copy plan (copy_plan.h). Compiled twice from this one header: by nvcc into the CUDA kernel
// (runtime/cuda/copy_kernels.cu, one launch per copy-in or copy-out of a unit) and by the host
// compiler into copyplan::runOnHost, which the CPU unit tests run, so the code the GPU executes
// (segment lookup, block split, vector widths, dtype conversions) is tested on machines without
// a GPU. Torch-free and CUDA-runtime-free.
//
// Conversions follow c10::Half / c10::BFloat16 (what torch's CPU and CUDA casts compute) bit for
// bit on every non-NaN input: round to nearest even, subnormals kept (no flush to zero),
// overflow to infinity; double converts to half and bfloat16 through float, as c10 does.
// NaN becomes c10's canonical NaN (half: sign | 0x7E00; bfloat16: 0x7FC0); torch's own casts
// keep NaN payload bits in some paths (vectorised CPU, CUDA), so NaN-ness, not the payload, is
// what a cast preserves.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FSDP_HD __host__ __device__
#else
#define FSDP_HD
#endif

namespace fsdp_opt {
namespace copyplan {

/// Element types the copy kernel converts between. kBytes: an uninterpreted copy.
enum class ElemType : uint8_t { kBytes = 0, kF16 = 1, kBF16 = 2, kF32 = 3, kF64 = 4 };

FSDP_HD inline int elemSize(ElemType t) {
  switch (t) {
    case ElemType::kF16:
    case ElemType::kBF16:
      return 2;
    case ElemType::kF32:
      return 4;
    case ElemType::kF64:
      return 8;
    default:
      return 1;
  }
}

/// One contiguous piece of work. Plain data: copied to the device as is.
struct Segment {
  const void* src = nullptr;  // nullptr: zero-fill `count` bytes at dst
  void* dst = nullptr;
  int64_t count = 0;          // bytes (copy, zero fill) or elements (cast)
  int64_t firstBlock = 0;     // index of the first thread block working on this segment
  ElemType srcType = ElemType::kBytes;
  ElemType dstType = ElemType::kBytes;
};

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kBlockBytes = 16384;  // per block, byte copies and zero fills (64 B a thread)
constexpr int64_t kBlockElems = 4096;   // per block, casts (16 elements a thread)

FSDP_HD inline bool isCast(const Segment& s) {
  return s.src != nullptr && s.srcType != s.dstType;
}

FSDP_HD inline int64_t blockUnits(const Segment& s) {
  return isCast(s) ? kBlockElems : kBlockBytes;
}

/// The segment thread block `block` works on: the last one whose firstBlock <= block.
FSDP_HD inline int findSegment(const Segment* segs, int n, int64_t block) {
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segs[mid].firstBlock <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// ---- bit casts and conversions ------------------------------------------------------------

FSDP_HD inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

FSDP_HD inline float floatFromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/// IEEE half from float, round to nearest even (c10::Half's rounding; canonical NaN).
FSDP_HD inline uint16_t halfFromFloat(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: infinity
  if (ax >= 0x38800000u) {  // a normal half (>= 2^-14)
    const uint32_t mant = ax & 0x7FFFFFu;
    uint32_t h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1;  // a carry may reach the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
  // A subnormal half: units of 2^-24.
  const uint32_t e = ax >> 23;  // 102..112
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (h & 1u))) h += 1;
  return static_cast<uint16_t>(sign | h);
}

FSDP_HD inline float floatFromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return floatFromBits(sign | 0x7F800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return floatFromBits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return floatFromBits(sign);
  // subnormal: normalise
  uint32_t e = 113u;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return floatFromBits(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

/// bfloat16 from float: c10::BFloat16's round_to_nearest_even, bit for bit.
FSDP_HD inline uint16_t bf16FromFloat(float f) {
  if (f != f) return 0x7FC0u;
  const uint32_t u = floatBits(f);
  const uint32_t bias = ((u >> 16) & 1u) + 0x7FFFu;
  return static_cast<uint16_t>((u + bias) >> 16);
}

FSDP_HD inline float floatFromBf16(uint16_t b) {
  return floatFromBits(static_cast<uint32_t>(b) << 16);
}

FSDP_HD inline float loadAsFloat(const void* p, ElemType t, int64_t k) {
  switch (t) {
    case ElemType::kF16:
      return floatFromHalf(static_cast<const uint16_t*>(p)[k]);
    case ElemType::kBF16:
      return floatFromBf16(static_cast<const uint16_t*>(p)[k]);
    case ElemType::kF64:
      return static_cast<float>(static_cast<const double*>(p)[k]);
    default:
      return static_cast<const float*>(p)[k];
  }
}

FSDP_HD inline void storeFloat(void* p, ElemType t, int64_t k, float v) {
  switch (t) {
    case ElemType::kF16:
      static_cast<uint16_t*>(p)[k] = halfFromFloat(v);
      break;
    case ElemType::kBF16:
      static_cast<uint16_t*>(p)[k] = bf16FromFloat(v);
      break;
    case ElemType::kF64:
      static_cast<double*>(p)[k] = static_cast<double>(v);
      break;
    default:
      static_cast<float*>(p)[k] = v;
      break;
  }
}

/// dst[k] = convert(src[k]) for k in [begin, begin + n), strided over the block's threads.
FSDP_HD inline void castRange(const Segment& s, int64_t begin, int64_t n, int tid, int nthreads) {
  // Every pair goes through float exactly as c10 does: half, bfloat16 and float widen to float
  // exactly; double narrows to float first (c10::Half / c10::BFloat16 take a float), and
  // float -> double is exact.
  for (int64_t i = tid; i < n; i += nthreads) {
    storeFloat(s.dst, s.dstType, begin + i, loadAsFloat(s.src, s.srcType, begin + i));
  }
}

// ---- byte copies -------------------------------------------------------------------------

struct alignas(16) Bytes16 {
  uint32_t a, b, c, d;
};
struct alignas(8) Bytes8 {
  uint32_t a, b;
};

template <typename V>
FSDP_HD inline void copyVectors(const char* src, char* dst, int64_t n, int tid, int nthreads) {
  const int64_t nv = n / static_cast<int64_t>(sizeof(V));
  const V* s = reinterpret_cast<const V*>(src);
  V* d = reinterpret_cast<V*>(dst);
  for (int64_t i = tid; i < nv; i += nthreads) d[i] = s[i];
  for (int64_t i = nv * static_cast<int64_t>(sizeof(V)) + tid; i < n; i += nthreads) dst[i] = src[i];
}

template <typename V>
FSDP_HD inline void zeroVectors(char* dst, int64_t n, int tid, int nthreads) {
  const int64_t nv = n / static_cast<int64_t>(sizeof(V));
  V* d = reinterpret_cast<V*>(dst);
  V z{};
  for (int64_t i = tid; i < nv; i += nthreads) d[i] = z;
  for (int64_t i = nv * static_cast<int64_t>(sizeof(V)) + tid; i < n; i += nthreads) dst[i] = 0;
}

/// The widest access (16, 8, 4 or 1 bytes) both addresses allow.
FSDP_HD inline int vectorWidth(uintptr_t addresses) {
  if (addresses % 16 == 0) return 16;
  if (addresses % 8 == 0) return 8;
  if (addresses % 4 == 0) return 4;
  return 1;
}

FSDP_HD inline void copyBytes(const char* src, char* dst, int64_t n, int tid, int nthreads) {
  switch (vectorWidth(reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst))) {
    case 16:
      copyVectors<Bytes16>(src, dst, n, tid, nthreads);
      break;
    case 8:
      copyVectors<Bytes8>(src, dst, n, tid, nthreads);
      break;
    case 4:
      copyVectors<uint32_t>(src, dst, n, tid, nthreads);
      break;
    default:
      copyVectors<char>(src, dst, n, tid, nthreads);
      break;
  }
}

FSDP_HD inline void zeroBytes(char* dst, int64_t n, int tid, int nthreads) {
  switch (vectorWidth(reinterpret_cast<uintptr_t>(dst))) {
    case 16:
      zeroVectors<Bytes16>(dst, n, tid, nthreads);
      break;
    case 8:
      zeroVectors<Bytes8>(dst, n, tid, nthreads);
      break;
    case 4:
      zeroVectors<uint32_t>(dst, n, tid, nthreads);
      break;
    default:
      zeroVectors<char>(dst, n, tid, nthreads);
      break;
  }
}

/// Everything thread `tid` of `nthreads` does for thread block `block` of a plan.
FSDP_HD inline void runBlock(const Segment* segs, int nsegs, int64_t block, int tid, int nthreads) {
  const Segment& s = segs[findSegment(segs, nsegs, block)];
  const int64_t per = blockUnits(s);
  const int64_t begin = (block - s.firstBlock) * per;
  const int64_t left = s.count - begin;
  const int64_t n = left < per ? left : per;
  if (n <= 0) return;
  if (s.src == nullptr) {
    zeroBytes(static_cast<char*>(s.dst) + begin, n, tid, nthreads);
  } else if (!isCast(s)) {
    copyBytes(static_cast<const char*>(s.src) + begin, static_cast<char*>(s.dst) + begin, n, tid,
              nthreads);
  } else {
    castRange(s, begin, n, tid, nthreads);
  }
}

}  // namespace copyplan
}  // namespace fsdp_opt
