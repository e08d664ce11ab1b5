// The unshard engine: in-place storage swap (docs/design.md, docs/runtime.md).
//
// fsdp::all_gather swaps the storage of the very parameter tensors a module holds to freshly
// gathered full storage (Tensor::set_data, which autograd does not see as a change: parameters
// require grad); reshard swaps the saved shard storage back. The registry is keyed by TensorImpl, so every alias of a
// parameter (tied weights are one TensorImpl in a loaded module) and every nested gather of the
// same unit finds the same entry.
//
// One gather goes through three steps, shared by the synchronous op and the split
// all_gather_start / all_gather_wait form:
//   classify  every listed parameter: already gathered (its count will rise), an alias of a
//             gathered shard (attached), or fresh; all checks happen here, before anything moves;
//   issue     the fresh groups' unshard on their device's path (data_path.h): buffers allocated,
//             collective started; the parameters are marked in flight;
//   commit    wait for it, swap the fresh groups in and register them (count 0); then the
//             classification runs again and raises every group's count by one.
// all_gather does all three at once; all_gather_start does classify + issue; all_gather_wait
// does commit.
#include "unshard_state.h"

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
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include "data_path.h"
#include "errors.h"
#include "fsdp_opt/runtime/runtime.h"
#include "host_buffer_pool.h"
#include "process_group.h"
#include "shard_layout.h"
#include "stats.h"
#include "unsharded_scope_state.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

using ShardKey = std::pair<const c10::StorageImpl*, int64_t>;

struct ShardKeyHash {
  size_t operator()(const ShardKey& k) const noexcept {
    return std::hash<const void*>()(k.first) ^ (std::hash<int64_t>()(k.second) * 0x9e3779b97f4a7c15ULL);
  }
};

ShardKey shardKeyOf(const at::Tensor& t) {
  return {t.storage().unsafeGetStorageImpl(), t.storage_offset()};
}

// Where a parameter's shard lies while the parameter holds its full storage: what pointing it
// back takes, with no TensorImpl of its own (an alias from variable_data() costs three heap
// blocks per parameter and gather).
struct ShardPlace {
  c10::Storage storage;
  int64_t offset = 0;
  c10::DimVector sizes;
  c10::DimVector strides;
  caffe2::TypeMeta dtype;
  c10::Device device{c10::kCPU};

  static ShardPlace of(const at::Tensor& t) {
    return ShardPlace{t.storage(), t.storage_offset(), c10::DimVector(t.sizes()),
                      c10::DimVector(t.strides()), t.dtype(), t.device()};
  }
  at::ScalarType scalarType() const { return c10::typeMetaToScalarType(dtype); }
};

// One deduplicated parameter (all aliases of one shard) and its gathered state. Almost every
// group has one TensorImpl: inline storage spares two allocations per parameter and gather.
struct GatheredParam {
  c10::SmallVector<at::Tensor, 1> params;  // distinct TensorImpls holding the parameter
  c10::SmallVector<ShardPlace, 1> shards;  // shards[i]: where params[i]'s shard lies
  ShardKey key{nullptr, 0};
  int64_t fullRows = 0;
  int64_t fullBytes = 0;  // in the gathered dtype
  at::ScalarType dtype = at::kFloat;  // the gathered dtype (the shard's own unless cast)
  int64_t refcount = 0;
  bool swapped = false;  // false at world size 1 without a cast: the shard is the full tensor
  std::shared_ptr<const std::string> unit;  // one string for all the groups of a gather
  uint64_t gatherId = 0;  // the unshard (collective) that created it; shared by a unit's groups
  std::shared_ptr<NestedGatherHook> nestedHook;  // what a nested gather does first (data_path.h)
  // The parameter's full storage kept across gathers (below), emptied when the group goes.
  c10::intrusive_ptr<c10::StorageImpl> keptStorage;
  // versions[i]: params[i]'s version once swapped in, to see a write in place before the
  // reshard drops it (kNoVersion: an inference tensor, which keeps none).
  c10::SmallVector<uint32_t, 1> versions;
  // The full storage the parameters were swapped to: one that holds another at the reshard was
  // given new data (`p.data = t`, `set_`), which the reshard would drop. Compared, never followed.
  const c10::StorageImpl* fullStorage = nullptr;
};

constexpr uint32_t kNoVersion = UINT32_MAX;

uint32_t versionOf(const at::Tensor& t) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return impl->is_inference() ? kNoVersion : impl->version_counter().current_version();
}

// A parameter's full storage object, kept from one gather to the next once it was gathered with
// grad mode on. Autograd saves views of full parameters (Linear saves weight.t()), which hold
// the storage object they were made from; reshard empties that object (its bytes go back to the
// allocator or the pool) and the next gather of the parameter, the one backward does, refills
// the SAME object, so the saved views read the full values again: FSDP2's scheme of one
// unsharded tensor per parameter whose storage is freed and reallocated. Without it, a forward
// in grad mode would keep every unit's full parameters alive until backward.
struct KeptStorage {
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;  // the parameter, to tell a reused address
  c10::intrusive_ptr<c10::StorageImpl> storage;
};

