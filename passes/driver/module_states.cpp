// The ranks' module states before in-process sharding. See module_states.h.
#include "module_states.h"

#include <fsdp_opt/format.h>
#include <fsdp_opt/runtime/runtime.h>

#include <ATen/ATen.h>
#include <openssl/evp.h>

#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "ir/module_tree.h"

namespace fsdp_opt {
namespace {

struct State {
  std::string name;
  const char* what = "parameter";  // or "buffer"
  at::Tensor tensor;
};

// Parameters then buffers, in named_parameters() order, each TensorImpl once (a tied tensor is
// listed under its first name).
std::vector<State> statesOf(const torch::jit::Module& module) {
  std::vector<State> states;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (seen.insert(item.value.unsafeGetTensorImpl()).second) {
      states.push_back({item.name, "parameter", item.value});
    }
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (item.value.defined() && seen.insert(item.value.unsafeGetTensorImpl()).second) {
      states.push_back({item.name, "buffer", item.value});
    }
  }
  return states;
}

std::string shapeOf(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

// SHA-256 of the tensor's bytes (contiguous, on the CPU), hex.
std::string digestOf(const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().cpu().contiguous();
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  if (t.numel() > 0) EVP_DigestUpdate(context, t.data_ptr(), t.nbytes());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest, &length);
  EVP_MD_CTX_free(context);
  std::ostringstream hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(digest[i]);
  }
  return hex.str();
}

// One rank's description of its states: a line per tensor, "kind\tname\tdtype\tshape\tdigest".
struct Line {
  std::string kind, name, dtype, shape, digest;
  std::string structure() const { return kind + " '" + name + "' (" + dtype + ", shape " + shape + ")"; }
};

std::vector<Line> parse(const std::string& text) {
  std::vector<Line> lines;
  std::istringstream in(text);
  for (std::string row; std::getline(in, row);) {
    Line l;
    std::istringstream fields(row);
    std::getline(fields, l.kind, '\t');
    std::getline(fields, l.name, '\t');
    std::getline(fields, l.dtype, '\t');
    std::getline(fields, l.shape, '\t');
    std::getline(fields, l.digest, '\t');
    lines.push_back(std::move(l));
  }
  return lines;
}

std::string sameSeedAdvice() {
  return "every rank must build the model from the same seed or load the same checkpoint, or "
         "take rank 0's values with sync_module_states=True (C++: "
         "fsdp_opt::ModuleStates::kSyncFromRank0)";
}

}  // namespace

