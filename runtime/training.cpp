// Training: backward through units (SPEC section 10, docs/design.md "Training").
//
// A unit's parameters are leaf tensors holding the rank's shard; fsdp::all_gather points them at
// full storage for a forward call and fsdp::reshard points them back (unshard_state.cpp), which
// autograd does not see as a change (the version counter stays). So a forward with grad mode on
// records the full-shaped parameters themselves, and its backward needs them full again:
//
//   fsdp::backward_hook(params, full_rows, unit, outputs, inputs), after each call of a unit
//   (passes insert it beside the reshard), hooks the call's outputs: when backward reaches the
//   first of them, the unit is gathered again ("held for backward"). A parameter's grad then
//   arrives full-shaped at its AccumulateGrad node (created when forward used it full); before
//   it, the hold set the parameter's .grad aside, so AccumulateGrad stores the full gradient,
//   and a post-hook on that node sums it over the ranks, keeps this rank's rows divided by the
//   world size (FSDP2's average), points the parameter back at its shard and gives it
//   .grad = what was set aside + those rows. Frozen units (no parameter requires grad) are let
//   go when backward reaches their call's inputs instead. Whatever is still held when backward
//   ends (a parameter no gradient reached) is let go by a callback queued on the engine.
//
//   fsdp::replicated_params(params), in every entry method, hooks each replicated parameter
//   (0-dim, or in no unit's group) once: its gradient is averaged over the ranks before it is
//   accumulated.
//
// The sum over ranks is done in rank order, ((g0 + g1) + g2) + ..., after an all-to-all that
// brings each rank every rank's rows of its shard (a reduce-scatter whose additions one process
// can reproduce bit for bit at any world size; docs/design.md "Training").
#include <c10/util/accumulate.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "collective_order.h"
#include "data_path.h"
#include "envelope.h"
#include "errors.h"
#include "fingerprint.h"
#include "fsdp_opt/runtime.h"
#include "process_group.h"
#include "shard_layout.h"
#include "training.h"
#include "unshard_state.h"
#include "unsharded_scope_state.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// A strong reference to an AccumulateGrad node: std::shared_ptr in LibTorch 1.13, an
// intrusive pointer in later releases.
using AccumulatorPtr = decltype(torch::autograd::impl::try_get_grad_accumulator(std::declval<const at::Tensor&>()));

// What one parameter of a unit goes through in one backward.
struct ParamState {
  at::Tensor param;
  int64_t fullRows = 0;
  std::string unit;
  int holds = 0;        // backward gathers of its unit not let go yet
  at::Tensor setAside;  // the .grad it had before this backward
  // The AccumulateGrad node its post-hook is on, kept alive: autograd holds it weakly and would
  // make a new one (without the hook) for the next forward.
  AccumulatorPtr accumulator;
};

// A full gradient waiting for the rest of its unit's, to be reduced with them.
struct PendingGrad {
  at::Tensor param;
  at::Tensor full;
  at::Tensor setAside;
  int64_t fullRows = 0;
};

// The gradients of one unit (of one dtype) in this backward: reduced in ONE collective once
// every parameter of the unit that requires grad has one (FSDP2's reduce-scatter per unit), or
// when backward ends, for a unit some of whose parameters got none.
struct UnitBatch {
  std::string unit;
  at::ScalarType dtype = at::kFloat;
  std::vector<PendingGrad> grads;
  int64_t bytes = 0;
};

struct UnitCall;

struct TrainingState {
  std::unordered_map<const c10::TensorImpl*, ParamState> params;
  // By unit name, in the order backward first reached them: the same on every rank, which is
  // what the collectives of a flush at the end of backward need.
  std::vector<std::shared_ptr<UnitBatch>> batches;
  std::unordered_set<const c10::TensorImpl*> replicated;  // hooked once
  bool backwardActive = false;  // a hold was taken and the end-of-backward callback is queued
  // The calls hooked in forward, in order, for backward prefetching: held weakly, they die with
  // the graph whose outputs hold their hooks.
  std::vector<std::weak_ptr<UnitCall>> calls;
  uint64_t forwards = 0;  // entry method calls so far (startEntryCall)
  // Parameters whose last gather in grad mode cast them (--param-dtype), to that dtype.
  std::unordered_map<const c10::TensorImpl*, at::ScalarType> castParams;
};

