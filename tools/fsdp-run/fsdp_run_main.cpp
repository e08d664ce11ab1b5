// fsdp-run: runs a model sharded by fsdp-opt on N local processes (one per rank) and, with
// --check, compares every rank's outputs bitwise with the original model run in this process.
//
//   fsdp-run DIR [--method=NAME] [--inputs=FILE] [--nproc=N] [--check=ORIGINAL.pt]
//                [--timeout=S] [--save-outputs=PREFIX] [--stats] [--repeat=N]
//                [--no-grad] [--load-op-library=LIB]...
//
// This file parses the flags and hands over to the launcher (launcher.h: resolve, spawn,
// supervise, report) or, in the processes the launcher starts (hidden --internal-worker-*
// flags), to one worker.
//
// Exit codes: 0 ok; 1 outputs differ (from the original, or between --repeat runs);
// 2 bad usage or input; 3 a worker failed while running.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "launcher.h"

int main(int argc, char** argv) {
  CLI::App app{"fsdp-run: run a model sharded by fsdp-opt on N local processes, one per rank.\n"
               "DIR is fsdp-opt's output directory (rank{r}.pt, manifest.json) or a single\n"
               "model file (world size 1). Exit codes: 0 ok, 1 outputs differ, 2 bad usage or\n"
               "input, 3 a worker failed.",
               "fsdp-run"};
  fsdp_run::Options o;
  app.add_option("DIR", o.dir, "directory of rank files (or one .pt for world size 1)")
      ->required();
  app.add_option("--method", o.method, "method of the root module to run (default: forward)");
  app.add_option("--inputs", o.inputs,
                 "torch.save'd tuple or list of positional arguments (default: none)");
  app.add_option("--nproc", o.nproc,
                 "number of ranks (default: world_size from DIR/manifest.json)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--check", o.check,
                 "original model: run it in-process on the same inputs and compare every rank's "
                 "outputs bitwise");
  app.add_option("--timeout", o.timeout,
                 "seconds a collective may take before it fails (sets FSDP_OPT_TIMEOUT_S for "
                 "the ranks; default: FSDP_OPT_TIMEOUT_S or 300)")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--save-outputs", o.saveOutputs,
                 "write rank r's outputs to PREFIX.rank{r}.pt (and the original's to "
                 "PREFIX.original.pt with --check), loadable with torch.load(..., weights_only=False)");
  app.add_flag("--stats", o.stats, "print each rank's fsdp runtime counters");
  app.add_flag("--verbose", o.verbose,
               "also show the ranks' stderr when a rank fails (it is always shown, prefixed "
               "with [rank R], when all succeed)");
  app.add_option("--repeat", o.repeat,
                 "run the method N times per rank; with --check, run k of every rank must equal "
                 "run k of the original (run N times in this process); without, every run must "
                 "equal the first")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--no-grad", o.noGrad,
               "run the method (and the original, with --check) under torch.no_grad(), as inference "
               "code calls it; default: grad mode on, as a C++ program starts");
  app.add_option("--load-op-library", o.opLibraries,
                 "load a shared library that registers ops the model calls (torchvision's _C*.so, a "
                 "C++ extension) in the launcher and every rank, as torch.ops.load_library does "
                 "(repeatable)")
      ->type_name("LIB");
  app.add_option("--internal-worker-rank", o.workerRank)->group("");
  app.add_option("--internal-worker-dir", o.workerDir)->group("");
  app.add_flag("--internal-worker-runs-checked", o.workerRunsChecked)->group("");
  app.set_version_flag("--version", std::string("fsdp-run ") + FSDP_OPT_VERSION);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (see fsdp-run --help)\n";
    return fsdp_run::kExitUsage;
  }

  if (o.workerRank >= 0) fsdp_run::runWorker(o);

  char selfBuf[4096] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", selfBuf, sizeof(selfBuf) - 1);
  if (n <= 0) {
    std::cerr << "error: cannot resolve /proc/self/exe: " << std::strerror(errno) << "\n";
    return fsdp_run::kExitWorkerFailed;
  }
  return fsdp_run::launch(o, std::string(selfBuf, static_cast<size_t>(n)));
}
