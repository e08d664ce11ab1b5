// Unshard scopes of libfsdp_runtime, in C++: the counterpart of Python's
// `with fsdp_opt.unsharded(module):` (docs/runtime.md, "Unshard scopes"). Torch-free apart from
// a forward declaration, like fsdp_opt/runtime/runtime.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

namespace fsdp_opt {
namespace runtime {

/// An unshard scope (FSDP2's FSDPModule.unshard() / reshard(), FSDP1's summon_full_params), for
/// a loop of entry calls outside TorchScript that should not gather per call. The constructor
/// does what an entry method does first (the process group initialised, the file checked
/// against it: fsdp::check_rank), then gathers every unit of `root` (a module rewritten by
/// fsdp-opt: a rank file, or a transform result), or only those named in `units` ("blocks.0",
/// "." for the root), in as few collectives as the file's --bucket-bytes allows: one per
/// bucket, fingerprinted like every gather. While it is open, entry methods find those units
/// gathered and issue no collective for them. The destructor (or close()) reshards them, also
/// when the scope is left by an exception.
///
/// The file's --max-unsharded-bytes holds: a scope whose units, with what is unsharded already,
/// exceed it is refused with an error naming the bytes, before anything is gathered; inside it,
/// an entry method's gather that would exceed it (units outside the scope, on top of it) raises
/// before its collective. A backward through a unit while a scope is open raises. Every rank
/// must open and close the same scopes in the same order, as it calls the same entry methods
/// (a rank opening a scope while another calls an entry method fails with the divergence error).
/// The parameters inside are gathered copies: a write into one (an optimizer step, `copy_` of
/// new weights, through `data()` too) or new data given to one (`set_data`) would be dropped by
/// the reshard, so close() reshards and then raises
/// (bad-input, naming the unit), and the destructor warns (docs/runtime.md, "Writes to
/// gathered parameters").
class UnshardedScope {
 public:
  explicit UnshardedScope(const torch::jit::Module& root, const std::vector<std::string>& units = {});
  ~UnshardedScope();
  UnshardedScope(UnshardedScope&& other) noexcept;
  UnshardedScope(const UnshardedScope&) = delete;
  UnshardedScope& operator=(const UnshardedScope&) = delete;
  UnshardedScope& operator=(UnshardedScope&&) = delete;

  /// Reshards now (raising what resharding raised); the destructor then does nothing.
  void close();
  bool isOpen() const { return id_ != 0; }
  /// The units it holds gathered, in the module's order.
  const std::vector<std::string>& units() const { return units_; }
  /// Their full bytes (in the gathered dtype).
  int64_t bytes() const { return bytes_; }
  /// The collectives opening it issued (0 for units gathered already, e.g. by an outer scope).
  int64_t collectives() const { return collectives_; }

 private:
  int64_t id_ = 0;
  std::vector<std::string> units_;
  int64_t bytes_ = 0;
  int64_t collectives_ = 0;
};

}  // namespace runtime
}  // namespace fsdp_opt
