// Unshard scopes: a rewritten module's units gathered from outside TorchScript, for a loop of
// entry calls that should not gather per call (FSDP2's FSDPModule.unshard() / reshard(), FSDP1's
// summon_full_params). docs/runtime.md, "Unshard scopes".
//
// Opening a scope on a module rewritten by fsdp-opt:
//   1. reads what the rewrite recorded on the root (passes/ir/scope_metadata.h): the units,
//      each one's parameter paths and full rows, --max-unsharded-bytes, --bucket-bytes and
//      --param-dtype;
//   2. runs what an entry method runs first, fsdp::check_rank: the process group is initialised
//      and the file checked against it (a wrong rank's file, or files of two runs, fail here
//      before any collective);
//   3. refuses, before anything is gathered, a scope whose units' full bytes, with what is
//      unsharded already, exceed the rank file's --max-unsharded-bytes;
//   4. packs the units into buckets of at most --bucket-bytes (first fit, largest first; a unit
//      larger than a bucket alone) and gathers each bucket with ONE fsdp::all_gather, named
//      "<units> (unshard scope)" so that its fingerprint differs from every gather of an entry
//      method: a rank that opens a scope while another calls an entry method fails with the
//      divergence error at once, even where the two would move the same bytes.
// Inside, an entry method's gathers of those units find them gathered: they only raise
// reference counts (unshard_state.cpp), and issue no collective. Closing reshards the buckets
// in reverse order. While a scope is open, a gather an entry method makes on top of it that would
// exceed the file's --max-unsharded-bytes raises before its collective (unshard_state.cpp).
// fsdp::release_all (a raise inside an entry method, reshard-on-raise) keeps
// what open scopes hold (scopeHolds()). A backward while a scope is open raises (training.cpp,
// checkNoScopeForBackward): inside the scope the parameters are full-shaped while the optimizer
// and .grad are the shard's.
#include "unsharded_scope_state.h"

#include <torch/csrc/jit/api/module.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "data_path.h"
#include "errors.h"
#include "fsdp_opt/format.h"
#include "fsdp_opt/runtime/runtime.h"
#include "fsdp_opt/runtime/unsharded_scope.h"
#include "process_group.h"
#include "training.h"
#include "stats.h"
#include "unshard_state.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

constexpr const char* kWhat = "unshard scope";

struct Bucket {
  std::vector<at::Tensor> params;
  std::vector<int64_t> rows;
  std::string name;  // the collective's unit name (its fingerprint)
};

struct Scope {
  std::vector<Bucket> buckets;  // gathered, in order
  int64_t budget = -1;          // the file's --max-unsharded-bytes, -1 for none
};

struct Scopes {
  std::mutex mutex;  // never held while calling into unshard_state (its lock is taken first)
  std::map<int64_t, Scope> open;
  int64_t next = 1;
};

Scopes& scopes() {
  static Scopes* s = new Scopes();  // leaked like the registry
  return *s;
}

// One unit as the rewrite recorded it, its tensors resolved on the root.
struct UnitParams {
  std::string path;
  std::vector<at::Tensor> params;
  std::vector<int64_t> rows;
  int64_t bytes = 0;  // full bytes in the gathered dtype, each tensor once
};

std::string quotedList(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

c10::IValue rootAttribute(const torch::jit::Module& root, const char* name) {
  FSDP_CHECK(root.hasattr(name), ErrorKind::kBadInput, kWhat, ": the module has no attribute ", name,
             ": it is not rewritten by fsdp-opt (a rank file of `fsdp-opt -o DIR`, or what "
             "fsdp_opt.transform returns), or was written by an fsdp-opt without unshard scopes (",
             "rewrite it again)");
  return root.attr(name);
}

at::Tensor tensorAt(const torch::jit::Module& root, const std::string& path) {
  torch::jit::Module module = root;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    FSDP_CHECK(module.hasattr(name), ErrorKind::kBadInput, kWhat, ": the module has no attribute '", path,
               "' that its recorded unit metadata names");
    c10::IValue value = module.attr(name);
    if (dot == std::string::npos) {
      FSDP_CHECK(value.isTensor() && value.toTensor().defined(), ErrorKind::kBadInput, kWhat, ": '", path,
                 "' is not a tensor");
      return value.toTensor();
    }
    FSDP_CHECK(value.isModule(), ErrorKind::kBadInput, kWhat, ": '", path.substr(0, dot),
               "' is not a module");
    module = value.toModule();
    start = dot + 1;
  }
}