// One issued unshard whose groups are not swapped in yet.
struct InFlight {
  uint64_t gatherId = 0;
  std::vector<std::shared_ptr<GatheredParam>> groups;
  std::unique_ptr<PendingUnshard> pending;
  int64_t bytes = 0;
};

// What all_gather_start returned a handle for.
struct Handle {
  std::vector<at::Tensor> params;
  std::vector<int64_t> fullRows;
  std::string unit;
  std::optional<at::ScalarType> paramDtype;
  std::unique_ptr<InFlight> inflight;  // null when every parameter was gathered already
};

// The gathered parameters' maps are open-addressing tables: every gather inserts and every reshard
// erases one entry per parameter, and a node-based map would allocate and free a node each time.
struct Registry {
  ska::flat_hash_map<const c10::TensorImpl*, std::shared_ptr<GatheredParam>> byImpl;
  ska::flat_hash_map<ShardKey, std::shared_ptr<GatheredParam>, ShardKeyHash> byShard;
  uint64_t nextGatherId = 1;
  std::map<int64_t, Handle> handles;
  int64_t nextHandle = 1;
  // Parameters of started, not yet waited unshards -> their handle.
  std::unordered_map<const c10::TensorImpl*, int64_t> inFlightByImpl;
  std::map<ShardKey, int64_t> inFlightByShard;
  std::unordered_map<const c10::TensorImpl*, KeptStorage> kept;  // by the group's first parameter
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

bool sameMetadata(const at::Tensor& a, const ShardPlace& b) {
  return a.dtype() == b.dtype && a.device() == b.device && a.sizes() == c10::IntArrayRef(b.sizes) &&
         a.strides() == c10::IntArrayRef(b.strides);
}

// param_dtype applies to floating-point parameters only (FSDP2's MixedPrecisionPolicy casts
// floating-point parameters); integer and bool parameters keep their dtype.
at::ScalarType gatheredDtype(at::ScalarType shardDtype, std::optional<at::ScalarType> paramDtype) {
  return paramDtype && at::isFloatingType(shardDtype) ? *paramDtype : shardDtype;
}

// The TensorImpl setters behind pointAt and pointBack: `impl` takes the storage, dtype and
// geometry given, and its version moves only when its dtype changes.
void setPlace(c10::TensorImpl* impl, const c10::Storage& storage, caffe2::TypeMeta dtype,
              c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  const bool sameDtype = impl->dtype() == dtype;
  if (sameDtype) {
    impl->set_storage_keep_dtype(storage);
  } else {
    impl->set_storage_and_dtype(storage, dtype);
  }
  impl->set_sizes_and_strides(sizes, strides);
  impl->set_storage_offset(offset);
  if (!sameDtype && !impl->is_inference()) impl->bump_version();
}

// Points `dst` (a parameter TensorImpl) at `src`'s storage, offset, sizes, strides and dtype,
// keeping `dst`'s version counter: autograd saves a parameter by its TensorImpl and checks that
// version when backward unpacks it, and a training step reshards a unit after its forward and
// gathers it again before its backward (training.cpp): the same values, so no version must
// change. set_data keeps the counter; a dtype change (mixed precision) goes through the
// TensorImpl directly, and bumps it, since a parameter cast for compute is no longer the
// tensor autograd saved.
void pointAt(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() == src.scalar_type()) {
    dst.set_data(src);
    return;
  }
  setPlace(dst.unsafeGetTensorImpl(), src.storage(), src.dtype(), src.sizes(), src.strides(),
           src.storage_offset());
}

// The shard as a tensor of its own (the parameter holds the full storage meanwhile).
at::Tensor tensorAt(const ShardPlace& shard) {
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(shard.dtype).device(shard.device));
  t.set_(shard.storage, shard.offset, shard.sizes, shard.strides);
  return t;
}

// Points `dst` back at its shard, as pointAt does with a tensor (the same fields, the version kept
// unless the dtype changes). A tensor whose metadata may not change through the setters (made
// by `.data` or `detach()`) goes through set_data, as pointAt's tensors do.
void pointBack(const at::Tensor& dst, const ShardPlace& shard) {
  c10::TensorImpl* impl = dst.unsafeGetTensorImpl();
  if (!impl->allow_tensor_metadata_change()) {
    pointAt(dst, tensorAt(shard));
    return;
  }
  setPlace(impl, shard.storage, shard.dtype, shard.sizes, shard.strides, shard.offset);
}

// Points every parameter of `g` at `full`. All-or-nothing.
void swapTo(GatheredParam& g, const at::Tensor& full) {
  at::NoGradGuard noGrad;
  size_t done = 0;
  try {
    for (; done < g.params.size(); ++done) pointAt(g.params[done], full);
  } catch (...) {
    for (size_t i = 0; i < done; ++i) pointBack(g.params[i], g.shards[i]);
    throw;
  }
  g.versions.clear();
  for (const at::Tensor& p : g.params) g.versions.push_back(versionOf(p));
  g.fullStorage = g.params.front().storage().unsafeGetStorageImpl();
}

