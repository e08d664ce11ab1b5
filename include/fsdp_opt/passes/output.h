// Files on disk (SPEC section 6): the manifest, per-rank shard files, the single-file output.
// Every writer writes to a temporary name beside the target and renames it into place, so a
// failure leaves no partial output. Failures throw std::runtime_error with a one-line message.
#pragma once

#include <fsdp_opt/format.h>
#include <fsdp_opt/passes/plan.h>

#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <functional>
#include <string>

namespace fsdp_opt {

constexpr int kManifestFormatVersion = 1;

std::string sha256Hex(const std::string& bytes);
std::string sha256OfFile(const std::string& path);

struct ManifestInput {
  std::string inputPath;
  std::string inputSha256;
  Mesh mesh;
};

// The manifest as the exact JSON text written to manifest.json; rank files carry its sha256.
std::string buildManifest(const torch::jit::Module& module, const FsdpPlan& plan,
                          const ManifestInput& input);

class ParameterBytes;  // deferred_load.h

// Rank r's shard of a parameter: rows [r*c, min((r+1)*c, N)) zero-padded to c = ceil(N/W) rows,
// in the parameter's memory layout (format.h: a channels_last weight has a channels_last shard).
// With `bytes`, a parameter loaded unread has its rows read from the archive.
at::Tensor makeShard(const at::Tensor& full, int64_t rank, int64_t worldSize,
                     const ParameterBytes* bytes = nullptr);

// The function of a parameter that gives its full tensor (to cut the shard from).
using FullTensorOf = std::function<const at::Tensor&(const GroupParam&)>;

// Makes `module` rank `rank`'s module of `mesh`, in place: every slot of every unit parameter
// holds the rank's shard (makeShard of `fullOf(param)`, param.tensor when not given; with
// `bytes`, of the rows read from the archive), and the root's rank attributes (an HSDP file's
// shard group size too) name the rank. The writer saves each rank's in turn; shardForRank
// keeps one in memory.
void makeRankModule(torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh, int64_t rank,
                    const FullTensorOf& fullOf = nullptr, const ParameterBytes* bytes = nullptr);

// Whether pickling `module`'s data archive (data.pkl and its tensor records) gives exactly what
// torch::jit::save wrote into `savedFile` for it: then saveReusingCode can save a module of the
// same types beside it.
bool picklesAsSaved(const torch::jit::Module& module, const std::string& savedFile);

// Saves `module` to `path` as torch::jit::save would, printing no code: its data archive is
// pickled anew and every other record (code, debug info, constants, extra files, version) is copied from
// `codeSource`, a file torch::jit::save wrote for a module of the same types, for which
// picklesAsSaved held. Code records are stored uncompressed. With `beforePickle`, the tensor
// records are written first, then beforePickle runs (it may set attributes that are not
// tensors, such as a hash it had to wait for) and data.pkl is pickled after it.
void saveReusingCode(const torch::jit::Module& module, const std::string& codeSource, const std::string& path,
                     const std::function<void()>& beforePickle = nullptr);

// The extra files of the TorchScript archive at `path` (torch.jit.save's `_extra_files`, stored
// as extra/NAME), by NAME: every file fsdp-opt writes from it carries them too.
torch::jit::ExtraFilesMap readExtraFiles(const std::string& path);

// world size 1: one TorchScript archive at `path`, parameters whole, with `extraFiles`.
void writeSingleFile(torch::jit::Module& module, const std::string& manifestSha256,
                     const std::string& path, ParameterBytes* bytes = nullptr,
                     const torch::jit::ExtraFilesMap& extraFiles = {});

// world size W > 1: DIR/rank{r}.pt holding only rank r's shards (shard r % S of the mesh), and
// DIR/manifest.json. Ranks are cut one after another and their files written by up to two
// threads at once; with `bytes`, each reads only its rows of the parameters loaded unread, so the
// whole input is read once over all ranks (an HSDP mesh reads each shard's rows once per replica).
// `manifestText` is called once, when the first rank file needs the manifest's hash (after
// its tensors are written: the input's hash may still be on its way).
// Every rank file carries `extraFiles`.
void writeShardedDirectory(torch::jit::Module& module, const FsdpPlan& plan, const Mesh& mesh,
                           const std::function<std::string()>& manifestText, const std::string& dir,
                           ParameterBytes* bytes = nullptr, const torch::jit::ExtraFilesMap& extraFiles = {});

}  // namespace fsdp_opt