std::vector<UnitParams> recordedUnits(const torch::jit::Module& root, std::optional<at::ScalarType> paramDtype) {
  const auto units = rootAttribute(root, kScopeUnitsAttr).toListRef();
  const auto params = rootAttribute(root, kScopeParamsAttr).toListRef();
  const auto rows = rootAttribute(root, kScopeRowsAttr).toListRef();
  FSDP_CHECK(units.size() == params.size() && units.size() == rows.size(), ErrorKind::kBadInput, kWhat,
             ": the module's unit metadata is inconsistent");
  std::vector<UnitParams> out;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitParams unit;
    unit.path = units[u].toStringRef();
    const auto paths = params[u].toListRef();
    const auto unitRows = rows[u].toListRef();
    FSDP_CHECK(paths.size() == unitRows.size(), ErrorKind::kBadInput, kWhat,
               ": the module's unit metadata is inconsistent (unit '", unit.path, "')");
    std::unordered_set<const c10::TensorImpl*> seen;
    std::set<std::pair<const void*, int64_t>> seenStorage;
    for (size_t i = 0; i < paths.size(); ++i) {
      at::Tensor t = tensorAt(root, paths[i].toStringRef());
      const int64_t full = unitRows[i].toInt();
      unit.params.push_back(t);
      unit.rows.push_back(full);
      // Tied slots: one TensorImpl (a loaded module), or one storage (aliases): counted once.
      const bool fresh = seen.insert(t.unsafeGetTensorImpl()).second &&
                         seenStorage.emplace(t.storage().unsafeGetStorageImpl(), t.storage_offset()).second;
      if (fresh && t.dim() >= 1) {
        const at::ScalarType dtype =
            paramDtype && at::isFloatingType(t.scalar_type()) ? *paramDtype : t.scalar_type();
        unit.bytes += full * rowBytesAs(t, dtype);
      }
    }
    out.push_back(std::move(unit));
  }
  return out;
}

// First fit, largest first: bucket i holds the units (in plan order) whose bytes fit together
// within `bucketBytes`; 0 turns bucketing off (one collective per unit).
std::vector<std::vector<const UnitParams*>> packBuckets(const std::vector<const UnitParams*>& units,
                                                        int64_t bucketBytes) {
  std::vector<size_t> order(units.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return units[a]->bytes > units[b]->bytes; });
  std::vector<std::vector<size_t>> bins;
  std::vector<int64_t> filled;
  for (size_t i : order) {
    size_t bin = bins.size();
    if (bucketBytes > 0) {
      for (size_t b = 0; b < bins.size(); ++b) {
        if (filled[b] + units[i]->bytes <= bucketBytes) {
          bin = b;
          break;
        }
      }
    }
    if (bin == bins.size()) {
      bins.emplace_back();
      filled.push_back(0);
    }
    bins[bin].push_back(i);
    filled[bin] += units[i]->bytes;
  }
  // Each bucket's units in plan order; buckets in the order of their first unit.
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  std::sort(bins.begin(), bins.end());
  std::vector<std::vector<const UnitParams*>> out;
  for (const auto& bin : bins) {
    std::vector<const UnitParams*> bucket;
    for (size_t i : bin) bucket.push_back(units[i]);
    out.push_back(std::move(bucket));
  }
  return out;
}