// Whether this rank's rows of `g`'s full parameter still hold its shard's values, bit for bit
// (in the gathered dtype: a cast shard is compared as cast). A write through `.data` or
// `detach()` bumps no version; this is how one into the rows the rank keeps is seen. Rows other
// ranks keep are theirs to check, so every rank whose shard would lose a write refuses.
bool ownRowsMatchShard(const GatheredParam& g) {
  at::NoGradGuard noGrad;
  const RankInfo group = groupOf(CollectiveGroup::kShardGroup);
  const int64_t rows = layout::validRowsOnRank(g.fullRows, group.world, group.rank);
  if (rows == 0) return true;
  const at::Tensor full = g.params.front().detach();
  const at::Tensor mine = full.narrow(0, layout::rowBegin(g.fullRows, group.world, group.rank), rows);
  at::Tensor kept = tensorAt(g.shards.front()).narrow(0, 0, rows);
  if (kept.scalar_type() != mine.scalar_type()) kept = kept.to(mine.scalar_type());
  auto bytes = [](const at::Tensor& t) { return t.contiguous().view({-1}).view(at::kByte); };
  return at::equal(bytes(mine), bytes(kept));
}

// What changed `g`'s gathered parameter since it was swapped in, in words ("" when nothing): an
// in-place op bumps the version; `p.data = t` and `set_` leave it and swap the storage; with
// `compareRows`, a write through `.data` or `detach()`, which does neither, shows in the rows.
std::string changeWhileGathered(const GatheredParam& g, bool compareRows) {
  if (!g.swapped) return {};  // the shard itself: a write stays
  // Named only when something changed: every reshard comes through here.
  const auto changed = [&](const char* how) {
    const at::Tensor& first = g.params.front();
    return c10::str("a parameter (", first.sizes(), " ", first.scalar_type(), ") ", how);
  };
  for (const at::Tensor& p : g.params) {
    if (!p.has_storage() || p.storage().unsafeGetStorageImpl() != g.fullStorage) {
      return changed("was given other storage (`p.data = t` or `set_`)");
    }
  }
  for (size_t i = 0; i < g.params.size() && i < g.versions.size(); ++i) {
    if (g.versions[i] != kNoVersion && versionOf(g.params[i]) != g.versions[i]) return changed("was written in place");
  }
  if (compareRows && !ownRowsMatchShard(g)) {
    return changed("was written through `.data` or `detach()` (this rank's rows differ from its shard)");
  }
  return {};
}

void swapBackToShards(GatheredParam& g) {
  if (!g.swapped) return;
  at::NoGradGuard noGrad;
  for (size_t i = 0; i < g.params.size(); ++i) pointBack(g.params[i], g.shards[i]);
  g.swapped = false;
  if (g.keptStorage) {
    g.keptStorage->set_data_ptr_noswap(at::DataPtr(nullptr, g.keptStorage->device()));
    g.keptStorage->set_nbytes(0);
    g.keptStorage.reset();
  }
}

// What `g` is swapped to: `full` itself, or, when the parameter keeps its full storage (see
// KeptStorage), a tensor over that storage holding `full`'s bytes. The storage is kept from a
// gather in grad mode on, and only when `full` owns its storage alone (the Gloo path's
// per-parameter buffers; a slice of a bigger buffer cannot be handed over).
at::Tensor fullOverKeptStorage(Registry& reg, GatheredParam& g, const at::Tensor& full) {
  const at::Tensor& owner = g.params.front();
  c10::StorageImpl* fullStorage = full.storage().unsafeGetStorageImpl();
  const bool alone = full.storage_offset() == 0 && fullStorage->nbytes() == full.nbytes() &&
                     full.storage().use_count() == 1;
  auto it = reg.kept.find(owner.unsafeGetTensorImpl());
  if (it != reg.kept.end() && it->second.owner.lock().get() != owner.unsafeGetTensorImpl()) {
    reg.kept.erase(it);  // another tensor at a dead parameter's address
    it = reg.kept.end();
  }
  if (!alone) return full;
  if (it != reg.kept.end() && it->second.storage->nbytes() == 0) {
    c10::StorageImpl* kept = it->second.storage.get();
    kept->set_data_ptr_noswap(fullStorage->set_data_ptr(at::DataPtr(nullptr, full.device())));
    kept->set_nbytes(full.nbytes());
    fullStorage->set_nbytes(0);
    at::Tensor over = at::empty({0}, full.options());
    over.set_(c10::Storage(it->second.storage), 0, full.sizes(), full.strides());
    g.keptStorage = it->second.storage;
    return over;
  }
  if (at::GradMode::is_enabled()) {
    KeptStorage k{c10::weak_intrusive_ptr<c10::TensorImpl>(owner.getIntrusivePtr()),
                  c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(fullStorage)};
    g.keptStorage = k.storage;
    reg.kept.insert_or_assign(owner.unsafeGetTensorImpl(), std::move(k));
  }
  return full;
}

