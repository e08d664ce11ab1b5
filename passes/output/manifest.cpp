// manifest.json: what a set of rank files was made from and what it holds.
#include <fsdp_opt/runtime/compare.h>
#include <fsdp_opt/passes/output.h>
#include <fsdp_opt/passes/pattern.h>

#include "../ir/fsdp_ops.h"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#ifndef FSDP_OPT_VERSION
#define FSDP_OPT_VERSION "unknown"
#endif
#ifndef FSDP_OPT_TORCH_VERSION
#define FSDP_OPT_TORCH_VERSION "unknown"
#endif

namespace fsdp_opt {
namespace {

std::string hexDigest(EVP_MD_CTX* context) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest, &length);
  std::ostringstream hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(digest[i]);
  }
  return hex.str();
}

}  // namespace

std::string sha256Hex(const std::string& bytes) {
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  EVP_DigestUpdate(context, bytes.data(), bytes.size());
  std::string hex = hexDigest(context);
  EVP_MD_CTX_free(context);
  return hex;
}

std::string sha256OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    EVP_DigestUpdate(context, buffer.data(), static_cast<size_t>(in.gcount()));
  }
  std::string hex = hexDigest(context);
  EVP_MD_CTX_free(context);
  return hex;
}

std::string buildManifest(const torch::jit::Module& module, const FsdpPlan& plan,
                          const ManifestInput& input) {
  nlohmann::ordered_json manifest;
  manifest["format_version"] = kManifestFormatVersion;
  manifest["tool"] = "fsdp-opt";
  manifest["tool_version"] = FSDP_OPT_VERSION;
  manifest["torch_version"] = FSDP_OPT_TORCH_VERSION;
  manifest[kManifestWorldSizeKey] = input.mesh.worldSize;
  manifest["mesh"] = {{"replicas", input.mesh.replicas()}, {"shard_group_size", input.mesh.shardGroupSize}};
  manifest["input"] = {{"path", input.inputPath}, {"sha256", input.inputSha256}};
  std::vector<std::string> entries;
  for (torch::jit::Function* function : module.type()->methods()) {
    if (!isNoGradCopy(function->name())) entries.push_back(function->name());  // how a method runs, not one to call
  }
  manifest["entry_methods"] = entries;
  manifest["units"] = nlohmann::ordered_json::array();
  for (const auto& unit : plan.units) {
    nlohmann::ordered_json params = nlohmann::ordered_json::array();
    for (const auto& param : unit.params) {
      std::vector<std::string> aliases;
      for (size_t i = 1; i < param.slots.size(); ++i) aliases.push_back(param.slots[i].path());
      params.push_back({{"path", param.path()},
                        {"aliases", aliases},
                        {"shape", param.shape},
                        {"dtype", dtypeName(param.tensor.scalar_type())},
                        {"shard_rows", shardRows(param.rows(), input.mesh.shardGroupSize)}});
    }
    manifest["units"].push_back({{"path", displayPath(unit.path)},
                                 {"forward_methods", unit.forwardMethods},
                                 {"bytes", unit.bytes()},
                                 {"params", params}});
  }
  return manifest.dump(2) + "\n";
}

}  // namespace fsdp_opt
