// Names of fsdp-opt's output on disk (SPEC section 6), shared by its writers (passes/output/) and
// its readers (fsdp-run). Torch-free, so a launcher can include it cheaply.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp_opt {

/// DIR/manifest.json: what a set of rank files was made from and what it holds.
constexpr const char* kManifestFile = "manifest.json";
/// The manifest's world size (an integer).
constexpr const char* kManifestWorldSizeKey = "world_size";

/// DIR/rank{r}.pt: rank r's TorchScript archive.
inline std::string rankFileName(int64_t rank) { return "rank" + std::to_string(rank) + ".pt"; }

}  // namespace fsdp_opt