// Adds an alias TensorImpl to an already gathered group: it takes the group's full storage.
void attachAlias(GatheredParam& g, const at::Tensor& alias) {
  ShardPlace shard = ShardPlace::of(alias);
  if (g.swapped) {
    at::NoGradGuard noGrad;
    pointAt(alias, g.params.front());
  }
  g.params.push_back(alias);
  g.shards.push_back(std::move(shard));
  if (g.swapped) g.versions.push_back(versionOf(alias));
}

// Swaps the groups' shards back and forgets them. `reshards` counts unit-level reshards: the
// distinct unshard events (collectives) whose storage this frees. Returns, for each group whose
// parameter was changed while gathered, what it was and how it changed (changeWhileGathered; the
// caller's context names the units).
std::vector<std::string> releaseGroups(Registry& reg, const std::vector<std::shared_ptr<GatheredParam>>& groups,
                                       bool compareRows = false) {
  std::vector<uint64_t> events;  // distinct gather ids, sorted
  events.reserve(groups.size());
  std::vector<std::string> written;
  int64_t freed = 0;
  for (const auto& g : groups) {
    std::string change;
    try {
      change = changeWhileGathered(*g, compareRows);
    } catch (const std::exception& e) {
      // The shards go back whatever the comparison did; its failure is reported as the change.
      change = c10::str("a parameter could not be compared with its shard (", e.what(), ")");
    }
    if (!change.empty()) written.push_back(std::move(change));
    swapBackToShards(*g);
    for (const at::Tensor& p : g->params) reg.byImpl.erase(p.unsafeGetTensorImpl());
    reg.byShard.erase(g->key);
    freed += g->fullBytes;
    g->refcount = 0;
    events.push_back(g->gatherId);
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  // An unshard is undone when the last of its groups goes: backward lets a unit's parameters
  // go one by one (training.cpp), and that is still one reshard of one all-gather.
  for (const auto& entry : reg.byShard) {
    auto it = std::lower_bound(events.begin(), events.end(), entry.second->gatherId);
    if (it != events.end() && *it == entry.second->gatherId) events.erase(it);
  }
  updateStats([&](Stats& st) {
    st.unsharded_bytes -= freed;
    st.reshards += static_cast<int64_t>(events.size());
  });
  return written;
}


// ---- classify -------------------------------------------------------------------------------

// For items 0..n-1 with keys keyOf(i): the first index with each item's key. A sort instead of a
// hash set: one allocation for a unit's whole list, not one per parameter, on every gather.
template <typename KeyOf>
std::vector<size_t> firstWithSameKey(size_t n, KeyOf keyOf) {
  using Key = decltype(keyOf(size_t{0}));
  std::vector<std::pair<Key, size_t>> sorted;
  sorted.reserve(n);
  for (size_t i = 0; i < n; ++i) sorted.emplace_back(keyOf(i), i);
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> first(n);
  for (size_t k = 0; k < n; ++k) {
    first[sorted[k].second] = (k > 0 && sorted[k].first == sorted[k - 1].first) ? first[sorted[k - 1].second]
                                                                                 : sorted[k].second;
  }
  return first;
}

// Drops repeated groups, keeping each one's first place.
void keepFirstOfEach(std::vector<std::shared_ptr<GatheredParam>>& groups) {
  if (groups.size() < 2) return;
  const std::vector<size_t> first =
      firstWithSameKey(groups.size(), [&](size_t i) { return static_cast<const void*>(groups[i].get()); });
  size_t kept = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (first[i] == i) groups[kept++] = std::move(groups[i]);
  }
  groups.resize(kept);
}

struct Classified {
  std::vector<std::shared_ptr<GatheredParam>> known;  // gathered already (deduplicated)
  std::vector<std::pair<std::shared_ptr<GatheredParam>, at::Tensor>> aliases;  // to attach
  std::vector<std::shared_ptr<GatheredParam>> fresh;  // new groups, in first-seen order
};