std::mutex& trainingMutex() {
  static std::mutex m;
  return m;
}

TrainingState& state() {
  static TrainingState* s = new TrainingState();  // leaked like the registry
  return *s;
}

// a + b + c ... of `parts` in that order: the sum over ranks in rank order.
at::Tensor sumInRankOrder(const std::vector<at::Tensor>& parts) {
  at::Tensor sum = parts.front().clone();
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

// Raises the failure of a collective of backward: `ctx` ("backward of unit 'x'") and what
// failed ("gathering it again"). Every rank that runs this backward issues it, so a rank that
// skipped backward() (or ran another program) is the usual cause of a timeout. A fingerprint
// mismatch keeps its own message, which names both sides.
[[noreturn]] void raiseBackwardFailure(const std::string& ctx, const std::string& failed, const std::exception& e) {
  const ErrorKind kind = kindOr(e, ErrorKind::kBackend);
  if (kind == ErrorKind::kDivergence) raise(kind, c10::str(ctx, ": ", describeException(e)));
  raise(kind, c10::str(ctx, ": ", failed, " failed (did every rank call backward()?): ", describeException(e)));
}

// A gradient collective's failure, saying what it reduced (`what`: "the gradients of 3
// parameters (...)").
[[noreturn]] void raiseReductionFailure(const std::exception& e, const std::string& ctx, const std::string& what,
                                        const GroupInfo& group, const CollectiveBackend& backend) {
  raiseBackwardFailure(
      ctx, c10::str("reducing ", what, " over ", group.world, " ranks on backend ", backend.name()), e);
}

// Issues a collective of backward behind its fingerprint envelope (envelope.h) under the
// collective order (collective_order.h), then waits for it: a prefetch started earlier goes out
// first, and ranks whose backwards differ fail with the divergence error instead of pairing
// this collective with another of the same size.
void issueFingerprinted(const fingerprint::Identity& identity, const c10::Device& device,
                        const std::shared_ptr<CollectiveBackend>& backend, const std::string& ctx, CollectiveGroup scope,
                        const std::function<std::unique_ptr<PendingCollective>()>& issue) {
  std::unique_ptr<PendingCollective> pending;
  {
    std::unique_lock<std::mutex> order = lockCollectiveOrder();
    if (device.is_cpu()) {
      Envelope envelope(backend, device, identity, at::Tensor());
      envelope.finish();
    } else {
      exchangeHostEnvelope(identity, ctx, scope);  // reading a device envelope would sync with the GPU
    }
    pending = issue();
  }
  pending->wait();
}

fingerprint::Identity gradientIdentity(const std::string& what, const std::vector<at::Tensor>& grads,
                                       int64_t payloadBytes) {
  fingerprint::Identity id;
  id.kind = fingerprint::Kind::kGradients;
  id.unit = what;
  id.payloadBytes = payloadBytes;
  id.numTensors = static_cast<int64_t>(grads.size());
  fingerprint::LayoutHash hash;
  hash.add("gradients");
  std::vector<at::ScalarType> dtypes;
  for (const at::Tensor& g : grads) {
    for (int64_t d : g.sizes()) hash.add(d);
    hash.add(dtypeName(g.scalar_type()));
    dtypes.push_back(g.scalar_type());
  }
  id.layoutHash = hash.value();
  id.dtypes = joinedDtypeNames(dtypes);
  return id;
}

// Every rank of `scope`'s `mine` (contiguous, the same size on each), in group-rank order: ONE
// all-gather behind its fingerprint; [group size, mine.numel()]. How gradients that every rank
// needs whole are reduced: the additions are then done in that order on every rank alike.
at::Tensor allGatherInGroupOrder(const at::Tensor& mine, CollectiveGroup scope, const fingerprint::Identity& identity,
                                 const std::string& ctx, const std::string& what) {
  const GroupInfo group = groupOf(scope);
  at::Tensor all = at::empty({group.world, mine.numel()}, mine.options());
  auto backend = backendFor(mine.device(), ctx, scope);
  try {
    at::Tensor in = mine.view({-1}).view(at::kByte);
    at::Tensor out = all.view({-1}).view(at::kByte);
    issueFingerprinted(identity, mine.device(), backend, ctx, scope, [&] { return backend->allGatherBytesAsync(in, out); });
  } catch (const std::exception& e) {
    raiseReductionFailure(e, ctx, what, group, *backend);
  }
  return all;
}

// Adds up, in replica order, every shard group's sum of this rank's rows (`partials`, in the
// batch's order): one all-gather over the replica group (HSDP: the R ranks holding the same
// shard), then the same additions on each of them, so the replicas' shards stay bitwise equal.
std::vector<at::Tensor> sumOverReplicas(const UnitBatch& batch, const std::vector<at::Tensor>& partials,
                                        const std::string& ctx) {
  const GroupInfo replicas = groupOf(CollectiveGroup::kReplicaGroup);
  if (replicas.world == 1) return partials;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : partials) flat.push_back(p.reshape({-1}));
  at::Tensor mine = at::cat(flat).contiguous();
  const at::Tensor all = allGatherInGroupOrder(
      mine, CollectiveGroup::kReplicaGroup,
      gradientIdentity("unit '" + batch.unit + "' across shard groups", partials, static_cast<int64_t>(mine.nbytes())),
      ctx,
      c10::str("the gradients of ", partials.size(), " parameters across ", replicas.world, " shard groups (",
               mine.numel(), " elements per rank)"));
  std::vector<at::Tensor> sums;
  int64_t offset = 0;
  for (const at::Tensor& p : partials) {
    std::vector<at::Tensor> parts;
    for (int64_t g = 0; g < replicas.world; ++g) {
      parts.push_back(all[g].narrow(0, offset, p.numel()).view(p.sizes()));
    }
    sums.push_back(sumInRankOrder(parts));
    offset += p.numel();
  }
  return sums;
}

