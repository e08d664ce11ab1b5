// The catalogue of the `fsdp` namespace's TorchScript ops (docs/design.md, "Ops"): every op's
// schema is registered here and nowhere else, each a thin wrapper over the part of the runtime
// that does the work (unshard_state.h, agreement.h, training.h, unsharded_scope_state.h).
//
// Every op is CONSERVATIVE: they mutate module state the schema language cannot name
// (parameters reached through prim::GetAttr), so TorchScript must neither eliminate them nor
// move parameter reads across them.
//
// Every op but last_error and unit_call (which does nothing) runs under recordedOp(): the
// interpreter rethrows an op's exception as a plain error, so the op keeps its failure's kind
// for the thread (errors.h). TorchScript cannot
// catch exceptions, so after a scripted call fails, the last fsdp:: op either raised that error
// or succeeded (then the failure is not the runtime's).
#include <torch/csrc/jit/api/module.h>
#include <torch/library.h>

#include <ATen/core/Dict.h>
#include <ATen/core/grad_mode.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "agreement.h"
#include "errors.h"
#include "fsdp_opt/runtime/runtime.h"
#include "process_group.h"
#include "training.h"
#include "unshard_state.h"
#include "unsharded_scope_state.h"

namespace {

using fsdp_opt::runtime::ErrorKind;
namespace detail = fsdp_opt::runtime::detail;

std::optional<at::ScalarType> dtypeOf(const c10::optional<at::ScalarType>& paramDtype) {
  if (paramDtype.has_value()) return *paramDtype;
  return std::nullopt;
}

std::vector<at::Tensor> allGatherOp(std::vector<at::Tensor> params, std::vector<int64_t> fullRows,
                                    std::string unit, c10::optional<at::ScalarType> paramDtype) {
  return detail::recordedOp([&] {
    if (at::GradMode::is_enabled()) detail::noteGatherDtype(params, dtypeOf(paramDtype));
    return detail::allGather(params, fullRows, unit, dtypeOf(paramDtype));
  });
}

std::vector<at::Tensor> allGatherNoCastOp(std::vector<at::Tensor> params,
                                          std::vector<int64_t> fullRows, std::string unit) {
  return detail::recordedOp([&] { return detail::allGather(params, fullRows, unit, std::nullopt); });
}

int64_t allGatherStartOp(std::vector<at::Tensor> params, std::vector<int64_t> fullRows,
                         std::string unit, c10::optional<at::ScalarType> paramDtype) {
  return detail::recordedOp([&] {
    if (at::GradMode::is_enabled()) detail::noteGatherDtype(params, dtypeOf(paramDtype));
    return detail::allGatherStart(params, fullRows, unit, dtypeOf(paramDtype));
  });
}

int64_t allGatherStartNoCastOp(std::vector<at::Tensor> params, std::vector<int64_t> fullRows,
                               std::string unit) {
  return detail::recordedOp([&] { return detail::allGatherStart(params, fullRows, unit, std::nullopt); });
}

std::vector<at::Tensor> allGatherWaitOp(int64_t handle) {
  return detail::recordedOp([&] { return detail::allGatherWait(handle); });
}

bool hasCudaBackendOp() {
  return detail::recordedOp([] { return fsdp_opt::runtime::hasCudaBackend(); });
}

void reshardOp(std::vector<at::Tensor> params, std::string unit) {
  detail::recordedOp([&] { detail::reshard(params, unit); });
}

void checkRankOp(int64_t rank, int64_t worldSize, std::string manifestSha256) {
  detail::recordedOp([&] {
    detail::checkRank(rank, worldSize, /*shardGroupSize=*/0, manifestSha256);
    detail::startEntryCall();
  });
}

// The form of a file made with --shard-group-size (HSDP): the mesh becomes the gathers'.
void checkRankMeshOp(int64_t rank, int64_t worldSize, int64_t shardGroupSize, std::string manifestSha256) {
  detail::recordedOp([&] {
    detail::checkRank(rank, worldSize, shardGroupSize, manifestSha256);
    detail::startEntryCall();
  });
}

// Marks where a call of a unit starts whose gather a wider one made redundant (the passes' plan
// holds the unit for the whole entry call). Nothing runs; the op is there for TorchScript: like
// the gather it replaces it is CONSERVATIVE, so the autodiff pass cannot merge the call's first
// operations with the code that computed its inputs, and backward still reaches the call's
// inputs only after the call's own backward (training.cpp lets a frozen unit go there).
void unitCallOp(const c10::OperatorHandle&, torch::jit::Stack* stack) { torch::jit::drop(*stack, 1); }

void releaseAllOp() {
  detail::recordedOp([] { fsdp_opt::runtime::releaseAll(); });
}

c10::Dict<std::string, int64_t> statsOp() {
  return detail::recordedOp([] {
    c10::Dict<std::string, int64_t> out;
    for (const auto& kv : fsdp_opt::runtime::stats().items()) out.insert(kv.first, kv.second);
    return out;
  });
}

void resetStatsOp() {
  detail::recordedOp([] { fsdp_opt::runtime::resetStats(); });
}

void initProcessGroupOp(int64_t rank, int64_t worldSize, std::string masterAddr,
                        int64_t masterPort) {
  detail::recordedOp([&] {
    FSDP_CHECK(rank >= 0 && rank <= INT32_MAX && worldSize >= 1 && worldSize <= INT32_MAX &&
                   masterPort >= 0 && masterPort <= 65535,
               ErrorKind::kBadInput, "fsdp::init_process_group: bad arguments rank=", rank,
               " world_size=", worldSize, " master_port=", masterPort);
    fsdp_opt::runtime::initProcessGroup(static_cast<int>(rank), static_cast<int>(worldSize),
                                        masterAddr, static_cast<int>(masterPort));
  });
}

void destroyProcessGroupOp() {
  detail::recordedOp([] { fsdp_opt::runtime::destroyProcessGroup(); });
}

bool rankAnyOp(bool flag, at::Tensor like) {
  return detail::recordedOp([&] { return detail::rankAny(flag, like); });
}

// Boxed, so that inference pays for none of its arguments: with grad mode off a backward hook
// has nothing to do, and a decoding loop runs one per unit call per token. The check comes
// before the Tensor[], int[] and str arguments are unboxed into vectors and strings.
void backwardHookOp(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 6;
  if (!at::GradMode::is_enabled()) {
    torch::jit::drop(*stack, kArguments);
    return;
  }
  auto args = torch::jit::last(*stack, kArguments);
  std::vector<at::Tensor> params = args[0].toTensorVector();
  std::vector<int64_t> fullRows = args[1].toIntVector();
  std::string unit = args[2].toStringRef();
  c10::IValue outputs = args[3];
  c10::IValue inputs = args[4];
  const int64_t maxUnshardedBytes = args[5].toInt();
  torch::jit::drop(*stack, kArguments);
  detail::recordedOp([&] {
    detail::backwardHook(std::move(params), std::move(fullRows), std::move(unit), std::move(outputs),
                         std::move(inputs), maxUnshardedBytes);
  });
}

void replicatedParamsOp(std::vector<at::Tensor> params) {
  detail::recordedOp([&] { detail::replicatedParams(std::move(params)); });
}

std::tuple<int64_t, std::vector<std::string>, int64_t, int64_t> unshardedScopeOpenOp(
    c10::IValue module, std::vector<std::string> units) {
  return detail::recordedOp([&] {
    FSDP_CHECK(module.isObject() && module.toObjectRef().type()->is_module(), ErrorKind::kBadInput,
               "fsdp::unsharded_scope_open: expected a TorchScript module, got ", module.tagKind());
    detail::ScopeOpened opened = detail::openScope(torch::jit::Module(module.toObject()), units);
    return std::make_tuple(opened.id, opened.units, opened.bytes, opened.collectives);
  });
}

void unshardedScopeCloseOp(int64_t id) {
  detail::recordedOp([&] { detail::closeScope(id); });
}

int64_t unshardedScopesOpenOp() {
  return detail::recordedOp([] { return detail::openScopeCount(); });
}

// Not recorded: reading the record must not clear it.
std::tuple<std::string, std::string> lastErrorOp() {
  const fsdp_opt::runtime::OpError e = fsdp_opt::runtime::lastOpError();
  if (e.kind == ErrorKind::kNone) return {"", ""};
  return {fsdp_opt::runtime::errorKindName(e.kind), e.message};
}

constexpr auto kConservative = c10::AliasAnalysisKind::CONSERVATIVE;

}  // namespace

