// The on-disk format of fsdp-opt's output (SPEC sections 2 and 6), written once: which rows of a
// parameter rank r's file holds, what the files are called, which attributes a rank file's
// modules carry and how a dtype is spelled. The writer (passes/output/), the runtime (its
// checks and gathers), fsdp-run and, through torch.ops.fsdp_opt.format_names and
// rank_file_name (passes/driver/torch_ops.cpp), the Python package all read it from here.
// Torch-free, so a launcher or a layout unit test can include it cheaply.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace fsdp_opt {

// ---- rows (SPEC section 2) --------------------------------------------------------------------
// A parameter of N rows in dim 0 sharded over S ranks (the world, or under HSDP a shard group):
// every shard has c = ceil(N / S) rows; shard s holds rows [s*c, min((s+1)*c, N)), then zero
// padding up to c rows. Rank r of an HSDP file holds shard r % S (Mesh::shardOf, plan.h).

/// c = ceil(rows / shards), for rows >= 0 and shards > 0.
inline int64_t shardRows(int64_t rows, int64_t shards) { return (rows + shards - 1) / shards; }

/// The first row shard `shard` holds (rows when it is past the end: all padding).
inline int64_t shardRowBegin(int64_t rows, int64_t shards, int64_t shard) {
  return std::min(shard * shardRows(rows, shards), rows);
}

/// The rows of real data (not padding) shard `shard` holds.
inline int64_t shardValidRows(int64_t rows, int64_t shards, int64_t shard) {
  return std::min(shardRows(rows, shards), rows - shardRowBegin(rows, shards, shard));
}

// ---- memory layout of a shard -----------------------------------------------------------------
// A shard keeps the order its parameter's dims have in memory, and the gathered parameter gets
// the original's strides back from it: kernels choose their path by the layout of their operands
// (a channels_last convolution weight, a transposed matmul operand), and a different path rounds
// differently (SPEC section 8). A parameter with row-major strides has a row-major shard, as
// before. For another dense one (strides S, N rows), the shard of c rows has the strides S with
// every stride of a dim of more than one element that spans dim 0's rows (a multiple of N * S[0]:
// the dims outside dim 0 in memory) rescaled from N to c rows; the runtime applies the same rule
// from c back to N. Size-1 dims keep their strides as they are (channels_last gives a 1x1 kernel's
// dims strides of their own, which kernels read). The writer uses the rule only where the two
// directions give S back exactly, and otherwise writes a row-major shard (the parameter is then
// gathered row-major: exact values, not the layout).

/// Whether `strides` are the row-major strides of `sizes` exactly, size-1 dims included (what
/// at::empty gives; is_contiguous() ignores size-1 dims).
inline bool hasRowMajorStrides(const int64_t* sizes, const int64_t* strides, int64_t count) {
  int64_t expected = 1;
  for (int64_t d = count - 1; d >= 0; --d) {
    if (strides[d] != expected) return false;
    expected *= std::max<int64_t>(sizes[d], 1);
  }
  return true;
}

/// `strides` of a dense tensor of `sizes` (`count` dims, `fromRows` in dim 0) for the same layout
/// with `toRows` rows in dim 0.
inline void stridesForRows(const int64_t* sizes, const int64_t* strides, int64_t count, int64_t fromRows,
                           int64_t toRows, int64_t* out) {
  const int64_t span = count > 0 ? fromRows * strides[0] : 0;
  for (int64_t d = 0; d < count; ++d) {
    const bool outsideRows = d > 0 && sizes[d] != 1 && span > 0 && strides[d] >= span && strides[d] % span == 0;
    out[d] = outsideRows ? strides[d] / fromRows * toRows : strides[d];
  }
}

// ---- files (SPEC section 6) -------------------------------------------------------------------

/// DIR/manifest.json: what a set of rank files was made from and what it holds.
constexpr const char* kManifestFile = "manifest.json";
/// The manifest's world size (an integer).
constexpr const char* kManifestWorldSizeKey = "world_size";

/// DIR/rank{r}.pt: rank r's TorchScript archive.
inline std::string rankFileName(int64_t rank) { return "rank" + std::to_string(rank) + ".pt"; }

// ---- module attributes the rewrite adds -------------------------------------------------------

constexpr const char* kUnitPathAttr = "_fsdp_unit_path";               // on every unit
constexpr const char* kRankAttr = "_fsdp_rank";                        // on the root
constexpr const char* kWorldSizeAttr = "_fsdp_world_size";             // on the root
constexpr const char* kManifestHashAttr = "_fsdp_manifest_sha256";     // on the root
constexpr const char* kShardGroupSizeAttr = "_fsdp_shard_group_size";  // on an HSDP file's root only
// What an unshard scope needs, on the root (passes/ir/scope_metadata.h says what each holds).
constexpr const char* kScopeUnitsAttr = "_fsdp_scope_units";
constexpr const char* kScopeParamsAttr = "_fsdp_scope_params";
constexpr const char* kScopeRowsAttr = "_fsdp_scope_rows";
constexpr const char* kScopeOptionsAttr = "_fsdp_scope_options";

// ---- dtypes -----------------------------------------------------------------------------------

/// The format's name of a dtype (the manifest's "dtype", fingerprints, messages), by the number
/// TorchScript archives and IR give a ScalarType (6 = float32, 15 = bfloat16); nullptr for a
/// dtype without one (callers fall back to c10's own name).
inline const char* dtypeNameOfScalarType(int scalarType) {
  switch (scalarType) {
    case 0: return "uint8";
    case 1: return "int8";
    case 2: return "int16";
    case 3: return "int32";
    case 4: return "int64";
    case 5: return "float16";
    case 6: return "float32";
    case 7: return "float64";
    case 9: return "complex64";
    case 10: return "complex128";
    case 11: return "bool";
    case 15: return "bfloat16";
    default: return nullptr;
  }
}

}  // namespace fsdp_opt