Classified classify(const Registry& reg, const std::vector<at::Tensor>& params,
                    const std::vector<int64_t>& fullRows,
                    std::optional<at::ScalarType> paramDtype, const std::string& ctx,
                    const std::string& unit, const RankInfo& group) {
  FSDP_CHECK(params.size() == fullRows.size(), ErrorKind::kBadInput, ctx, ": got ", params.size(),
             " parameters but ", fullRows.size(), " full row counts");
  FSDP_CHECK(!paramDtype || at::isFloatingType(*paramDtype), ErrorKind::kBadInput, ctx,
             ": param_dtype must be a floating-point dtype, got ", *paramDtype);
  Classified out;
  // The same tensor listed twice (tied) counts once; fresh parameters sharing a shard's storage
  // are one group. A tensor without storage gets a key of its own (its check below raises).
  const std::vector<size_t> firstOfImpl = firstWithSameKey(
      params.size(), [&](size_t i) { return static_cast<const void*>(params[i].unsafeGetTensorImpl()); });
  std::vector<ShardKey> shardKeys(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    shardKeys[i] = p.defined() && p.has_storage() ? shardKeyOf(p)
                                                  : ShardKey{nullptr, -1 - static_cast<int64_t>(i)};
  }
  const std::vector<size_t> firstOfShard =
      firstWithSameKey(params.size(), [&](size_t i) { return shardKeys[i]; });
  std::vector<GatheredParam*> freshOfShard(params.size(), nullptr);  // by firstOfShard index
  std::shared_ptr<const std::string> unitName;  // the fresh groups' unit, made once
  auto checkDtype = [&](size_t i, const GatheredParam& g) {
    const at::ScalarType want = gatheredDtype(g.shards.front().scalarType(), paramDtype);
    FSDP_CHECK(g.dtype == want, ErrorKind::kBadInput, ctx, ": parameter ", i,
               " is already gathered (by unit '", *g.unit, "') as ", g.dtype,
               ", but this call asks for ", want,
               "; a nested gather of a unit must use the param_dtype of the gather that "
               "unsharded it");
  };
  auto checkNotInFlight = [&](size_t i, const at::Tensor& p) {
    int64_t handle = 0;
    auto byImpl = reg.inFlightByImpl.find(p.unsafeGetTensorImpl());
    if (byImpl != reg.inFlightByImpl.end()) {
      handle = byImpl->second;
    } else {
      auto byKey = reg.inFlightByShard.find(shardKeys[i]);
      if (byKey == reg.inFlightByShard.end()) return;
      handle = byKey->second;
    }
    raise(ErrorKind::kBadInput,
          c10::str(ctx, ": parameter ", i, " is being gathered by fsdp::all_gather_start ",
                   "(handle ", handle, ", unit '", reg.handles.at(handle).unit,
                   "'), not waited yet; call fsdp::all_gather_wait on that handle first"));
  };

  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    FSDP_CHECK(p.defined(), ErrorKind::kBadInput, ctx, ": parameter ", i, " is undefined");
    FSDP_CHECK(p.has_storage(), ErrorKind::kBadInput, ctx, ": parameter ", i, " (layout ",
               p.layout(), ") has no storage; only dense strided parameters can be gathered");
    FSDP_CHECK(p.dim() >= 1, ErrorKind::kBadInput, ctx, ": parameter ", i,
               " is 0-dim; 0-dim parameters are replicated and must not be gathered");
    FSDP_CHECK(fullRows[i] >= 0, ErrorKind::kBadInput, ctx, ": parameter ", i,
               " has a negative full row count ", fullRows[i]);
    const c10::TensorImpl* impl = p.unsafeGetTensorImpl();
    if (firstOfImpl[i] != i) continue;  // the same tensor listed twice (tied)

    auto known = reg.byImpl.find(impl);
    if (known != reg.byImpl.end()) {
      FSDP_CHECK(known->second->fullRows == fullRows[i], ErrorKind::kBadInput, ctx, ": parameter ",
                 i, " is already gathered (by unit '", *known->second->unit, "') with ",
                 known->second->fullRows, " rows, but this call says ", fullRows[i]);
      checkDtype(i, *known->second);
      out.known.push_back(known->second);  // repeats dropped at the end
      continue;
    }
    checkNotInFlight(i, p);
    const ShardKey& key = shardKeys[i];
    auto gathered = reg.byShard.find(key);
    if (gathered != reg.byShard.end()) {
      const GatheredParam& g = *gathered->second;
      FSDP_CHECK(g.fullRows == fullRows[i] && sameMetadata(p, g.shards.front()),
                 ErrorKind::kBadInput, ctx, ": parameter ", i,
                 " aliases the storage of a gathered parameter of unit '", *g.unit,
                 "' but has a different shape, dtype or row count");
      checkDtype(i, g);
      out.aliases.emplace_back(gathered->second, p);
      out.known.push_back(gathered->second);
      continue;
    }
    GatheredParam* pending = freshOfShard[firstOfShard[i]];
    if (pending != nullptr) {
      GatheredParam& g = *pending;
      FSDP_CHECK(g.fullRows == fullRows[i] && sameMetadata(p, g.params.front()),
                 ErrorKind::kBadInput, ctx, ": parameter ", i,
                 " aliases the storage of an earlier parameter but has a different shape, "
                 "dtype or row count");
      g.params.push_back(p);
      continue;
    }
    const std::string bad = layout::checkShardRows(p.size(0), fullRows[i], group.world);
    FSDP_CHECK(bad.empty(), ErrorKind::kBadInput, ctx, ": parameter ", i, " (shape ", p.sizes(),
               ") on rank ", group.rank, ": ", bad);
    auto g = std::make_shared<GatheredParam>();
    g->params.push_back(p);
    g->key = key;
    g->fullRows = fullRows[i];
    if (!unitName) unitName = std::make_shared<const std::string>(unit);
    g->unit = unitName;
    g->dtype = gatheredDtype(p.scalar_type(), paramDtype);
    g->fullBytes = fullRows[i] * rowBytesAs(p, g->dtype);
    freshOfShard[firstOfShard[i]] = g.get();
    out.fresh.push_back(std::move(g));
  }
  keepFirstOfEach(out.known);
  return out;
}

// ---- issue / commit / drop ------------------------------------------------------------------

