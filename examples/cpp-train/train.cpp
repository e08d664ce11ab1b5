// cpp-train: trains this rank's file of an `fsdp-opt --world-size=W -o DIR` run from C++.
//
// The rank file is an ordinary TorchScript module whose unit parameters are leaf tensors of
// the shard's shape (SPEC section 10): torch::optim takes them as they are. Calling forward with
// grad mode on and backward() is all: the fsdp:: ops in the module gather each unit for its
// forward call and again for its backward, and leave in each parameter's .grad this rank's rows
// of the gradient averaged over the ranks, so an elementwise optimizer's step on the shards is
// the step of the whole model. The rank and the rendezvous come from torchrun's environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which fsdp-run and torchrun set.
//
// usage: cpp-train DIR BATCHES.pt OUT.pt [--lr LR] [--momentum M]
//   DIR         fsdp-opt's output directory (rank<RANK>.pt); a next-token model (the test GPT)
//   BATCHES.pt  torch.save'd int64 tensor [ranks, steps, batch, tokens + 1]: this rank's
//               sequences, one batch per step; the model sees tokens [:-1] and predicts [1:]
//   OUT.pt      where to write this rank's parameters after training (a dict name -> shard,
//               readable with torch.load)
// Prints the loss of each step. Exit status 0, or 1 with an `error:` line.
#include <fsdp_opt/runtime/runtime.h>

#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::stoi(value) : fallback;
}

at::Tensor loadTensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes).toTensor();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: cpp-train DIR BATCHES.pt OUT.pt [--lr LR] [--momentum M]\n";
    return 1;
  }
  const std::string dir = argv[1], batchesPath = argv[2], outPath = argv[3];
  double lr = 0.05, momentum = 0.9;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--lr") lr = std::stod(argv[i + 1]);
    else if (flag == "--momentum") momentum = std::stod(argv[i + 1]);
    else {
      std::cerr << "error: unknown option " << flag << "\n";
      return 1;
    }
  }
  try {
    torch::set_num_threads(1);  // the reference the test compares with runs at one thread too
    const int rank = envInt("RANK", 0);
    // Linking the runtime registers the fsdp:: ops; this call keeps the linker from dropping it.
    fsdp_opt::runtime::resetStats();
    torch::jit::Module model = torch::jit::load(dir + "/rank" + std::to_string(rank) + ".pt");

    // Each parameter once: a tied weight is one tensor under two names.
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& item : model.named_parameters()) {
      if (seen.insert(item.value.unsafeGetTensorImpl()).second) {
        params.push_back(item.value);
        names.push_back(item.name);
      }
    }
    torch::optim::SGD optimizer(params, torch::optim::SGDOptions(lr).momentum(momentum));

    const at::Tensor batches = loadTensor(batchesPath)[rank];
    for (int64_t step = 0; step < batches.size(0); ++step) {
      const at::Tensor sequence = batches[step];
      const at::Tensor tokens = sequence.narrow(1, 0, sequence.size(1) - 1).contiguous();
      const at::Tensor targets = sequence.narrow(1, 1, sequence.size(1) - 1).contiguous();
      optimizer.zero_grad();
      const at::Tensor logits = model.forward({tokens}).toTensor();
      const at::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                                   targets.reshape({-1}));
      loss.backward();
      optimizer.step();
      std::cout << "cpp-train: rank " << rank << ": step " << step << ": loss " << loss.item<double>() << "\n";
    }

    c10::impl::GenericDict trained(c10::StringType::get(), c10::TensorType::get());
    for (size_t i = 0; i < params.size(); ++i) trained.insert(names[i], params[i].detach().clone());
    const std::vector<char> bytes = torch::jit::pickle_save(trained);
    std::ofstream(outPath, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const fsdp_opt::runtime::Stats stats = fsdp_opt::runtime::stats();
    std::cout << "cpp-train: rank " << rank << ": trained " << params.size() << " parameters; " << stats.grad_reductions
              << " gradient reductions, peak unsharded bytes " << stats.peak_unsharded_bytes << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