// Reduces a unit's full gradients to this rank's rows of their mean over the ranks, in ONE
// collective per group: each gradient is padded to S shards of rows (SPEC section 2, S the
// shard group size: the world size unless the file is HSDP), all of them are packed so that
// chunk p holds every gradient's shard p, and an all-to-all within the shard group brings each
// rank every group rank's chunk of its own rows; the rank adds them in group-rank order. Under
// HSDP the shard groups' sums are then added in group order (sumOverReplicas), which is
// FSDP2's reduce-scatter within the group and all-reduce across groups. Last, the division by
// W. A reduction whose additions one process can repeat bit for bit at any mesh (a backend's
// reduce-scatter or all-reduce adds in its own order): ((g0 + g1) + ...) within a group,
// then (group 0 + group 1) + ... across. Returns the rows, in order.
std::vector<at::Tensor> reduceToShardRows(const UnitBatch& batch) {
  const int64_t world = ensureGroup().world;
  const GroupInfo group = groupOf(CollectiveGroup::kShardGroup);
  std::vector<at::Tensor> rows;
  if (world == 1) {
    for (const PendingGrad& g : batch.grads) rows.push_back(g.full.div(1));
    return rows;
  }
  const std::string ctx = "backward of unit '" + batch.unit + "'";
  const int64_t w = group.world;
  std::vector<at::Tensor> sums;  // this rank's rows summed over its shard group, per gradient
  if (w == 1) {
    for (const PendingGrad& g : batch.grads) sums.push_back(g.full);
  } else {
    std::vector<at::Tensor> chunks;  // per gradient: [S, shard elements]
    std::vector<int64_t> shardRows;
    for (const PendingGrad& g : batch.grads) {
      const int64_t r = layout::shardRows(g.fullRows, w);
      std::vector<int64_t> padded = g.full.sizes().vec();
      padded[0] = r * w;
      at::Tensor p = at::zeros(padded, g.full.options());
      p.narrow(0, 0, g.fullRows).copy_(g.full);
      chunks.push_back(p.view({w, -1}));
      shardRows.push_back(r);
    }
    at::Tensor send = at::cat(chunks, 1).contiguous();
    chunks.clear();
    at::Tensor received = at::empty_like(send);
    auto backend = backendFor(send.device(), ctx, CollectiveGroup::kShardGroup);
    std::vector<at::Tensor> fulls;
    for (const PendingGrad& g : batch.grads) fulls.push_back(g.full);
    const fingerprint::Identity identity =
        gradientIdentity("unit '" + batch.unit + "'", fulls, static_cast<int64_t>(send.nbytes()));
    try {
      at::Tensor in = send.view({-1}).view(at::kByte);
      at::Tensor out = received.view({-1}).view(at::kByte);
      issueFingerprinted(identity, send.device(), backend, ctx, CollectiveGroup::kShardGroup,
                         [&] { return backend->allToAllBytesAsync(in, out); });
    } catch (const std::exception& e) {
      raiseReductionFailure(e, ctx,
                            c10::str("the gradients of ", batch.grads.size(), " parameters (", send.numel() / w,
                                     " elements per rank)"),
                            group, *backend);
    }
    int64_t offset = 0;
    for (size_t i = 0; i < batch.grads.size(); ++i) {
      const PendingGrad& g = batch.grads[i];
      std::vector<int64_t> shape = g.full.sizes().vec();
      shape[0] = shardRows[i];
      const int64_t n = c10::multiply_integers(shape);
      std::vector<at::Tensor> parts;
      for (int64_t p = 0; p < w; ++p) parts.push_back(received[p].narrow(0, offset, n));
      sums.push_back(sumInRankOrder(parts).view(shape));
      offset += n;
    }
  }
  sums = sumOverReplicas(batch, sums, ctx);
  countGradReduction();
  // Divided last, so that .grad is a tensor of its own, not a view (torch::optim's zero_grad
  // detaches .grad in place, which a view refuses).
  for (const at::Tensor& sum : sums) rows.push_back(sum.div(world));
  return rows;
}

