// The unshard engine: in-place storage swap (docs/design.md, docs/runtime.md).
//
// fsdp::all_gather swaps the storage of the very parameter tensors a module holds to freshly
// gathered full storage (Tensor::set_ under NoGradGuard: parameters require grad); reshard swaps
// the saved shard storage back. The registry is keyed by TensorImpl, so every alias of a
// parameter (tied weights are one TensorImpl in a loaded module) and every nested gather of the
// same unit finds the same entry.
#include "gather.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "collective_backend.h"
#include "fsdp_opt/runtime.h"
#include "process_group.h"
#include "shard_layout.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

using ShardKey = std::pair<const c10::StorageImpl*, int64_t>;

ShardKey shardKeyOf(const at::Tensor& t) {
  return {t.storage().unsafeGetStorageImpl(), t.storage_offset()};
}

// One deduplicated parameter (all aliases of one shard), gathered together.
struct Group {
  std::vector<at::Tensor> params;  // distinct TensorImpls holding the parameter
  std::vector<at::Tensor> shards;  // shards[i]: detached alias of params[i]'s shard
  ShardKey key{nullptr, 0};
  int64_t fullRows = 0;
  int64_t fullBytes = 0;
  int64_t refcount = 0;
  bool swapped = false;  // false at world size 1: the shard is the full tensor
  std::string unit;
  uint64_t gatherId = 0;  // the unshard (collective) that created it; shared by a unit's groups
};

struct Registry {
  std::unordered_map<const c10::TensorImpl*, std::shared_ptr<Group>> byImpl;
  std::map<ShardKey, std::shared_ptr<Group>> byShard;
  Stats stats;
  uint64_t nextGatherId = 1;
};

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

// Leaked on purpose, like the process group: nothing to tear down at exit.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::string ctxOf(const char* op, const std::string& unit) {
  return std::string("fsdp::") + op + "(unit '" + unit + "')";
}