std::unique_ptr<InFlight> issue(Registry& reg, std::vector<std::shared_ptr<GatheredParam>> fresh,
                                const std::string& ctx, const RankInfo& group, bool asyncStart) {
  const c10::Device device = fresh.front()->params.front().device();
  for (size_t gi = 1; gi < fresh.size(); ++gi) {
    FSDP_CHECK(fresh[gi]->params.front().device() == device, ErrorKind::kBadInput, ctx,
               ": parameters of one unit live on different devices (", device, " and ",
               fresh[gi]->params.front().device(), ")");
  }
  UnshardRequest req;
  req.device = device;
  req.rank = group.rank;
  req.world = group.world;
  req.unit = *fresh.front()->unit;
  req.asyncStart = asyncStart;
  req.shards.reserve(fresh.size());
  req.fullRows.reserve(fresh.size());
  req.dtypes.reserve(fresh.size());
  for (const auto& g : fresh) {
    g->shards.clear();
    for (const at::Tensor& p : g->params) g->shards.push_back(ShardPlace::of(p));
    // The CPU paths read the shards only while the unshard starts, when a fresh parameter still
    // is its shard, so they get the parameter itself. Other devices' paths may read theirs
    // later (copies ordered on a stream, past the swap), so they get an alias that keeps
    // pointing at the shard: variable_data (Python's `.data`), made directly, not detach(),
    // which goes through the dispatcher and autograd's view bookkeeping.
    const at::Tensor& p = g->params.front();
    req.shards.push_back(device.is_cpu() ? p : p.variable_data());
    req.fullRows.push_back(g->fullRows);
    req.dtypes.push_back(g->dtype);
  }
  auto f = std::make_unique<InFlight>();
  {
    at::NoGradGuard noGrad;  // the paths copy from parameters that may require grad
    f->pending = startUnshard(req, ctx);
  }
  f->groups = std::move(fresh);
  f->gatherId = reg.nextGatherId++;
  for (const auto& g : f->groups) f->bytes += g->fullBytes;
  updateStats([&](Stats& st) {
    st.all_gathers += 1;
    st.bytes_gathered += f->bytes;
    st.unsharded_bytes += f->bytes;
  });
  return f;
}

// Completes `f` and registers its groups with a count of 0 (the caller raises it).
void commit(Registry& reg, InFlight& f, const std::string& ctx) {
  try {
    f.pending->finish();
  } catch (const std::exception& e) {
    updateStats([&](Stats& st) { st.unsharded_bytes -= f.bytes; });
    raiseCollectiveFailure(gatherSpec(ctx, f.groups.size(), f.pending->bytesPerRank()), e,
                           f.pending->backendName());
  }
  const std::vector<at::Tensor>& fulls = f.pending->fulls();
  size_t swappedGroups = 0;
  try {
    for (size_t gi = 0; gi < f.groups.size(); ++gi) {
      GatheredParam& g = *f.groups[gi];
      if (fulls[gi].defined()) {
        swapTo(g, fullOverKeptStorage(reg, g, fulls[gi]));
        g.swapped = true;
      }
      ++swappedGroups;
    }
  } catch (const std::exception& e) {
    for (size_t gi = 0; gi < swappedGroups; ++gi) swapBackToShards(*f.groups[gi]);
    updateStats([&](Stats& st) { st.unsharded_bytes -= f.bytes; });
    raise(ErrorKind::kInternal,
          c10::str(ctx, ": swapping in the gathered storage failed: ", describeException(e)));
  }
  const std::shared_ptr<NestedGatherHook> hook = f.pending->nestedGatherHook();
  for (const auto& g : f.groups) {
    g->refcount = 0;
    g->gatherId = f.gatherId;
    g->nestedHook = hook;
    for (const at::Tensor& p : g->params) reg.byImpl[p.unsafeGetTensorImpl()] = g;
    reg.byShard[g->key] = g;
  }
  f.pending.reset();
}

// Gives up a started unshard (release_all): it was counted as an unshard, so it counts as a
// reshard too.
void drop(Registry& reg, InFlight& f) {
  f.pending->abandon();
  f.pending.reset();
  updateStats([&](Stats& st) {
    st.unsharded_bytes -= f.bytes;
    st.reshards += 1;
  });
}

void markInFlight(Registry& reg, const InFlight& f, int64_t handle) {
  for (const auto& g : f.groups) {
    for (const at::Tensor& p : g->params) reg.inFlightByImpl[p.unsafeGetTensorImpl()] = handle;
    reg.inFlightByShard[g->key] = handle;
  }
}

void unmarkInFlight(Registry& reg, const InFlight& f) {
  for (const auto& g : f.groups) {
    for (const at::Tensor& p : g->params) reg.inFlightByImpl.erase(p.unsafeGetTensorImpl());
    reg.inFlightByShard.erase(g->key);
  }
}

