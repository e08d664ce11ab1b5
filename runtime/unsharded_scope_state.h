// Internal: unshard scopes (fsdp_opt::runtime::UnshardedScope, fsdp::unsharded_scope_open /
// _close, Python's fsdp_opt.unsharded): a module's units gathered from outside TorchScript for as
// long as the scope is open (docs/runtime.md, "Unshard scopes").
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/TensorImpl.h>

namespace torch {
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

namespace fsdp_opt {
namespace runtime {
namespace detail {

struct ScopeOpened {
  int64_t id = 0;
  std::vector<std::string> units;  // the units it holds gathered, in plan order
  int64_t bytes = 0;               // their full bytes (in the gathered dtype)
  int64_t collectives = 0;         // the gathers it issued at opening: one per bucket
};

/// Opens a scope on `root` (a module rewritten by fsdp-opt), over `units` (empty: every unit).
ScopeOpened openScope(const torch::jit::Module& root, const std::vector<std::string>& units);
/// Reshards what scope `id` gathered, in reverse order; the scope is closed even when that fails.
void closeScope(int64_t id);
/// How many scopes are open.
int64_t openScopeCount();
/// Per parameter TensorImpl, how many gathers open scopes hold on it (releaseAll keeps them).
std::unordered_map<const c10::TensorImpl*, int64_t> scopeHolds();
/// The smallest --max-unsharded-bytes of the open scopes' files; -1 when none has one (or no
/// scope is open). Gathers inside a scope keep it (unshard_state.cpp).
int64_t scopeBudget();
/// Raises the error of a backward that runs while a scope is open (training.cpp); `what` names
/// where backward is ("backward of unit 'blocks.0'").
void checkNoScopeForBackward(const std::string& what);

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
