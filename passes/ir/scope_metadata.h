// What an unshard scope (fsdp_opt::runtime::UnshardedScope, Python's fsdp_opt.unsharded) needs
// to gather a rewritten module's units from outside TorchScript, recorded on its root as
// TorchScript attributes so that a rank file and an in-process transform result carry it alike
// (docs/runtime.md, "Unshard scopes"):
//
//   _fsdp_scope_units   List[str]        the units' paths, in plan (named_modules) order
//   _fsdp_scope_params  List[List[str]]  per unit, the attribute paths of its parameter group
//                                        from the root, every slot of a tied parameter
//   _fsdp_scope_rows    List[List[int]]  the full dim-0 size of each of those slots
//   _fsdp_scope_options List[int]        [--max-unsharded-bytes or -1, --bucket-bytes,
//                                         --param-dtype as a ScalarType number or -1]
//
// The lists are what insert-unit-gathers gathers for the unit, so a scope's gather and an entry
// method's gather of the same unit register the same tensors (and nest).
#pragma once

#include <fsdp_opt/format.h>
#include <fsdp_opt/passes/options.h>
#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>

namespace fsdp_opt {

// Sets (or registers) the four attributes on `root` from the plan and the options. Idempotent.
void addScopeAttributes(torch::jit::Module& root, const FsdpPlan& plan, const PipelineOptions& options);

}  // namespace fsdp_opt