// What releaseAll does: drops started gathers and reshards every gathered parameter, except
// what open unshard scopes hold, which keeps exactly their gathers as its counts.
void releaseToScopeHoldsLocked(Registry& reg) {
  // Started gathers first: wait for them (their buffers may still be written) and drop them.
  for (auto& entry : reg.handles) {
    if (!entry.second.inflight) continue;
    unmarkInFlight(reg, *entry.second.inflight);
    drop(reg, *entry.second.inflight);
    updateStats([](Stats& st) { st.in_flight -= 1; });
  }
  reg.handles.clear();
  reg.inFlightByImpl.clear();
  reg.inFlightByShard.clear();
  // What open unshard scopes hold stays gathered, with their gathers as its only counts: the
  // state before the entry call that raised (unsharded_scope.cpp).
  const auto holds = scopeHolds();
  std::vector<std::shared_ptr<GatheredParam>> groups;
  std::unordered_set<const GatheredParam*> seen;
  for (const auto& entry : reg.byImpl) {
    if (!seen.insert(entry.second.get()).second) continue;
    int64_t held = 0;
    for (const at::Tensor& p : entry.second->params) {
      auto h = holds.find(p.unsafeGetTensorImpl());
      if (h != holds.end()) held = std::max(held, h->second);
    }
    if (held > 0) {
      entry.second->refcount = held;
    } else {
      groups.push_back(entry.second);
    }
  }
  releaseGroups(reg, groups);
  if (holds.empty()) {
    reg.byImpl.clear();
    reg.byShard.clear();
  }
  emptyHostBufferPool();
}

// Inside an unshard scope (unsharded_scope.cpp), the rank file's --max-unsharded-bytes still
// bounds what is unsharded at once: the units the scope holds plus what entry methods gather on
// top. A gather that would go over it raises on every rank alike (the same program, the same
// bytes) before its collective, and leaves what the scope holds as it was, since the entry call
// it is part of is abandoned.
void checkScopeBudgetLocked(Registry& reg, const Classified& c, const std::string& ctx) {
  if (c.fresh.empty()) return;
  const int64_t budget = scopeBudget();
  if (budget < 0) return;
  int64_t fresh = 0;
  for (const auto& g : c.fresh) fresh += g->fullBytes;
  const int64_t held = unshardedParamAndGradBytesNow();
  if (held + fresh <= budget) return;
  releaseToScopeHoldsLocked(reg);
  raise(ErrorKind::kBadInput,
        c10::str(ctx, ": inside an unshard scope, gathering ", fresh, " bytes on top of the ", held,
                 " bytes unsharded already would hold ", held + fresh,
                 " bytes at once, over the rank file's --max-unsharded-bytes=", budget,
                 "; open the scope over fewer units (or over all of them, which entry methods then never gather "
                 "on top), or rewrite the model with a larger --max-unsharded-bytes"));
}

// classify + issue + commit + count: the synchronous gather.
void gatherLocked(Registry& reg, const std::vector<at::Tensor>& params,
                  const std::vector<int64_t>& fullRows, const std::string& unit,
                  std::optional<at::ScalarType> paramDtype, const std::string& ctx) {
  const RankInfo group = groupOf(CollectiveGroup::kShardGroup);
  Classified c = classify(reg, params, fullRows, paramDtype, ctx, unit, group);
  checkScopeBudgetLocked(reg, c, ctx);
  // Before anything changes, so a failure here leaves every count as it was: the caller may be
  // on another stream than the gather that unsharded these groups.
  for (const auto& g : c.known) {
    if (g->nestedHook && g->swapped) g->nestedHook->orderCurrentStream(g->params.front());
  }
  std::vector<std::shared_ptr<GatheredParam>> counted = c.known;
  if (!c.fresh.empty()) {
    std::unique_ptr<InFlight> f = issue(reg, c.fresh, ctx, group, /*asyncStart=*/false);
    commit(reg, *f, ctx);
    counted.insert(counted.end(), f->groups.begin(), f->groups.end());
  }
  for (auto& entry : c.aliases) {
    attachAlias(*entry.first, entry.second);
    reg.byImpl[entry.second.unsafeGetTensorImpl()] = entry.first;
  }
  for (const auto& g : counted) g->refcount += 1;
}

}  // namespace

std::vector<at::Tensor> allGather(const std::vector<at::Tensor>& params,
                                  const std::vector<int64_t>& fullRows, const std::string& unit,
                                  std::optional<at::ScalarType> paramDtype) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  updateStats([](Stats& st) { st.gather_calls += 1; });
  gatherLocked(reg, params, fullRows, unit, paramDtype, ctxOf("all_gather", unit));
  return params;
}

int64_t allGatherStart(const std::vector<at::Tensor>& params,
                       const std::vector<int64_t>& fullRows, const std::string& unit,
                       std::optional<at::ScalarType> paramDtype) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  updateStats([](Stats& st) { st.gather_calls += 1; });
  const std::string ctx = ctxOf("all_gather_start", unit);
  const RankInfo group = groupOf(CollectiveGroup::kShardGroup);
  // Gathered parameters are only checked here; their counts rise at the wait, which classifies
  // again (a unit resharded in between is gathered again there).
  Classified c = classify(reg, params, fullRows, paramDtype, ctx, unit, group);
  checkScopeBudgetLocked(reg, c, ctx);
  Handle h;
  h.params = params;
  h.fullRows = fullRows;
  h.unit = unit;
  h.paramDtype = paramDtype;
  const int64_t id = reg.nextHandle++;
  if (!c.fresh.empty()) {
    h.inflight = issue(reg, std::move(c.fresh), ctx, group, /*asyncStart=*/true);
    markInFlight(reg, *h.inflight, id);
    updateStats([](Stats& st) { st.in_flight += 1; });
  }
  reg.handles.emplace(id, std::move(h));
  return id;
}