// Forgets `batch`'s full gradients (a reduction that failed, a backward that raised), each
// parameter with what was set aside given back.
void abandon(UnitBatch& batch) {
  for (PendingGrad& g : batch.grads) {
    if (g.setAside.defined()) g.param.mutable_grad() = g.setAside;
  }
  noteUnshardedGradBytes(-batch.bytes);
  batch.grads.clear();
  batch.bytes = 0;
}

// Reduces `batch` and gives each of its parameters .grad = what was set aside + its rows. On
// failure every parameter gets back what was set aside.
void flush(UnitBatch& batch) {
  if (batch.grads.empty()) return;
  std::vector<at::Tensor> rows;
  try {
    rows = reduceToShardRows(batch);
  } catch (...) {
    abandon(batch);
    throw;
  }
  noteUnshardedGradBytes(-batch.bytes);
  for (size_t i = 0; i < batch.grads.size(); ++i) {
    PendingGrad& g = batch.grads[i];
    g.param.mutable_grad() = g.setAside.defined() ? g.setAside.add(rows[i]) : rows[i];
  }
  batch.grads.clear();
  batch.bytes = 0;
}

// The batch of `unit` for parameters of `dtype` (created in the order backward reaches them).
std::shared_ptr<UnitBatch> batchOfLocked(const std::string& unit, at::ScalarType dtype) {
  for (const auto& b : state().batches) {
    if (b->unit == unit && b->dtype == dtype) return b;
  }
  auto b = std::make_shared<UnitBatch>();
  b->unit = unit;
  b->dtype = dtype;
  state().batches.push_back(b);
  return b;
}

// Whether a parameter of `unit` of `dtype` that requires grad is still gathered for this
// backward: its gradient is still to come, so the unit's batch waits for it.
bool gradStillToComeLocked(const std::string& unit, at::ScalarType dtype) {
  for (const auto& entry : state().params) {
    const ParamState& ps = entry.second;
    if (ps.holds > 0 && ps.unit == unit && ps.param.requires_grad() && ps.param.scalar_type() == dtype) return true;
  }
  return false;
}

