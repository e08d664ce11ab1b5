// fsdp-run's TorchScript side, behind a torch-free interface so the launcher TU stays light.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker_files.h"

namespace fsdp_run {

struct WorkerArgs {
  std::string modelPath;
  std::string method;
  std::string inputsPath;  // empty: no arguments
  std::string outDir;      // where the files of worker_files.h go
  int rank = 0;
  int repeat = 1;
  bool noGrad = false;  // --no-grad: every run under torch::NoGradGuard
  // --check: a run that differs from the first is written to runOutputFile for the launcher to
  // compare with the original's run of the same number, not reported as a mismatch here.
  bool runsCheckedAgainstOriginal = false;
  std::vector<std::string> opLibraries;  // loaded before the model (--load-op-library)
};

/// Runs one worker to completion and returns its exit code (WorkerExit); writes its result
/// files, and on failure its WorkerError.
int workerMain(const WorkerArgs& args);

/// Launcher-side checks and the --check comparison. Errors come back as messages (one line).
class Checker {
 public:
  Checker();
  ~Checker();
  /// Loads the positional arguments (a torch.save'd tuple or list). Returns "" or an error.
  std::string loadInputs(const std::string& path);
  /// Runs ORIGINAL.pt's `method` `repeat` times on the inputs in this process (on one loaded
  /// module, so state it keeps across calls carries over as on the ranks). Returns "" or an error.
  std::string runOriginal(const std::string& path, const std::string& method, int repeat, bool noGrad);
  /// Saves the original's outputs (torch::pickle_save). Returns "" or an error.
  std::string saveOriginal(const std::string& path) const;
  /// Compares each of rank `rank`'s runs (its files in the run's directory `dir`) with the
  /// original's run of the same number. Sets `diff` to "" when all are bitwise identical, else
  /// to where and how the first that differs does. Returns "" or an error reading a file.
  std::string compare(const std::string& dir, int rank, std::string* diff) const;
  /// A short description of a saved output ("Tensor float32[2, 3]", "(Tensor, int)").
  static std::string summarize(const std::string& outputFile);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp_run