std::vector<at::Tensor> allGatherWait(int64_t handle) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  updateStats([](Stats& st) { st.wait_calls += 1; });
  auto it = reg.handles.find(handle);
  FSDP_CHECK(it != reg.handles.end(), ErrorKind::kBadInput,
             "fsdp::all_gather_wait: unknown handle ", handle,
             " (not returned by fsdp::all_gather_start, already waited, or dropped by "
             "fsdp::release_all)");
  Handle h = std::move(it->second);
  reg.handles.erase(it);
  const std::string ctx = ctxOf("all_gather_wait", h.unit);
  if (h.inflight) {
    unmarkInFlight(reg, *h.inflight);
    updateStats([](Stats& st) { st.in_flight -= 1; });
    commit(reg, *h.inflight, ctx);
  }
  try {
    gatherLocked(reg, h.params, h.fullRows, h.unit, h.paramDtype, ctx);
  } catch (...) {
    // Groups this wait registered and nothing counted yet: reshard them again.
    if (h.inflight) {
      std::vector<std::shared_ptr<GatheredParam>> orphans;
      for (const auto& g : h.inflight->groups) {
        if (g->refcount == 0 && reg.byShard.count(g->key) != 0) orphans.push_back(g);
      }
      releaseGroups(reg, orphans);
    }
    throw;
  }
  return h.params;
}

void reshard(const std::vector<at::Tensor>& params, const std::string& unit, bool compareRows) {
  std::lock_guard<std::mutex> lock(registryMutex());
  Registry& reg = registry();
  updateStats([](Stats& st) { st.reshard_calls += 1; });
  const std::string ctx = ctxOf("reshard", unit);
  std::vector<std::shared_ptr<GatheredParam>> groups;
  groups.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    FSDP_CHECK(params[i].defined(), ErrorKind::kBadInput, ctx, ": parameter ", i, " is undefined");
    auto it = reg.byImpl.find(params[i].unsafeGetTensorImpl());
    if (it == reg.byImpl.end()) {
      auto started = reg.inFlightByImpl.find(params[i].unsafeGetTensorImpl());
      FSDP_CHECK(started == reg.inFlightByImpl.end(), ErrorKind::kBadInput, ctx, ": parameter ", i,
                 " is not gathered: fsdp::all_gather_start (handle ", started->second,
                 ") started its gather but fsdp::all_gather_wait has not completed it");
      raise(ErrorKind::kBadInput,
            c10::str(ctx, ": parameter ", i,
                     " is not gathered (reshard without a matching all_gather, or release_all "
                     "already resharded it)"));
    }
    groups.push_back(it->second);
  }
  keepFirstOfEach(groups);
  std::vector<std::shared_ptr<GatheredParam>> released;
  for (const auto& g : groups) {
    if (--g->refcount == 0) released.push_back(g);
  }
  const std::vector<std::string> written = releaseGroups(reg, released, compareRows);
  // Resharded all the same, and only then refused: what is unsharded stays bounded.
  FSDP_CHECK(written.empty(), ErrorKind::kBadInput, ctx, ": ", written.front(), " while gathered",
             written.size() > 1 ? c10::str(" (and ", written.size() - 1, " more parameters)") : std::string(),
             ", and the reshard dropped the write with the gathered "
             "copy: fsdp-opt does not write gathered parameters back to their shards, so the model would "
             "go on from the unwritten ones, unlike the original. Change weights before sharding, or "
             "train them through an optimizer, which updates the shards (docs/runtime.md, \"Writes to "
             "gathered parameters\")");
}

}  // namespace detail

void releaseAll() {
  std::lock_guard<std::mutex> lock(detail::registryMutex());
  detail::Registry& reg = detail::registry();
  detail::updateStats([](Stats& st) { st.release_all_calls += 1; });
  detail::releaseToScopeHoldsLocked(reg);
}

int64_t detail::bytesToGather(const std::vector<at::Tensor>& params, const std::vector<int64_t>& fullRows,
                              std::optional<at::ScalarType> paramDtype) {
  std::lock_guard<std::mutex> lock(detail::registryMutex());
  const detail::Classified c = detail::classify(detail::registry(), params, fullRows, paramDtype,
                                                "unshard scope", "unshard scope", detail::groupOf(detail::CollectiveGroup::kShardGroup));
  int64_t bytes = 0;
  for (const auto& g : c.fresh) bytes += g->fullBytes;
  return bytes;
}

}  // namespace runtime
}  // namespace fsdp_opt
