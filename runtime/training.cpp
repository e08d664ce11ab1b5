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
// This file decides when a unit is gathered again, when its gradients are complete and when
// backward is over; how gradients are summed over the ranks is gradient_reduction.h's.
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

#include "data_path.h"
#include "errors.h"
#include "fsdp_opt/runtime/runtime.h"
#include "gradient_reduction.h"
#include "process_group.h"
#include "stats.h"
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

// Raises the failure of a collective of backward: `ctx` ("backward of unit 'x'") and what
// failed ("gathering it again"). Every rank that runs this backward issues it, so a rank that
// skipped backward() (or ran another program) is the usual cause of a timeout. A fingerprint
// mismatch keeps its own message, which names both sides.
[[noreturn]] void raiseBackwardFailure(const std::string& ctx, const std::string& failed, const std::exception& e) {
  const ErrorKind kind = kindOr(e, ErrorKind::kBackend);
  if (kind == ErrorKind::kDivergence) raise(kind, c10::str(ctx, ": ", describeException(e)));
  raise(kind, c10::str(ctx, ": ", failed, " failed (did every rank call backward()?): ", describeException(e)));
}

// Forgets `batch`'s full gradients (a reduction that failed, a backward that raised), each
// parameter with what was set aside given back.
void abandon(UnitBatch& batch) {
  for (PendingGrad& g : batch.grads) {
    if (g.setAside.defined()) g.param.mutable_grad() = g.setAside;
  }
  updateStats([&](Stats& s) { s.unsharded_grad_bytes -= batch.bytes; });
  batch.grads.clear();
  batch.bytes = 0;
}

// Reduces `batch` and gives each of its parameters .grad = what was set aside + its rows. On
// failure every parameter gets back what was set aside.
void flush(UnitBatch& batch) {
  if (batch.grads.empty()) return;
  std::vector<at::Tensor> rows;
  try {
    std::vector<FullGradient> grads;
    for (const PendingGrad& g : batch.grads) grads.push_back(FullGradient{g.full, g.fullRows});
    rows = reduceToShardRows(batch.unit, grads);
  } catch (...) {
    abandon(batch);
    throw;
  }
  updateStats([&](Stats& s) { s.unsharded_grad_bytes -= batch.bytes; });
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
      updateStats([&](Stats& s) { s.unsharded_grad_bytes += bytes; });
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
  // How far backward got through the call.
  enum class Stage {
    kAhead,       // backward has not reached the call's outputs
    kGathered,    // it reached them and gathered the unit
    kPastInputs,  // it went past the call's inputs (the frozen parameters were let go)
  } stage = Stage::kAhead;
  // The gather backward started ahead for this call (prefetchBeforeLocked).
  enum class Prefetch {
    kNone,     // none started
    kStarted,  // started: `prefetchHandle` is waiting to be waited for
    kHeld,     // waited: its unshard is the prefetch's, not a hold yet (resharded if never used)
    kSpent,    // waited and handed to the call as its hold, or failed: nothing left to undo
  } prefetch = Prefetch::kNone;
  int64_t prefetchHandle = 0;
};

// Waits for `call`'s started prefetch: kHeld, or kSpent when the gather failed (rethrown).
void waitPrefetch(UnitCall& call) {
  call.prefetch = UnitCall::Prefetch::kSpent;  // a failed gather holds nothing
  allGatherWait(call.prefetchHandle);
  call.prefetch = UnitCall::Prefetch::kHeld;
}

// Lets go of everything still held, each parameter with its .grad set aside back, and of
// gathers started ahead that backward did not use; the calls of the forward become ready for
// another backward through the same graph (retain_graph=True).
void letGoOfAllLocked() {
  for (auto& entry : state().params) letGo(entry.second, /*restore=*/true);
  std::vector<std::weak_ptr<UnitCall>> live;
  for (const auto& weak : state().calls) {
    std::shared_ptr<UnitCall> c = weak.lock();
    if (!c) continue;
    if (c->prefetch == UnitCall::Prefetch::kStarted) {
      try {
        waitPrefetch(*c);
      } catch (...) {
        // the error was reported to the backward that started it
      }
    }
    if (c->prefetch == UnitCall::Prefetch::kHeld) reshard(c->params, c->unit);
    c->prefetch = UnitCall::Prefetch::kNone;
    c->prefetchHandle = 0;
    c->stage = UnitCall::Stage::kAhead;
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
    if (!c || c->prefetch != UnitCall::Prefetch::kStarted || c->unit != unit) continue;
    try {
      waitPrefetch(*c);
    } catch (const std::exception& e) {
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
    if (c->forward != call.forward || c->stage != UnitCall::Stage::kAhead || c->prefetch != UnitCall::Prefetch::kNone ||
        c->unit == call.unit) {
      return;
    }
    if (call.budget >= 0 && unshardedParamAndGradBytesNow() + c->bytes > call.budget) return;
    try {
      c->prefetchHandle = allGatherStart(c->params, c->fullRows, c->unit, std::nullopt);
      c->prefetch = UnitCall::Prefetch::kStarted;
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
  if (call.stage != UnitCall::Stage::kAhead) return;
  call.stage = UnitCall::Stage::kGathered;
  if (!state().backwardActive) {
    state().backwardActive = true;
    torch::autograd::Engine::get_default_engine().queue_callback(endBackward);
  }
  waitPrefetchesOfLocked(call.unit);
  if (call.prefetch == UnitCall::Prefetch::kHeld) {
    call.prefetch = UnitCall::Prefetch::kSpent;  // the prefetched unshard is this call's hold
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
  if (call.stage != UnitCall::Stage::kGathered) return;
  call.stage = UnitCall::Stage::kPastInputs;
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
      return averageOverWorld(grad);
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