StateReplacements agreeOnModuleStates(const torch::jit::Module& module, int64_t rank,
                                      int64_t worldSize, ModuleStates mode) {
  const int groupWorld = runtime::worldSize();
  const int groupRank = runtime::rank();
  if (groupWorld == 1 || groupWorld != worldSize || groupRank != rank) {
    if (mode == ModuleStates::kSyncFromRank0) {
      throw std::runtime_error(
          "sync_module_states takes rank 0's values over the job's process group, but this "
          "process is rank " + std::to_string(groupRank) + " of world size " +
          std::to_string(groupWorld) + ", not rank " + std::to_string(rank) + " of " +
          std::to_string(worldSize) +
          " (run every rank under torchrun's environment, or call fsdp::init_process_group first)");
    }
    return {};  // no job to compare with: one process inspecting a rank's shards
  }

  const std::vector<State> states = statesOf(module);
  std::string mine;
  for (const State& s : states) {
    mine += std::string(s.what) + "\t" + s.name + "\t" + std::string(c10::toString(s.tensor.scalar_type())) +
            "\t" + shapeOf(s.tensor) + "\t" + digestOf(s.tensor) + "\n";
  }
  const std::vector<std::string> all = runtime::exchangeThroughStore("module-states", mine);
  std::vector<std::vector<Line>> ranks;
  for (const std::string& text : all) ranks.push_back(parse(text));

  // The same architecture first: no choice of values can fix another model.
  const std::vector<Line>& base = ranks[0];
  for (size_t r = 1; r < ranks.size(); ++r) {
    const std::vector<Line>& other = ranks[r];
    for (size_t i = 0; i < std::max(base.size(), other.size()); ++i) {
      if (i < base.size() && i < other.size() && base[i].structure() == other[i].structure()) continue;
      const std::string a = i < base.size() ? "holds " + base[i].structure() : "has no more parameters or buffers";
      const std::string b = i < other.size() ? "holds " + other[i].structure() : "has no more";
      throw std::runtime_error("the ranks' modules differ in structure: at parameter or buffer #" +
                               std::to_string(i) + ", rank 0 " + a + " where rank " +
                               std::to_string(r) + " " + b +
                               "; every rank must transform the same model");
    }
  }
  // Then the values: the same differing set on every rank, since every rank has every list.
  std::vector<size_t> differing;
  int firstRank = -1;
  for (size_t i = 0; i < base.size(); ++i) {
    for (size_t r = 1; r < ranks.size(); ++r) {
      if (ranks[r][i].digest == base[i].digest) continue;
      if (differing.empty()) firstRank = static_cast<int>(r);
      differing.push_back(i);
      break;
    }
  }
  if (differing.empty()) return {};
  if (mode == ModuleStates::kCheck) {
    const Line& first = base[differing.front()];
    std::string more;
    if (differing.size() > 1) {
      more = ", and so do " + std::to_string(differing.size() - 1) + " more of the " +
             std::to_string(base.size()) + " parameters and buffers";
    }
    throw std::runtime_error("the ranks' modules hold different values: " + first.kind + " '" +
                             first.name + "' differs between rank 0 and rank " +
                             std::to_string(firstRank) + more + "; " + sameSeedAdvice());
  }

  // kSyncFromRank0: rank 0's bytes of the differing tensors, in one broadcast.
  int64_t total = 0;
  std::vector<at::Tensor> sources;
  for (size_t i : differing) {
    sources.push_back(states[i].tensor.detach().cpu().contiguous());
    total += static_cast<int64_t>(sources.back().nbytes());
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(total));
  if (rank == 0) {
    int64_t offset = 0;
    for (const at::Tensor& s : sources) {
      if (s.nbytes() > 0) std::memcpy(bytes.data() + offset, s.data_ptr(), s.nbytes());
      offset += static_cast<int64_t>(s.nbytes());
    }
  }
  runtime::broadcastBytes(bytes.data(), total, 0,
                          "module states from rank 0 (" + std::to_string(differing.size()) + " tensors)");
  StateReplacements replacements;
  int64_t offset = 0;
  for (size_t k = 0; k < differing.size(); ++k) {
    const State& s = states[differing[k]];
    at::Tensor value = at::empty(sources[k].sizes(), sources[k].options());
    if (value.nbytes() > 0) std::memcpy(value.data_ptr(), bytes.data() + offset, value.nbytes());
    offset += static_cast<int64_t>(value.nbytes());
    // The bytes travel row-major; a tensor laid out otherwise (channels_last) gets its layout
    // back, which its shards and kernels keep (format.h, "memory layout of a shard").
    if (!hasRowMajorStrides(s.tensor.sizes().data(), s.tensor.strides().data(), s.tensor.dim()) &&
        s.tensor.is_non_overlapping_and_dense()) {
      value = at::empty_strided(s.tensor.sizes(), s.tensor.strides(), value.options()).copy_(value);
    }
    value = value.to(s.tensor.device());
    value.set_requires_grad(s.tensor.requires_grad());
    replacements.emplace(s.tensor.unsafeGetTensorImpl(), value);
  }
  return replacements;
}

void applyStateReplacements(const torch::jit::Module& module, const StateReplacements& replacements) {
  if (replacements.empty()) return;
  ModuleIndex index(module);
  for (const auto& entry : index.modules()) {
    const c10::intrusive_ptr<c10::ivalue::Object> object = entry.second._ivalue();
    for (size_t slot = 0; slot < object->slots().size(); ++slot) {
      const c10::IValue& value = object->getSlot(slot);
      if (!value.isTensor()) continue;
      auto found = replacements.find(value.toTensor().unsafeGetTensorImpl());
      if (found != replacements.end()) object->setSlot(slot, found->second);
    }
  }
}

}  // namespace fsdp_opt