// Forgets the gradients of a backward that will not finish (it raised).
void dropBatchesLocked() {
  for (const auto& b : state().batches) abandon(*b);
  state().batches.clear();
}

// Lets go of every backward hold of `ps` (its parameter back at its shard) and, with
// `restore`, gives it back the .grad set aside (a backward that ended without its gradient).
void letGo(ParamState& ps, bool restore) {
  for (; ps.holds > 0; --ps.holds) reshard({ps.param}, ps.unit);
  if (restore && ps.setAside.defined()) ps.param.mutable_grad() = std::move(ps.setAside);
  ps.setAside = at::Tensor();
}

// After AccumulateGrad stored a unit parameter's full gradient in .grad.
class AfterAccumulate final : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterAccumulate(const c10::TensorImpl* impl) : impl_(impl) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    at::Tensor param, full, setAside;
    int64_t fullRows = 0;
    std::string unit;
    {
      std::lock_guard<std::mutex> lock(trainingMutex());
      auto it = state().params.find(impl_);
      if (it == state().params.end() || it->second.holds == 0) return outputs;
      ParamState& ps = it->second;
      param = ps.param;
      full = param.grad();
      param.mutable_grad() = at::Tensor();
      setAside = ps.setAside;
      letGo(ps, /*restore=*/false);  // the parameter is its shard again, as the .grad below
      fullRows = ps.fullRows;
      unit = ps.unit;
    }
    if (!full.defined()) {
      if (setAside.defined()) param.mutable_grad() = setAside;
      return outputs;
    }
    std::shared_ptr<UnitBatch> ready;
    {
      std::lock_guard<std::mutex> lock(trainingMutex());
      const at::ScalarType dtype = full.scalar_type();
      std::shared_ptr<UnitBatch> batch = batchOfLocked(unit, dtype);
      const int64_t bytes = full.numel() * static_cast<int64_t>(full.element_size());
      noteUnshardedGradBytes(bytes);
      batch->bytes += bytes;
      batch->grads.push_back(PendingGrad{param, std::move(full), std::move(setAside), fullRows});
      if (!gradStillToComeLocked(unit, dtype)) ready = batch;
    }
    if (ready) flush(*ready);  // a collective: outside the lock
    return outputs;
  }

 private:
  const c10::TensorImpl* impl_;
};

// One forward call of a unit, as its backward needs it.
struct UnitCall {
  std::vector<at::Tensor> params;
  std::vector<int64_t> fullRows;
  std::string unit;
  int64_t bytes = 0;        // the unit's full bytes (aliases once)
  int64_t budget = -1;      // --max-unsharded-bytes of the program (-1: none)
  size_t index = 0;         // in TrainingState::calls
  uint64_t forward = 0;     // TrainingState::forwards when the call was made
  std::optional<at::ScalarType> castTo;  // forward gathered it cast (--param-dtype): no backward
  bool gathered = false;    // backward reached the call's outputs and gathered the unit
  bool inputsDone = false;  // backward went past the call's inputs
  int64_t prefetch = 0;     // the handle of its gather, started ahead by backward (0: none)
  bool prefetchDone = false;   // that gather was waited for
  bool prefetchOwned = false;  // ...and its unshard is not a hold yet (released if never used)
};

// Lets go of everything still held, each parameter with its .grad set aside back, and of
// gathers started ahead that backward did not use; the calls of the forward become ready for
// another backward through the same graph (retain_graph=True).
void letGoOfAllLocked() {
  for (auto& entry : state().params) letGo(entry.second, /*restore=*/true);
  std::vector<std::weak_ptr<UnitCall>> live;
  for (const auto& weak : state().calls) {
    std::shared_ptr<UnitCall> c = weak.lock();
    if (!c) continue;
    if (c->prefetch != 0 && !c->prefetchDone) {
      c->prefetchOwned = true;
      try {
        allGatherWait(c->prefetch);
      } catch (...) {
        c->prefetchOwned = false;  // a failed gather holds nothing; the error was reported
      }
    }
    if (c->prefetchOwned) reshard(c->params, c->unit);
    c->prefetch = 0;
    c->prefetchDone = c->prefetchOwned = false;
    c->gathered = c->inputsDone = false;
    c->index = live.size();
    live.push_back(c);
  }
  state().calls.swap(live);
  state().backwardActive = false;
}

