// What a worker leaves for the launcher in the run's temporary directory, and the format of its
// error record. Both sides (launcher.cpp, run_torch.cpp) use these; torch-free.
#pragma once

#include <optional>
#include <string>

#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_run {

/// Worker exit codes (the launcher maps them to its own).
enum WorkerExit : int {
  kWorkerOk = 0,
  kWorkerRepeatMismatch = 1,  // --repeat runs disagreed with the first run
  kWorkerBadInput = 2,        // model file, method or inputs unusable
  kWorkerFailed = 3,          // the method raised (a collective failed, the model raised, ...)
};

/// Files of rank r in the run's directory.
std::string outputFile(const std::string& dir, int rank);    // its first run's outputs
/// Run `run`'s outputs (run >= 2, --check only), written when they differ from the first run's:
/// a model with state across calls returns different outputs from run to run, and --check then
/// compares each run with the original's run of the same number.
std::string runOutputFile(const std::string& dir, int rank, int run);
std::string statsFile(const std::string& dir, int rank);     // its runtime counters
std::string errorFile(const std::string& dir, int rank);     // why it failed (WorkerError)
std::string mismatchFile(const std::string& dir, int rank);  // how a --repeat run differed
std::string stderrFile(const std::string& dir, int rank);    // its captured stderr

/// Why a worker failed: the kind (the runtime's ErrorKind of the failing fsdp:: op; kModel when
/// the model or another op raised; kBadInput for unusable files and inputs) and one line.
struct WorkerError {
  fsdp_opt::runtime::ErrorKind kind = fsdp_opt::runtime::ErrorKind::kInternal;
  std::string message;
};

/// Writes the record as two lines, "kind: NAME" and "message: TEXT", to a temporary name and
/// renames it into place. False when it cannot be written.
bool writeWorkerError(const std::string& path, const WorkerError& error);
/// The record at `path`; nothing when there is none. A record whose kind is unknown reads as
/// kInternal.
std::optional<WorkerError> readWorkerError(const std::string& path);

/// Writes `text` to a temporary name beside `path` and renames it into place.
bool writeFileAtomically(const std::string& path, const std::string& text);
/// The file's text without trailing newlines ("" when unreadable).
std::string readText(const std::string& path);

}  // namespace fsdp_run