bool sameMetadata(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.device() == b.device() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

int64_t rowBytesOf(const at::Tensor& t) {
  int64_t n = static_cast<int64_t>(t.element_size());
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

// Points every parameter of `g` at `source`'s storage/offset/sizes/strides. All-or-nothing.
void swapTo(Group& g, const std::vector<at::Tensor>& sources) {
  at::NoGradGuard noGrad;
  size_t done = 0;
  try {
    for (; done < g.params.size(); ++done) g.params[done].set_(sources[done]);
  } catch (...) {
    for (size_t i = 0; i < done; ++i) g.params[i].set_(g.shards[i]);
    throw;
  }
}

void swapBackToShards(Group& g) {
  if (!g.swapped) return;
  at::NoGradGuard noGrad;
  for (size_t i = 0; i < g.params.size(); ++i) g.params[i].set_(g.shards[i]);
  g.swapped = false;
}

// Adds an alias TensorImpl to an already gathered group: it takes the group's full storage.
void attachAlias(Group& g, const at::Tensor& alias) {
  at::Tensor shard = alias.detach();
  if (g.swapped) {
    at::NoGradGuard noGrad;
    alias.set_(g.params.front());
  }
  g.params.push_back(alias);
  g.shards.push_back(std::move(shard));
}

// Swaps the groups' shards back and forgets them. `reshards` counts unit-level reshards: the
// distinct unshard events (collectives) whose storage this frees.
void releaseGroups(Registry& reg, const std::vector<std::shared_ptr<Group>>& groups) {
  std::unordered_set<uint64_t> events;
  for (const auto& g : groups) {
    swapBackToShards(*g);
    for (const at::Tensor& p : g->params) reg.byImpl.erase(p.unsafeGetTensorImpl());
    reg.byShard.erase(g->key);
    reg.stats.unsharded_bytes -= g->fullBytes;
    g->refcount = 0;
    events.insert(g->gatherId);
  }
  reg.stats.reshards += static_cast<int64_t>(events.size());
}

std::string describe(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace

std::vector<at::Tensor> allGather(const std::vector<at::Tensor>& params,
                                  const std::vector<int64_t>& fullRows, const std::string& unit) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  reg.stats.gather_calls += 1;
  const std::string ctx = ctxOf("all_gather", unit);
  TORCH_CHECK(params.size() == fullRows.size(), ctx, ": got ", params.size(),
              " parameters but ", fullRows.size(), " full row counts");

  const GroupInfo group = ensureGroup();
  const int64_t world = group.world;

  // Classify every entry: already gathered (bump), alias of a gathered shard (attach), or new.
  std::vector<std::shared_ptr<Group>> bumped;                // deduplicated
  std::vector<std::pair<std::shared_ptr<Group>, at::Tensor>> aliasesToAttach;
  std::vector<std::shared_ptr<Group>> fresh;                 // new groups, in first-seen order
  std::map<ShardKey, std::shared_ptr<Group>> freshByKey;
  std::unordered_set<const c10::TensorImpl*> seenImpls;
  std::unordered_set<const Group*> bumpedSet;
  auto bump = [&](const std::shared_ptr<Group>& g) {
    if (bumpedSet.insert(g.get()).second) bumped.push_back(g);
  };

  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined(), ctx, ": parameter ", i, " is undefined");
    TORCH_CHECK(p.dim() >= 1, ctx, ": parameter ", i,
                " is 0-dim; 0-dim parameters are replicated and must not be gathered");
    TORCH_CHECK(fullRows[i] >= 0, ctx, ": parameter ", i, " has a negative full row count ",
                fullRows[i]);
    const c10::TensorImpl* impl = p.unsafeGetTensorImpl();
    if (!seenImpls.insert(impl).second) continue;  // the same tensor listed twice (tied)

    auto known = reg.byImpl.find(impl);
    if (known != reg.byImpl.end()) {
      TORCH_CHECK(known->second->fullRows == fullRows[i], ctx, ": parameter ", i,
                  " is already gathered (by unit '", known->second->unit, "') with ",
                  known->second->fullRows, " rows, but this call says ", fullRows[i]);
      bump(known->second);
      continue;
    }
    const ShardKey key = shardKeyOf(p);
    auto gathered = reg.byShard.find(key);
    if (gathered != reg.byShard.end()) {
      const Group& g = *gathered->second;
      TORCH_CHECK(g.fullRows == fullRows[i] && sameMetadata(p, g.shards.front()), ctx,
                  ": parameter ", i, " aliases the storage of a gathered parameter of unit '",
                  g.unit, "' but has a different shape, dtype or row count");
      aliasesToAttach.emplace_back(gathered->second, p);
      bump(gathered->second);
      continue;
    }
    auto pending = freshByKey.find(key);
    if (pending != freshByKey.end()) {
      Group& g = *pending->second;
      TORCH_CHECK(g.fullRows == fullRows[i] && sameMetadata(p, g.params.front()), ctx,
                  ": parameter ", i,
                  " aliases the storage of an earlier parameter but has a different shape, "
                  "dtype or row count");
      g.params.push_back(p);
      continue;
    }
    const std::string bad = layout::checkShardRows(p.size(0), fullRows[i], world);
    TORCH_CHECK(bad.empty(), ctx, ": parameter ", i, " (shape ", p.sizes(), ") on rank ",
                group.rank, ": ", bad);
    auto g = std::make_shared<Group>();
    g->params.push_back(p);
    g->key = key;
    g->fullRows = fullRows[i];
    g->unit = unit;
    g->fullBytes = fullRows[i] * rowBytesOf(p);
    freshByKey.emplace(key, g);
    fresh.push_back(std::move(g));
  }

  if (!fresh.empty()) {
    const c10::Device device = fresh.front()->params.front().device();
    for (size_t gi = 1; gi < fresh.size(); ++gi) {
      TORCH_CHECK(fresh[gi]->params.front().device() == device, ctx,
                  ": parameters of one unit live on different devices (", device, " and ",
                  fresh[gi]->params.front().device(), ")");
    }
    std::vector<at::Tensor> fulls;  // one per fresh group (world > 1)
    if (world > 1) {
      std::shared_ptr<CollectiveBackend> backend = backendFor(device, ctx);
      std::vector<layout::ParamSpec> specs;
      std::vector<at::Tensor> shardsContig;
      specs.reserve(fresh.size());
      for (const auto& g : fresh) {
        const at::Tensor& p = g->params.front();
        specs.push_back(layout::ParamSpec{g->fullRows, rowBytesOf(p)});
        shardsContig.push_back(p.detach().contiguous());
      }
      const layout::PackLayout pack(std::move(specs), world);
      const auto byteOpts = at::TensorOptions().dtype(at::kByte).device(device);
      at::Tensor send = at::empty({pack.packedBytes()}, byteOpts);
      at::Tensor recv = at::empty({pack.gatheredBytes()}, byteOpts);
      TORCH_CHECK(device.is_cpu(), ctx, ": packing is implemented for CPU tensors only");
      std::vector<const void*> src;
      for (const at::Tensor& s : shardsContig) src.push_back(s.data_ptr());
      layout::packCpu(pack, src, send.data_ptr());
      if (pack.packedBytes() > 0) {
        try {
          backend->allGatherBytes(send, recv);
        } catch (const std::exception& e) {
          TORCH_CHECK(false, ctx, ": all-gather of ", fresh.size(), " parameters (",
                      pack.packedBytes(), " bytes per rank) on backend ", backend->name(),
                      " failed on rank ", group.rank, " of ", world,
                      "; a peer may have died or runs a different program: ", describe(e));
        }
      }
      std::vector<void*> dst;
      for (size_t gi = 0; gi < fresh.size(); ++gi) {
        const at::Tensor& p = fresh[gi]->params.front();
        std::vector<int64_t> sizes = p.sizes().vec();
        sizes[0] = fresh[gi]->fullRows;
        fulls.push_back(at::empty(sizes, at::TensorOptions().dtype(p.scalar_type()).device(device)));
        dst.push_back(fulls.back().data_ptr());
      }
      layout::unpackCpu(pack, recv.data_ptr(), dst);
    }

    // Commit: swap storages (all-or-nothing across groups), then register.
    size_t swappedGroups = 0;
    try {
      for (size_t gi = 0; gi < fresh.size(); ++gi) {
        Group& g = *fresh[gi];
        for (const at::Tensor& p : g.params) g.shards.push_back(p.detach());
        if (world > 1) {
          swapTo(g, std::vector<at::Tensor>(g.params.size(), fulls[gi]));
          g.swapped = true;
        }
        ++swappedGroups;
      }
    } catch (const std::exception& e) {
      for (size_t gi = 0; gi < swappedGroups; ++gi) swapBackToShards(*fresh[gi]);
      TORCH_CHECK(false, ctx, ": swapping in the gathered storage failed: ", describe(e));
    }
    int64_t bytes = 0;
    const uint64_t gatherId = reg.nextGatherId++;
    for (const auto& g : fresh) {
      g->refcount = 1;
      g->gatherId = gatherId;
      for (const at::Tensor& p : g->params) reg.byImpl[p.unsafeGetTensorImpl()] = g;
      reg.byShard[g->key] = g;
      bytes += g->fullBytes;
    }
    reg.stats.all_gathers += 1;
    reg.stats.bytes_gathered += bytes;
    reg.stats.unsharded_bytes += bytes;
    reg.stats.peak_unsharded_bytes =
        std::max(reg.stats.peak_unsharded_bytes, reg.stats.unsharded_bytes);
  }

  for (auto& entry : aliasesToAttach) {
    attachAlias(*entry.first, entry.second);
    reg.byImpl[entry.second.unsafeGetTensorImpl()] = entry.first;
  }
  for (const auto& g : bumped) g->refcount += 1;
  return params;
}

