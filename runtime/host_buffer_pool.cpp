// Reusable host buffers for the unshard path. See host_buffer_pool.h for why and for the bound.
#include "host_buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>

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

class HostBufferPool {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        stats_.cachedBytes -= static_cast<int64_t>(bytes);
        stats_.hits += 1;
        addLive(bytes);
        return p;
      }
      stats_.misses += 1;
      addLive(bytes);
    }
    void* p = std::aligned_alloc(kAlignment, roundUp(bytes));
    if (p == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.liveBytes -= static_cast<int64_t>(bytes);
      throw std::bad_alloc();
    }
    return p;
  }

  void give(void* p, size_t bytes) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.liveBytes -= static_cast<int64_t>(bytes);
      if (cachingEnabled() &&
          stats_.cachedBytes + static_cast<int64_t>(bytes) <= stats_.peakLiveBytes) {
        free_.emplace(bytes, p);
        stats_.cachedBytes += static_cast<int64_t>(bytes);
        return;
      }
    }
    std::free(p);
  }

  void empty() {
    std::multimap<size_t, void*> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(free_);
      stats_.cachedBytes = 0;
      stats_.peakLiveBytes = stats_.liveBytes;
    }
    for (auto& entry : dropped) std::free(entry.second);
  }

  HostBufferPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  static size_t roundUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  void addLive(size_t bytes) {
    stats_.liveBytes += static_cast<int64_t>(bytes);
    if (stats_.liveBytes > stats_.peakLiveBytes) stats_.peakLiveBytes = stats_.liveBytes;
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // by exact byte size: units repeat their sizes
  HostBufferPoolStats stats_;
};

// Never destroyed: tensors holding pool buffers may die during static destruction (a module
// kept alive by the interpreter), after a function-local static pool would be gone.
HostBufferPool& pool() {
  static HostBufferPool* instance = new HostBufferPool();
  return *instance;
}

}  // namespace

at::Tensor pooledEmptyCpu(const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  if (bytes == 0) return at::empty(sizes, options);
  void* data = pool().take(bytes);
  return at::from_blob(
      data, sizes, [bytes](void* p) { pool().give(p, bytes); }, options);
}

HostBufferPoolStats hostBufferPoolStats() { return pool().stats(); }

void emptyHostBufferPool() { pool().empty(); }

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