// Queued on the engine by the first hold of a backward: lets go of what no gradient reached,
// then reduces the units whose batch is still open (some parameter got no gradient), in the
// order backward reached them, which is every rank's order.
void endBackward() {
  std::vector<std::shared_ptr<UnitBatch>> open;
  {
    std::lock_guard<std::mutex> lock(trainingMutex());
    letGoOfAllLocked();
    open.swap(state().batches);
  }
  for (const auto& batch : open) flush(*batch);
}

// The call's distinct parameters, by the storage they point at now (aliases of one parameter
// share it; the unit is gathered when this runs), with their full row counts.
std::vector<std::pair<at::Tensor, int64_t>> distinctParams(const UnitCall& call) {
  std::vector<std::pair<at::Tensor, int64_t>> out;
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < call.params.size(); ++i) {
    const at::Tensor& p = call.params[i];
    const void* where = p.storage().unsafeGetStorageImpl();
    if (seen.insert(where).second) out.emplace_back(p, call.fullRows[i]);
  }
  return out;
}

// A failed gather of backward.
[[noreturn]] void raiseBackwardGatherFailure(const std::string& unit, const std::exception& e) {
  raiseBackwardFailure("backward of unit '" + unit + "'", "gathering it again", e);
}

// Waits for every started prefetch of `unit`: a gather of a unit whose start is not waited is
// refused, and backward may reach another call of the unit before the prefetched one.
void waitPrefetchesOfLocked(const std::string& unit) {
  for (const auto& weak : state().calls) {
    std::shared_ptr<UnitCall> c = weak.lock();
    if (!c || c->prefetch == 0 || c->prefetchDone || c->unit != unit) continue;
    c->prefetchDone = true;
    c->prefetchOwned = true;
    try {
      allGatherWait(c->prefetch);
    } catch (const std::exception& e) {
      c->prefetchOwned = false;
      raiseBackwardGatherFailure(unit, e);
    }
  }
}

// Starts the gather of the call before `call` in the same forward, the one backward reaches next
// (FSDP2's backward prefetch), when it fits: with what is unsharded now, within the program's
// --max-unsharded-bytes (a constant of its IR; always, without one), counting the full
// gradients alive as well as the parameters (SPEC section 10). Those bytes are a function of
// the program too, so every rank decides alike and issues the same collectives in
// the same order.
void prefetchBeforeLocked(const UnitCall& call) {
  for (size_t j = call.index; j-- > 0;) {
    std::shared_ptr<UnitCall> c = j < state().calls.size() ? state().calls[j].lock() : nullptr;
    if (!c) continue;
    if (c->forward != call.forward || c->gathered || c->prefetch != 0 || c->unit == call.unit) return;
    if (call.budget >= 0 && unshardedParamAndGradBytesNow() + c->bytes > call.budget) return;
    try {
      c->prefetch = allGatherStart(c->params, c->fullRows, c->unit, std::nullopt);
    } catch (const std::exception& e) {
      raiseBackwardGatherFailure(c->unit, e);
    }
    return;
  }
}