void reshard(const std::vector<at::Tensor>& params, const std::string& unit) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  reg.stats.reshard_calls += 1;
  const std::string ctx = ctxOf("reshard", unit);
  std::vector<std::shared_ptr<Group>> groups;
  std::unordered_set<const Group*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].defined(), ctx, ": parameter ", i, " is undefined");
    auto it = reg.byImpl.find(params[i].unsafeGetTensorImpl());
    TORCH_CHECK(it != reg.byImpl.end(), ctx, ": parameter ", i,
                " is not gathered (reshard without a matching all_gather, or release_all "
                "already resharded it)");
    if (seen.insert(it->second.get()).second) groups.push_back(it->second);
  }
  std::vector<std::shared_ptr<Group>> released;
  for (const auto& g : groups) {
    if (--g->refcount == 0) released.push_back(g);
  }
  releaseGroups(reg, released);
}

}  // namespace detail

void releaseAll() {
  std::lock_guard<std::mutex> lock(detail::registryMutex());
  detail::Registry& reg = detail::registry();
  reg.stats.release_all_calls += 1;
  std::vector<std::shared_ptr<detail::Group>> groups;
  std::unordered_set<const detail::Group*> seen;
  for (const auto& entry : reg.byImpl) {
    if (seen.insert(entry.second.get()).second) groups.push_back(entry.second);
  }
  detail::releaseGroups(reg, groups);
  reg.byImpl.clear();
  reg.byShard.clear();
}

Stats stats() {
  std::lock_guard<std::mutex> lock(detail::registryMutex());
  return detail::registry().stats;
}

void resetStats() {
  std::lock_guard<std::mutex> lock(detail::registryMutex());
  Stats& s = detail::registry().stats;
  const int64_t now = s.unsharded_bytes;
  s = Stats();
  s.unsharded_bytes = now;
  s.peak_unsharded_bytes = now;
}

std::vector<std::pair<std::string, int64_t>> Stats::items() const {
  return {{"all_gathers", all_gathers},
          {"gather_calls", gather_calls},
          {"bytes_gathered", bytes_gathered},
          {"unsharded_bytes", unsharded_bytes},
          {"peak_unsharded_bytes", peak_unsharded_bytes},
          {"reshards", reshards},
          {"reshard_calls", reshard_calls},
          {"release_all_calls", release_all_calls}};
}

}  // namespace runtime
}  // namespace fsdp_opt