TORCH_LIBRARY(fsdp, m) {
  // The 3-argument overloads (`.no_cast`) exist for IR built node by node: a node matches a
  // schema only with exactly as many inputs as the schema has arguments (defaults are filled in
  // by the TorchScript compiler, not by Graph::create), and the passes create 3-input
  // fsdp::all_gather nodes. Called by name, either overload serves a 3-argument call.
  m.def(torch::schema("all_gather(Tensor[] params, int[] full_rows, str unit, "
                      "ScalarType? param_dtype=None) -> Tensor[]",
                      kConservative),
        allGatherOp);
  m.def(torch::schema("all_gather.no_cast(Tensor[] params, int[] full_rows, str unit) -> Tensor[]",
                      kConservative),
        allGatherNoCastOp);
  m.def(torch::schema("all_gather_start(Tensor[] params, int[] full_rows, str unit, "
                      "ScalarType? param_dtype=None) -> int",
                      kConservative),
        allGatherStartOp);
  m.def(torch::schema("all_gather_start.no_cast(Tensor[] params, int[] full_rows, str unit) -> int",
                      kConservative),
        allGatherStartNoCastOp);
  m.def(torch::schema("all_gather_wait(int handle) -> Tensor[]", kConservative), allGatherWaitOp);
  m.def(torch::schema("reshard(Tensor[] params, str unit) -> ()", kConservative), reshardOp);
  m.def(torch::schema("check_rank(int rank, int world_size, str manifest_sha256) -> ()",
                      kConservative),
        checkRankOp);
  m.def(torch::schema("check_rank.mesh(int rank, int world_size, int shard_group_size, str manifest_sha256) -> ()",
                      kConservative),
        checkRankMeshOp);
  m.def(torch::schema("release_all() -> ()", kConservative), releaseAllOp);
  m.def(torch::schema("unit_call(str unit) -> ()", kConservative),
        torch::CppFunction::makeFromBoxedFunction<&unitCallOp>());
  m.def(torch::schema("stats() -> Dict(str, int)", kConservative), statsOp);
  m.def(torch::schema("reset_stats() -> ()", kConservative), resetStatsOp);
  m.def(torch::schema("init_process_group(int rank, int world_size, str master_addr, "
                      "int master_port) -> ()",
                      kConservative),
        initProcessGroupOp);
  m.def(torch::schema("destroy_process_group() -> ()", kConservative), destroyProcessGroupOp);
  m.def(torch::schema("has_cuda_backend() -> bool", kConservative), hasCudaBackendOp);
  m.def(torch::schema("last_error() -> (str kind, str message)", kConservative), lastErrorOp);
  // The rank-uniform loops' agreement (agreement.h).
  m.def(torch::schema("rank_any(bool flag, Tensor like) -> bool", kConservative), rankAnyOp);
  // Training (training.h).
  m.def(torch::schema("backward_hook(Tensor[] params, int[] full_rows, str unit, Any outputs, Any inputs, "
                      "int max_unsharded_bytes) -> ()",
                      kConservative),
        torch::CppFunction::makeFromBoxedFunction<&backwardHookOp>());
  m.def(torch::schema("replicated_params(Tensor[] params) -> ()", kConservative), replicatedParamsOp);
  // Unshard scopes (unsharded_scope_state.h; fsdp_opt.unsharded and UnshardedScope).
  m.def(torch::schema("unsharded_scope_open(Any module, str[] units) -> (int id, str[] units, int bytes, "
                      "int collectives)",
                      kConservative),
        unshardedScopeOpenOp);
  m.def(torch::schema("unsharded_scope_close(int id) -> ()", kConservative), unshardedScopeCloseOp);
  m.def(torch::schema("unsharded_scopes_open() -> int", kConservative), unshardedScopesOpenOp);
}
