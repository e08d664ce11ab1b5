// Reusable host buffers for the unshard path. See host_buffer_pool.h for why and for the bound.
#include "host_buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "environment.h"
#include "errors.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// The alignment at::empty gives CPU tensors (c10's gAlignment), so vectorised kernels see the
// same pointers they would without the pool.
constexpr size_t kAlignment = 64;

bool cachingEnabled() {
  static const bool value = [] {
    const char* v = envValue("FSDP_OPT_HOST_BUFFER_CACHE");
    if (v == nullptr) return true;
    const std::string s(v);
    FSDP_CHECK(s == "0" || s == "1", ErrorKind::kBadInput,
               "FSDP_OPT_HOST_BUFFER_CACHE must be 0 or 1, not '", s, "'");
    return s == "1";
  }();
  return value;
}

// A buffer's byte count sits in a header just before its data, so that the tensor over it needs
// no context object of its own (a deleter capturing the size is one more heap block per
// parameter and gather); the header keeps the data at kAlignment.
constexpr size_t kHeaderBytes = kAlignment;

class HostBufferPool {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      RequestTimes& times = requests_[bytes];
      times.previous = times.last;
      times.last = ++clock_;
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cachedBytes -= static_cast<int64_t>(bytes);
        stats_.hits += 1;
        addLive(bytes);
        return p;
      }
      stats_.misses += 1;
      addLive(bytes);
    }
    void* base = std::aligned_alloc(kAlignment, kHeaderBytes + roundUp(bytes));
    if (base == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.liveBytes -= static_cast<int64_t>(bytes);
      throw std::bad_alloc();
    }
    *static_cast<size_t*>(base) = bytes;
    return static_cast<char*>(base) + kHeaderBytes;
  }

  static size_t bytesOf(void* p) { return *reinterpret_cast<size_t*>(static_cast<char*>(p) - kHeaderBytes); }

  // Over the bound, a freed buffer evicts cached ones whose size nobody asked for since the
  // request before the freed buffer's own: the sizes of a schedule's first calls (which gather
  // differently from its steady state) would otherwise fill the bound for good, and every
  // gather after them allocate, fault in and free its buffers. Sizes that keep coming back, if
  // in turns (a budget's layers and its root), are never evicted for each other: they would
  // only push each other out on every turn.
  void give(void* p) noexcept {
    const size_t bytes = bytesOf(p);
    std::vector<void*> evicted;
    bool cached = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.liveBytes -= static_cast<int64_t>(bytes);
      if (cachingEnabled()) {
        const int64_t need = stats_.cachedBytes + static_cast<int64_t>(bytes) - stats_.peakLiveBytes;
        if (need > 0) evicted = evictStale(bytes, need);
        if (stats_.cachedBytes + static_cast<int64_t>(bytes) <= stats_.peakLiveBytes) {
          free_[bytes].push_back(p);
          stats_.cachedBytes += static_cast<int64_t>(bytes);
          cached = true;
        }
      }
    }
    for (void* old : evicted) release(old);
    if (!cached) release(p);
  }

  void empty() {
    std::map<size_t, std::vector<void*>> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(free_);
      requests_.clear();
      stats_.cachedBytes = 0;
      stats_.peakLiveBytes = stats_.liveBytes;
    }
    for (auto& entry : dropped) {
      for (void* p : entry.second) release(p);
    }
  }

  HostBufferPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  static size_t roundUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  static void release(void* p) { std::free(static_cast<char*>(p) - kHeaderBytes); }

  void addLive(size_t bytes) {
    stats_.liveBytes += static_cast<int64_t>(bytes);
    if (stats_.liveBytes > stats_.peakLiveBytes) stats_.peakLiveBytes = stats_.liveBytes;
  }

  // The last two requests of a size, in request order (0: none).
  struct RequestTimes {
    uint64_t last = 0;
    uint64_t previous = 0;
  };

  // Frees (to the caller) cached buffers of sizes last requested before `bytes`' previous
  // request, the longest unrequested first, until `need` bytes are gone or none is left.
  std::vector<void*> evictStale(size_t bytes, int64_t need) {
    std::vector<void*> evicted;
    const uint64_t since = requests_[bytes].previous;
    std::vector<std::pair<uint64_t, size_t>> stale;  // (last request, size)
    for (const auto& entry : free_) {
      if (entry.second.empty()) continue;
      const uint64_t last = requests_[entry.first].last;
      if (last < since) stale.emplace_back(last, entry.first);
    }
    std::sort(stale.begin(), stale.end());
    for (const auto& entry : stale) {
      std::vector<void*>& cached = free_[entry.second];
      while (!cached.empty() && need > 0) {
        evicted.push_back(cached.back());
        cached.pop_back();
        need -= static_cast<int64_t>(entry.second);
        stats_.cachedBytes -= static_cast<int64_t>(entry.second);
        stats_.evictions += 1;
      }
      if (need <= 0) break;
    }
    return evicted;
  }

  std::mutex mutex_;
  // By exact byte size: units repeat their sizes. A size's list stays when it empties, so that
  // taking and giving back allocate nothing once a schedule's sizes have been seen.
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<size_t, RequestTimes> requests_;
  uint64_t clock_ = 0;
  HostBufferPoolStats stats_;
};

// Never destroyed: tensors holding pool buffers may die during static destruction (a module
// kept alive by the interpreter), after a function-local static pool would be gone.
HostBufferPool& pool() {
  static HostBufferPool* instance = new HostBufferPool();
  return *instance;
}

void giveBack(void* data) { pool().give(data); }

}  // namespace

at::Tensor pooledEmptyCpu(c10::IntArrayRef sizes, at::ScalarType dtype) {
  return pooledEmptyCpu(sizes, c10::IntArrayRef(), dtype);
}

at::Tensor pooledEmptyCpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  if (bytes == 0) return strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
  void* data = pool().take(bytes);
  auto blob = at::for_blob(data, sizes);
  if (!strides.empty()) blob.strides(strides);
  return blob.context(data, &giveBack).options(options).make_tensor();
}

HostBufferPoolStats hostBufferPoolStats() { return pool().stats(); }

void emptyHostBufferPool() { pool().empty(); }

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
