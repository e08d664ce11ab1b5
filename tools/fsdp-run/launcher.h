// fsdp-run's launcher: runs a model sharded by fsdp-opt on N local processes (one per rank) and
// reports, in four steps (launcher.cpp):
//   resolve    the rank files, the world size, the timeout, the inputs and (--check) the
//              original's outputs, all before any process starts;
//   spawn      one worker per rank: this executable again, with torchrun's environment;
//   supervise  wait for them; once one fails, give the others a grace period to fail on their
//              own (they usually do at once), then kill them;
//   report     one `error:` line naming the rank whose failure explains the others', or one
//              line per rank comparing its outputs.
// Torch-free: everything that touches TorchScript is in run_torch.cpp.
#pragma once

#include <string>
#include <vector>

namespace fsdp_run {

/// fsdp-run's exit codes.
enum LauncherExit : int {
  kExitOk = 0,
  kExitMismatch = 1,      // outputs differ (from the original, or between --repeat runs)
  kExitUsage = 2,         // bad usage or input
  kExitWorkerFailed = 3,  // a worker failed while running
};

struct Options {
  std::string dir;
  std::string method = "forward";
  std::string inputs;
  int nproc = 0;
  std::string check;
  double timeout = 0;
  std::string saveOutputs;
  bool stats = false;
  bool verbose = false;
  int repeat = 1;
  bool noGrad = false;
  std::vector<std::string> opLibraries;  // --load-op-library, loaded by the launcher and each worker
  // hidden, worker side
  int workerRank = -1;
  std::string workerDir;
  bool workerRunsChecked = false;  // --check given: the launcher compares every run
};

/// The launcher; `self` is this executable (re-executed as the workers). Returns the exit code.
int launch(const Options& options, const std::string& self);

/// One worker (--internal-worker-rank); never returns.
[[noreturn]] void runWorker(const Options& options);

}  // namespace fsdp_run