// Backward reached one of the call's outputs: gather the unit for its backward (or take the
// gather started ahead), then start the next one's.
void beforeBackward(UnitCall& call) {
  // Inside an unshard scope the parameters stay full-shaped after their gradient arrives, while
  // .grad and the optimizer take the shard's shape: refused on every rank, before any collective.
  checkNoScopeForBackward("backward of unit '" + call.unit + "'");
  if (call.castTo) {
    // Forward computed (and autograd saved) in the cast dtype; a backward on parameters of
    // another dtype would mix them. Mixed-precision training (FSDP2's reduce_dtype) is not here.
    raise(ErrorKind::kBadInput,
          c10::str("backward of unit '", call.unit, "': forward gathered its parameters as ", dtypeName(*call.castTo),
                   " (the rank file was built with --param-dtype), and training with --param-dtype is not supported; "
                   "build the rank file without --param-dtype to train it, or run the call under torch.no_grad()"));
  }
  std::lock_guard<std::mutex> lock(trainingMutex());
  if (call.gathered) return;
  call.gathered = true;
  if (!state().backwardActive) {
    state().backwardActive = true;
    torch::autograd::Engine::get_default_engine().queue_callback(endBackward);
  }
  waitPrefetchesOfLocked(call.unit);
  if (call.prefetchOwned) {
    call.prefetchOwned = false;  // the prefetched unshard is this call's hold
  } else {
    try {
      allGather(call.params, call.fullRows, call.unit, std::nullopt);
    } catch (const std::exception& e) {
      raiseBackwardGatherFailure(call.unit, e);
    }
  }
  if (call.budget >= 0) {
    // SPEC section 10: --max-unsharded-bytes bounds parameters and gradients held at once. Each
    // parameter is let go as its full gradient arrives, so a unit's backward adds no bytes to
    // what is held once it is gathered; but full gradients of other units still waiting (the
    // root's, until its last parameter's comes) are held beside it, which forward did not
    // have. Every rank reaches this point alike, so all raise here, before any collective.
    const int64_t held = unshardedParamAndGradBytesNow();
    if (held > call.budget) {
      reshard(call.params, call.unit);
      raise(ErrorKind::kBadInput,
            c10::str("backward of unit '", call.unit, "' would hold ", held,
                     " bytes of full parameters and gradients at once (the unit's parameters and the gradients "
                     "still waiting to be reduced), over the rank file's --max-unsharded-bytes=", call.budget,
                     "; build the rank file with a larger --max-unsharded-bytes to train it"));
    }
  }
  for (const auto& [p, rows] : distinctParams(call)) {
    ParamState& ps = state().params[p.unsafeGetTensorImpl()];
    ps.param = p;
    ps.fullRows = rows;
    ps.unit = call.unit;
    if (ps.holds++ == 0 && p.requires_grad()) {
      ps.setAside = p.grad();
      p.mutable_grad() = at::Tensor();
    }
  }
  prefetchBeforeLocked(call);
}

// Backward went past the call's inputs: the call's frozen parameters (no gradient will let
// them go) are done with.
void afterBackwardOfCall(UnitCall& call) {
  std::lock_guard<std::mutex> lock(trainingMutex());
  if (!call.gathered || call.inputsDone) return;
  call.inputsDone = true;
  for (const auto& [p, rows] : distinctParams(call)) {
    if (p.requires_grad()) continue;
    ParamState& ps = state().params[p.unsafeGetTensorImpl()];
    if (ps.holds == 0) continue;
    reshard({p}, call.unit);
    --ps.holds;
  }
}

// Every tensor requiring grad in an IValue (a tensor, or tuples, lists and dicts of them).
void tensorsRequiringGrad(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    if (value.toTensor().defined() && value.toTensor().requires_grad()) out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) tensorsRequiringGrad(element, out);
  } else if (value.isList()) {
    for (const auto& element : value.toListRef()) tensorsRequiringGrad(element, out);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) tensorsRequiringGrad(entry.value(), out);
  }
}

}  // namespace

