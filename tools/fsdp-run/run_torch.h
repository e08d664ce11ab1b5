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
  /// Runs ORIGINAL.pt's `method` on the inputs in this process. Returns "" or an error.
  std::string runOriginal(const std::string& path, const std::string& method);
  /// Saves the original's outputs (torch::pickle_save). Returns "" or an error.
  std::string saveOriginal(const std::string& path) const;
  /// Compares a rank's saved outputs with the original's. Sets `diff` to "" when bitwise
  /// identical, else to where and how they differ. Returns "" or an error reading the file.
  std::string compare(const std::string& rankOutputFile, std::string* diff) const;
  /// A short description of a saved output ("Tensor float32[2, 3]", "(Tensor, int)").
  static std::string summarize(const std::string& outputFile);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp_run
