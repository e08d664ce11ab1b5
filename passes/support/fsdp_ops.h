// Names and builders of the fsdp:: ops as the passes insert them (docs/design.md lists schemas).
#pragma once

#include <fsdp_opt/plan.h>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

namespace fsdp_opt {

namespace ops {
c10::Symbol allGather();     // fsdp::all_gather
c10::Symbol reshard();       // fsdp::reshard
c10::Symbol checkRank();     // fsdp::check_rank
c10::Symbol releaseAll();    // fsdp::release_all
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
torch::jit::Node* insertUnitGather(torch::jit::Graph& graph, torch::jit::Value* unitModule,
                                   const Unit& unit);
// At the graph's insertion point: the reshard matching `gather`.
torch::jit::Node* insertUnitReshard(torch::jit::Graph& graph, torch::jit::Node* gather);

}  // namespace fsdp_opt