void backwardHook(std::vector<at::Tensor> params, std::vector<int64_t> fullRows, std::string unit,
                  c10::IValue outputs, c10::IValue inputs, int64_t maxUnshardedBytes) {
  if (!at::GradMode::is_enabled()) return;
  {
    // A backward that raised never ran its callback: its holds are still there when the next
    // forward runs. Let them go, each parameter with its set-aside .grad back.
    finishAbandonedBackward();
  }
  std::vector<at::Tensor> outs;
  tensorsRequiringGrad(outputs, outs);
  if (outs.empty()) return;  // nothing of this call is differentiated
  auto call = std::make_shared<UnitCall>();
  call->params = std::move(params);
  call->fullRows = std::move(fullRows);
  call->unit = std::move(unit);
  call->budget = maxUnshardedBytes;
  {
    for (const auto& [p, rows] : distinctParams(*call)) {
      if (p.dim() == 0 || p.size(0) == 0) continue;
      call->bytes += rows * (p.numel() / p.size(0)) * static_cast<int64_t>(p.element_size());
    }
    std::lock_guard<std::mutex> lock(trainingMutex());
    for (const at::Tensor& p : call->params) {
      auto it = state().castParams.find(p.unsafeGetTensorImpl());
      if (it != state().castParams.end()) call->castTo = it->second;
    }
    auto& calls = state().calls;
    if (calls.size() >= 64 && calls.size() % 64 == 0) {  // forwards never backpropagated: prune
      std::vector<std::weak_ptr<UnitCall>> live;
      for (const auto& weak : calls) {
        if (auto c = weak.lock()) {
          c->index = live.size();
          live.push_back(c);
        }
      }
      calls.swap(live);
    }
    call->index = calls.size();
    call->forward = state().forwards;
    calls.push_back(call);
  }
  bool frozen = false;
  for (const at::Tensor& p : call->params) {
    if (!p.requires_grad()) {
      frozen = true;
      continue;
    }
    // The accumulator exists: forward used the parameter (full) to compute these outputs. One
    // made now would take the shard's shape.
    auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p);
    std::lock_guard<std::mutex> lock(trainingMutex());
    ParamState& ps = state().params[p.unsafeGetTensorImpl()];
    if (accumulator && ps.accumulator != accumulator) {
      accumulator->add_post_hook(std::make_unique<AfterAccumulate>(p.unsafeGetTensorImpl()));
      ps.accumulator = accumulator;
    }
  }
  for (const at::Tensor& out : outs) {
    out.register_hook([call](const at::Tensor&) { beforeBackward(*call); });
  }
  if (frozen) {
    std::vector<at::Tensor> ins;
    tensorsRequiringGrad(inputs, ins);
    for (const at::Tensor& in : ins) {
      in.register_hook([call](const at::Tensor&) { afterBackwardOfCall(*call); });
    }
  }
}

void replicatedParams(std::vector<at::Tensor> params) {
  if (!at::GradMode::is_enabled()) return;
  if (ensureGroup().world == 1) return;
  for (const at::Tensor& p : params) {
    if (!p.defined() || !p.requires_grad()) continue;
    {
      std::lock_guard<std::mutex> lock(trainingMutex());
      if (!state().replicated.insert(p.unsafeGetTensorImpl()).second) continue;
    }
    p.register_hook([](const at::Tensor& grad) {
      checkNoScopeForBackward("backward of a replicated parameter");
      // Every rank needs the whole sum: an all-gather of the (small) gradient, then the
      // additions in rank order, as for unit gradients.
      at::Tensor mine = grad.contiguous();
      const at::Tensor all = allGatherInGroupOrder(
          mine, CollectiveGroup::kWorld,
          gradientIdentity("a replicated parameter", {mine}, static_cast<int64_t>(mine.nbytes())),
          "backward of a replicated parameter", c10::str("a gradient of ", grad.sizes()));
      countGradReduction();
      std::vector<at::Tensor> parts;
      for (int64_t r = 0; r < all.size(0); ++r) parts.push_back(all[r].view(mine.sizes()));
      return sumInRankOrder(parts).div(all.size(0));
    });
  }
}

void noteGatherDtype(const std::vector<at::Tensor>& params, std::optional<at::ScalarType> paramDtype) {
  std::lock_guard<std::mutex> lock(trainingMutex());
  for (const at::Tensor& p : params) {
    if (paramDtype && at::isFloatingType(p.scalar_type()) && p.scalar_type() != *paramDtype) {
      state().castParams[p.unsafeGetTensorImpl()] = *paramDtype;
    } else if (!paramDtype) {
      state().castParams.erase(p.unsafeGetTensorImpl());
    }
  }
}

void startEntryCall() {
  finishAbandonedBackward();
  std::lock_guard<std::mutex> lock(trainingMutex());
  ++state().forwards;
}

void finishAbandonedBackward() {
  std::lock_guard<std::mutex> lock(trainingMutex());
  if (!state().backwardActive) return;
  letGoOfAllLocked();
  dropBatchesLocked();
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