void reshardBuckets(const std::vector<Bucket>& buckets) {
  std::exception_ptr first;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    try {
      reshard(it->params, it->name, /*compareRows=*/true);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

ScopeOpened openScope(const torch::jit::Module& root, const std::vector<std::string>& selected) {
  // What every entry method does first: initialise the process group, check the file against it.
  const c10::IValue rank = rootAttribute(root, kRankAttr);
  const c10::IValue world = rootAttribute(root, kWorldSizeAttr);
  const c10::IValue sha = rootAttribute(root, kManifestHashAttr);
  const int64_t shardGroupSize = root.hasattr(kShardGroupSizeAttr) ? root.attr(kShardGroupSizeAttr).toInt() : 0;
  checkRank(rank.toInt(), world.toInt(), shardGroupSize, sha.toStringRef());
  startEntryCall();

  const auto options = rootAttribute(root, kScopeOptionsAttr).toIntVector();
  FSDP_CHECK(options.size() == 3, ErrorKind::kBadInput, kWhat, ": the module's ", kScopeOptionsAttr,
             " holds ", options.size(), " values, not 3");
  const int64_t budget = options[0];
  const int64_t bucketBytes = options[1];
  const std::optional<at::ScalarType> paramDtype =
      options[2] < 0 ? std::nullopt : std::optional<at::ScalarType>(static_cast<at::ScalarType>(options[2]));

  const std::vector<UnitParams> units = recordedUnits(root, paramDtype);
  std::vector<const UnitParams*> chosen;
  if (selected.empty()) {
    for (const auto& u : units) chosen.push_back(&u);
  } else {
    std::vector<std::string> known;
    for (const auto& u : units) known.push_back(u.path);
    std::set<std::string> wanted;
    for (const std::string& name : selected) {
      const std::string path = name.empty() ? "." : name;
      FSDP_CHECK(std::find(known.begin(), known.end(), path) != known.end(), ErrorKind::kBadInput, kWhat,
                 ": '", name, "' is not a unit of the module (its units: ", quotedList(known), ")");
      wanted.insert(path);
    }
    for (const auto& u : units) {
      if (wanted.count(u.path) != 0) chosen.push_back(&u);
    }
  }
  std::vector<const UnitParams*> gatherable;
  std::vector<at::Tensor> allParams;
  std::vector<int64_t> allRows;
  int64_t scopeBytes = 0;
  for (const UnitParams* u : chosen) {
    scopeBytes += u->bytes;
    if (u->params.empty()) continue;  // a unit whose group is empty: nothing to gather
    gatherable.push_back(u);
    allParams.insert(allParams.end(), u->params.begin(), u->params.end());
    allRows.insert(allRows.end(), u->rows.begin(), u->rows.end());
  }
  std::vector<std::string> names;
  for (const UnitParams* u : chosen) names.push_back(u->path);

  if (budget >= 0) {
    // Every rank computes the same numbers (same file, same program so far), so every rank
    // refuses alike, before any collective.
    const int64_t fresh = bytesToGather(allParams, allRows, paramDtype);
    const int64_t held = unshardedParamAndGradBytesNow();
    FSDP_CHECK(held + fresh <= budget, ErrorKind::kBadInput, kWhat, " of units ", quotedList(names),
               ": would hold ", held + fresh, " bytes unsharded at once (", fresh, " bytes to gather for the scope",
               held > 0 ? c10::str(" + ", held, " bytes unsharded already") : std::string(),
               "), over the rank file's --max-unsharded-bytes=", budget,
               "; open a scope over fewer units, or rewrite the model with a larger --max-unsharded-bytes");
  }

  Scope scope;
  scope.budget = budget;
  for (const auto& bucket : packBuckets(gatherable, bucketBytes)) {
    Bucket b;
    std::string joined;
    for (const UnitParams* u : bucket) {
      b.params.insert(b.params.end(), u->params.begin(), u->params.end());
      b.rows.insert(b.rows.end(), u->rows.begin(), u->rows.end());
      joined += (joined.empty() ? "" : ", ") + u->path;
    }
    b.name = joined + " (unshard scope)";
    scope.buckets.push_back(std::move(b));
  }
  const Stats before = stats();
  for (size_t i = 0; i < scope.buckets.size(); ++i) {
    try {
      allGather(scope.buckets[i].params, scope.buckets[i].rows, scope.buckets[i].name, paramDtype);
    } catch (...) {
      try {
        reshardBuckets(std::vector<Bucket>(scope.buckets.begin(), scope.buckets.begin() + static_cast<long>(i)));
      } catch (...) {
      }
      throw;
    }
  }
  ScopeOpened opened;
  opened.units = names;
  opened.bytes = scopeBytes;
  opened.collectives = stats().all_gathers - before.all_gathers;
  std::lock_guard<std::mutex> lock(scopes().mutex);
  opened.id = scopes().next++;
  scopes().open.emplace(opened.id, std::move(scope));
  return opened;
}

void closeScope(int64_t id) {
  Scope scope;
  {
    std::lock_guard<std::mutex> lock(scopes().mutex);
    auto it = scopes().open.find(id);
    FSDP_CHECK(it != scopes().open.end(), ErrorKind::kBadInput, kWhat, " ", id,
               " is not open (closed already, or never opened)");
    scope = std::move(it->second);
    scopes().open.erase(it);
  }
  reshardBuckets(scope.buckets);
}

int64_t openScopeCount() {
  std::lock_guard<std::mutex> lock(scopes().mutex);
  return static_cast<int64_t>(scopes().open.size());
}

int64_t scopeBudget() {
  std::lock_guard<std::mutex> lock(scopes().mutex);
  int64_t budget = -1;
  for (const auto& entry : scopes().open) {
    const int64_t b = entry.second.budget;
    if (b >= 0 && (budget < 0 || b < budget)) budget = b;
  }
  return budget;
}

std::unordered_map<const c10::TensorImpl*, int64_t> scopeHolds() {
  std::unordered_map<const c10::TensorImpl*, int64_t> holds;
  std::lock_guard<std::mutex> lock(scopes().mutex);
  for (const auto& entry : scopes().open) {
    std::unordered_set<const c10::TensorImpl*> mine;
    for (const Bucket& b : entry.second.buckets) {
      for (const at::Tensor& p : b.params) mine.insert(p.unsafeGetTensorImpl());
    }
    for (const c10::TensorImpl* impl : mine) holds[impl] += 1;
  }
  return holds;
}

void checkNoScopeForBackward(const std::string& what) {
  const int64_t open = openScopeCount();
  FSDP_CHECK(open == 0, ErrorKind::kBadInput, what, ": backward while an unshard scope is open (",
             open, " open) is not supported: inside the scope the units' parameters are full-shaped, "
             "while their .grad and the optimizer's state are the shard's; run backward() and the "
             "optimizer step after the `with fsdp_opt.unsharded(...)` block (or the "
             "fsdp_opt::runtime::UnshardedScope) ends, or the loop inside it under torch.no_grad()");
}

}  // namespace detail

UnshardedScope::UnshardedScope(const torch::jit::Module& root, const std::vector<std::string>& units) {
  detail::ScopeOpened opened = detail::openScope(root, units);
  id_ = opened.id;
  units_ = std::move(opened.units);
  bytes_ = opened.bytes;
  collectives_ = opened.collectives;
}

UnshardedScope::UnshardedScope(UnshardedScope&& other) noexcept
    : id_(other.id_), units_(std::move(other.units_)), bytes_(other.bytes_), collectives_(other.collectives_) {
  other.id_ = 0;
}

UnshardedScope::~UnshardedScope() {
  if (id_ == 0) return;
  try {
    close();
  } catch (const std::exception& e) {
    TORCH_WARN("fsdp_opt::runtime::UnshardedScope: resharding at the end of the scope failed: ",
               detail::describeException(e));
  }
}

void UnshardedScope::close() {
  if (id_ == 0) return;
  const int64_t id = id_;
  id_ = 0;
  detail::closeScope(id);
}

}  // namespace runtime
}  // namespace fsdp_opt
