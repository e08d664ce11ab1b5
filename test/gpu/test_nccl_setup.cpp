// The NCCL backend's setup errors, which need no GPU (CUDA builds; ctest `cuda.nccl_setup_errors`,
// label `unit`): two processes of one world-size-2 group (this program forks itself) try to
// create the communicator four times, each attempt failing on purpose, and check that
//   - the device mapping names its cause: more ranks on the node than visible GPUs
//     (LOCAL_WORLD_SIZE=2, no GPU visible), a malformed FSDP_OPT_CUDA_DEVICE;
//   - when rank 0 cannot create the NCCL unique id, rank 1 fails at once with rank 0's reason,
//     not at the store's timeout;
//   - the unique-id store keys stay in step when one rank fails before the exchange: at the
//     next attempt rank 1 reads that attempt's id, never an earlier attempt's.
// CUDA_VISIBLE_DEVICES is emptied first, so it runs the same with or without a GPU.
// No GoogleTest: the GPU machine's standalone build (test/gpu/standalone) may not have it.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include "fsdp_opt/runtime/reserved_port.h"
#include "process_group.h"

namespace {

int g_rank = 0;
int g_failed = 0;

void check(bool ok, const std::string& what, const std::string& detail) {
  std::printf("[rank %d] %s %s%s%s\n", g_rank, ok ? "PASS" : "FAIL", what.c_str(),
              detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failed;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// One creation attempt with FSDP_OPT_CUDA_DEVICE = `device` (nullptr: unset). Every attempt
// here must fail; returns its message and how long it took.
std::string attempt(const char* device, double& seconds) {
  if (device != nullptr) {
    ::setenv("FSDP_OPT_CUDA_DEVICE", device, 1);
  } else {
    ::unsetenv("FSDP_OPT_CUDA_DEVICE");
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    fsdp_opt::runtime::detail::backendFor(c10::Device(c10::kCUDA, 0), "test");
    msg = "(no error)";
  } catch (const c10::Error& e) {
    msg = e.what_without_backtrace();
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return msg;
}

// A peer waiting for the id must be told within seconds; FSDP_OPT_TIMEOUT_S is 30.
constexpr double kFast = 10.0;

void rank0() {
  double s = 0;
  // 1: no GPU for cuda:LOCAL_RANK; rank 0 publishes why instead of an id.
  std::string m = attempt(nullptr, s);
  check(has(m, "LOCAL_WORLD_SIZE") && has(m, "2 ranks") && has(m, "0 CUDA devices"),
        "more ranks than visible GPUs names both numbers", m);
  // 2: the parameters' device: rank 0 publishes an id, then CUDA has no device.
  m = attempt("tensors", s);
  check(!has(m, "could not create the NCCL unique id") && !has(m, "(no error)"),
        "attempt 2 got past the id exchange", m);
  // 3: the same on rank 0, while rank 1 fails before the exchange.
  m = attempt("tensors", s);
  check(!has(m, "(no error)"), "attempt 3 fails (no GPU)", m);
  // 4: rank 0 fails before the id again.
  m = attempt(nullptr, s);
  check(has(m, "0 CUDA devices"), "attempt 4 fails on the device mapping", m);
}

void rank1() {
  double s = 0;
  std::string m = attempt("tensors", s);
  check(has(m, "rank 0 could not create the NCCL unique id") && has(m, "0 CUDA devices") && s < kFast,
        "rank 1 fails at once with rank 0's reason (" + std::to_string(s) + " s)", m);
  m = attempt("tensors", s);
  check(!has(m, "could not create the NCCL unique id") && !has(m, "(no error)") && s < kFast,
        "attempt 2 reads attempt 2's id, not attempt 1's failure (" + std::to_string(s) + " s)", m);
  m = attempt("bogus", s);
  check(has(m, "FSDP_OPT_CUDA_DEVICE='bogus'") && has(m, "tensors"),
        "a malformed FSDP_OPT_CUDA_DEVICE is named", m);
  // Attempt 3 failed here before reading its key; attempt 4 must still read attempt 4's.
  m = attempt("tensors", s);
  check(has(m, "rank 0 could not create the NCCL unique id") && s < kFast,
        "after a failure before the exchange, attempt 4 reads attempt 4's key (" +
            std::to_string(s) + " s)", m);
}

}  // namespace

int main() {
  // Before anything touches CUDA: no device, with or without a GPU in the machine.
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  // Held for the whole test: rank 0's store binds it at each attempt.
  const fsdp_opt::runtime::ReservedPort reserved;
  ::setenv("MASTER_PORT", std::to_string(reserved.port()).c_str(), 1);
  ::setenv("FSDP_OPT_TIMEOUT_S", "30", 1);
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("test_nccl_setup: fork");
    return 1;
  }
  g_rank = child == 0 ? 1 : 0;
  ::setenv("RANK", std::to_string(g_rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(g_rank).c_str(), 1);
  if (g_rank == 1) {
    rank1();
    std::fflush(stdout);
    std::_Exit(g_failed == 0 ? 0 : 1);  // rank 0 owns the store; nothing to tear down here
  }
  rank0();
  int status = 0;
  ::waitpid(child, &status, 0);  // rank 0 hosts the store: it stays until rank 1 is done
  const bool childOk = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!childOk) {
    std::printf("FAIL rank 1 (status %d)\n", status);
    ++g_failed;
  }
  std::printf("%s\n", g_failed == 0 ? "PASS" : "FAIL");
  std::fflush(stdout);
  std::_Exit(g_failed == 0 ? 0 : 1);  // the process group is leaked on purpose
}
