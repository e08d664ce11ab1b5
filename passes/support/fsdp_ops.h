// Names and builders of the fsdp:: ops as the passes insert them (docs/design.md lists schemas).
#pragma once

#include <fsdp_opt/plan.h>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <string>

namespace fsdp_opt {

namespace ops {
c10::Symbol allGather();     // fsdp::all_gather
c10::Symbol reshard();       // fsdp::reshard
c10::Symbol checkRank();     // fsdp::check_rank
c10::Symbol releaseAll();    // fsdp::release_all
c10::Symbol gatherStart();   // fsdp::all_gather_start
c10::Symbol gatherWait();    // fsdp::all_gather_wait
// all_gather, or the all_gather_wait that completes a split gather: what a reshard consumes.
bool isGatherResult(const torch::jit::Node* node);
bool isFsdpOp(const torch::jit::Node* node);
}  // namespace ops

// Module attributes the rewrite adds.
constexpr const char* kUnitPathAttr = "_fsdp_unit_path";             // on every unit
constexpr const char* kRankAttr = "_fsdp_rank";                      // on the root
constexpr const char* kWorldSizeAttr = "_fsdp_world_size";           // on the root
constexpr const char* kManifestHashAttr = "_fsdp_manifest_sha256";  // on the root

// Registers `_fsdp_unit_path` on every unit instance (idempotent).
void addUnitPathAttributes(torch::jit::Module& root, const FsdpPlan& plan);

// At the graph's insertion point: reads the unit's group through prim::GetAttr chains from
// `unitModule`, and gathers it with one fsdp::all_gather. Returns the gather node.
// With `paramDtype`, the gather's optional fourth operand asks for full parameters in that dtype.
torch::jit::Node* insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule,
                                   const Unit& unit,
                                   std::optional<c10::ScalarType> paramDtype = std::nullopt);
// At the graph's insertion point: the reshard matching `gather`.
torch::jit::Node* insertUnitReshard(torch::jit::Graph& graph, torch::jit::Node* gather);

// The reshard consuming a gather's output, or nullptr.
torch::jit::Node* reshardOf(torch::jit::Node* gather);
// The module value a single-unit gather unshards (the object its unit path is read from), or
// nullptr for a bucket of several units.
torch::jit::Value* gatheredModule(torch::jit::Node* gather);
// Names the module a value denotes by its prim::GetAttr chain from a root value, so that two
// separate chains to one submodule (e.g. after inlining) get the same key.
std::string moduleChainKey(torch::jit::Value* module);
// The path of a module value reached from `self` through prim::GetAttr nodes, relative to self.
std::optional<std::string> pathFromSelf(torch::jit::Value* value, torch::jit::Value* self);

// The units whose parameters a gather (all_gather, all_gather_start or the wait of one) unshards,
// found from its parameter list: one unit, or several for a bucket. `representative` is the
// path of an instance of the graph's class type, for graphs of non-root types.
std::vector<const Unit*> unitsOfGather(torch::jit::Node* gather, torch::jit::Graph& graph,
                                       const std::string& representative, const FsdpPlan& plan);

// Bytes of the groups a gather unshards (several units for a bucket), as unitsOfGather finds them.
int64_t gatheredBytes(torch::jit::Node* gather, torch::jit::Graph& graph,
                      const std::string& representative, const FsdpPlan& plan);
// Bytes of the gathers still open where `anchor` runs: in anchor's block and in each block
// enclosing it up to the graph's top one, the gather results (all_gather or all_gather_wait)
// that come before the node on the way to `anchor` and are resharded after it. Linear in the
// nodes before `anchor`; a pass walking many anchors of one block tracks its own block instead.
int64_t openGatheredBytesAt(torch::jit::Node* anchor, torch::jit::Graph& graph,
                            const std::string& representative, const FsdpPlan& plan);

}  // namespace fsdp_opt
