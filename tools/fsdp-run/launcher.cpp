// fsdp-run's launcher, in the four steps launcher.h lists.
#include "launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp_opt/format.h"
#include "fsdp_opt/runtime/op_library.h"
#include "fsdp_opt/runtime/reserved_port.h"
#include "fsdp_opt/runtime/runtime.h"
#include "run_torch.h"
#include "worker_files.h"

namespace fsdp_run {
namespace {

using fsdp_opt::runtime::ErrorKind;

std::atomic<int> gSignal{0};

void onSignal(int sig) { gSignal.store(sig); }

bool isDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool isFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reports bad usage or input: one `error:` line.
int usageError(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return kExitUsage;
}

// ---- resolve -----------------------------------------------------------------------------------

// What resolve() settles before any process starts.
struct Job {
  int world = 0;
  double timeoutS = 0;
  Checker checker;  // the inputs and, with --check, the original's outputs
};

std::string rankFile(const Options& o, int rank) {
  if (isFile(o.dir)) return o.dir;
  return o.dir + "/" + fsdp_opt::rankFileName(rank);
}

// The world size: --nproc, else the manifest's, else the number of consecutive rank files.
int resolveWorld(const Options& o, Job* job) {
  int world = o.nproc;
  if (isDir(o.dir)) {
    const std::string manifestPath = o.dir + "/" + fsdp_opt::kManifestFile;
    if (isFile(manifestPath)) {
      try {
        std::ifstream f(manifestPath);
        const nlohmann::json m = nlohmann::json::parse(f);
        if (world == 0 && m.contains(fsdp_opt::kManifestWorldSizeKey)) {
          world = m.at(fsdp_opt::kManifestWorldSizeKey).get<int>();
        }
      } catch (const std::exception& e) {
        return usageError("cannot read " + manifestPath + ": " + e.what());
      }
    }
    if (world == 0) {
      while (isFile(rankFile(o, world))) ++world;
      if (world == 0) {
        return usageError(o.dir + " holds no " + fsdp_opt::kManifestFile + " and no " +
                          fsdp_opt::rankFileName(0));
      }
    }
  } else if (isFile(o.dir)) {
    if (world == 0) world = 1;
    if (world != 1) {
      return usageError(o.dir + " is a single model file; --nproc=" + std::to_string(world) +
                        " needs a directory of rank files");
    }
  } else {
    return usageError(o.dir + ": no such file or directory");
  }
  if (world < 1) return usageError("world size must be at least 1, got " + std::to_string(world));
  for (int r = 0; r < world; ++r) {
    if (!isFile(rankFile(o, r))) {
      return usageError(rankFile(o, r) + " does not exist (world size " + std::to_string(world) +
                        ")");
    }
  }
  job->world = world;
  return kExitOk;
}

int resolve(const Options& o, Job* job) {
  if (int rc = resolveWorld(o, job); rc != kExitOk) return rc;
  // Here as well as in every worker: --check loads the original in this process, and a library
  // that cannot load is one error line, not one per rank.
  for (const std::string& library : o.opLibraries) {
    if (std::string err = fsdp_opt::runtime::loadOpLibrary(library); !err.empty()) return usageError(err);
  }
  job->timeoutS = o.timeout;
  if (job->timeoutS <= 0) {
    try {
      job->timeoutS = fsdp_opt::runtime::defaultTimeout().count() / 1000.0;
    } catch (const std::exception& e) {
      return usageError(fsdp_opt::runtime::oneLineMessage(e));
    }
  }
  if (!o.inputs.empty()) {
    if (std::string err = job->checker.loadInputs(o.inputs); !err.empty()) return usageError(err);
  }
  if (!o.check.empty()) {
    if (!isFile(o.check)) return usageError(o.check + ": no such file");
    // The reference runs unsharded in this process: world size 1, whatever the environment.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"}) ::unsetenv(v);
    if (std::string err = job->checker.runOriginal(o.check, o.method, o.repeat, o.noGrad); !err.empty()) {
      return usageError(err);
    }
  }
  return kExitOk;
}

// ---- spawn -------------------------------------------------------------------------------------

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool killedByUs = false;
  int exitCode = -1;   // when exited normally
  int termSignal = 0;  // when killed by a signal

  bool succeeded() const {
    return termSignal == 0 && (exitCode == kWorkerOk || exitCode == kWorkerRepeatMismatch);
  }
};

struct Run {
  std::string tmp;  // the workers' files (worker_files.h)
  std::vector<Worker> workers;
  // Rank 0's store port, held until the workers are reaped: rank 0 listens on it only after
  // loading torch, and nothing else may take it meanwhile.
  std::optional<fsdp_opt::runtime::ReservedPort> port;
};

// Removes the run's temporary directory: flat, holding only files the workers wrote.
void removeTree(const std::string& dir) {
  if (dir.empty()) return;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// Builds the worker's argv and environment and execs `self`. Never returns.
[[noreturn]] void execWorker(const std::string& self, const Options& o, int rank, int world,
                             int port, const std::string& tmp) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A worker's stderr is captured (torch's own warnings and stack traces would drown the one
  // `error:` line); the launcher replays it on success or with --verbose.
  const int errFd = ::open(stderrFile(tmp, rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (errFd >= 0) {
    ::dup2(errFd, STDERR_FILENO);
    ::close(errFd);
  }
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  if (o.timeout > 0) {
    std::ostringstream t;
    t.precision(17);
    t << o.timeout;
    ::setenv("FSDP_OPT_TIMEOUT_S", t.str().c_str(), 1);
  }
  std::vector<std::string> args = {self,
                                   o.dir,
                                   "--method=" + o.method,
                                   "--repeat=" + std::to_string(o.repeat),
                                   "--internal-worker-rank=" + std::to_string(rank),
                                   "--internal-worker-dir=" + tmp};
  if (!o.inputs.empty()) args.push_back("--inputs=" + o.inputs);
  if (!o.check.empty()) args.push_back("--internal-worker-runs-checked");
  if (o.noGrad) args.push_back("--no-grad");
  for (const std::string& library : o.opLibraries) args.push_back("--load-op-library=" + library);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(self.c_str(), argv.data());
  std::fprintf(stderr, "error: rank %d: cannot exec %s: %s\n", rank, self.c_str(),
               std::strerror(errno));
  ::_exit(127);
}

void killAll(std::vector<Worker>& workers, int sig) {
  for (Worker& w : workers) {
    if (w.running) {
      ::kill(w.pid, sig);
      w.killedByUs = true;
    }
  }
}

// Reaps finished workers; returns how many are still running.
int reap(std::vector<Worker>& workers) {
  int running = 0;
  for (Worker& w : workers) {
    if (!w.running) continue;
    int status = 0;
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      w.running = false;
      if (WIFEXITED(status)) w.exitCode = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) w.termSignal = WTERMSIG(status);
    } else if (r < 0 && errno == ECHILD) {
      w.running = false;
    } else {
      ++running;
    }
  }
  return running;
}

void killAndReapAll(std::vector<Worker>& workers) {
  killAll(workers, SIGKILL);
  while (reap(workers) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int spawn(const Options& o, const Job& job, const std::string& self, Run* run) {
  try {
    run->port.emplace();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitWorkerFailed;
  }
  const int port = run->port->port();
  std::string tmpl = "/tmp/fsdp-run.XXXXXX";
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') {
    tmpl = std::string(t) + "/fsdp-run.XXXXXX";
  }
  std::vector<char> tmpBuf(tmpl.begin(), tmpl.end());
  tmpBuf.push_back('\0');
  if (::mkdtemp(tmpBuf.data()) == nullptr) {
    std::cerr << "error: cannot create a temporary directory " << tmpl << ": "
              << std::strerror(errno) << "\n";
    return kExitWorkerFailed;
  }
  run->tmp = tmpBuf.data();

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  run->workers.assign(static_cast<size_t>(job.world), Worker{});
  for (int r = 0; r < job.world; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::cerr << "error: fork: " << std::strerror(errno) << "\n";
      killAndReapAll(run->workers);
      removeTree(run->tmp);
      return kExitWorkerFailed;
    }
    if (pid == 0) execWorker(self, o, r, job.world, port, run->tmp);
    run->workers[static_cast<size_t>(r)] = Worker{r, pid, true};
  }
  return kExitOk;
}

// ---- supervise ---------------------------------------------------------------------------------

// Once a worker has failed, the others normally fail fast on their own (a closed socket); they
// get `grace` to do so, so their errors can be read, and are then killed, well within the
// timeout. Returns the signal that interrupted the launcher, or 0.
int supervise(Run* run, std::chrono::milliseconds grace) {
  std::optional<std::chrono::steady_clock::time_point> killAt;
  while (reap(run->workers) > 0) {
    if (gSignal.load() != 0) {
      killAndReapAll(run->workers);
      return gSignal.load();
    }
    if (!killAt) {
      for (const Worker& w : run->workers) {
        if (!w.running && !w.succeeded()) killAt = std::chrono::steady_clock::now() + grace;
      }
    } else if (std::chrono::steady_clock::now() >= *killAt) {
      killAll(run->workers, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// ---- report ------------------------------------------------------------------------------------

// How much a rank's failure explains the job's failure; the report names the rank whose failure
// explains the most (the lowest rank among equals). A crash or a rank's own error is a root
// cause; a lost peer, a timeout waiting for one or a failure a peer reported (the kinds
// fsdp_opt::runtime::isConsequenceOfPeer names) follow from another rank's failure.
enum class Explains { kNothing = 0, kConsequence = 1, kOwnError = 2, kCrash = 3 };

struct Failure {
  int rank = -1;
  Explains explains = Explains::kNothing;
  int exitCode = kExitWorkerFailed;
  std::string message;
};

// The last non-empty line of a file ("" if none).
std::string lastLine(const std::string& path) {
  std::istringstream is(readText(path));
  std::string line, last;
  while (std::getline(is, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

Failure failureOf(const Worker& w, const std::string& tmp, std::chrono::milliseconds grace) {
  Failure f;
  f.rank = w.rank;
  if (w.killedByUs && w.termSignal == SIGKILL) {
    f.message = "killed by fsdp-run after rank failures (no error of its own within " +
                std::to_string(grace.count() / 1000.0).substr(0, 4) + " s)";
    return f;
  }
  const std::string lastErr = lastLine(stderrFile(tmp, w.rank));
  const std::string tail = lastErr.empty() ? std::string() : "; its last stderr line: " + lastErr;
  if (w.termSignal != 0) {
    f.explains = Explains::kCrash;
    f.message = std::string("killed by signal ") + std::to_string(w.termSignal) + " (" +
                strsignal(w.termSignal) + ")" + tail;
    return f;
  }
  const std::optional<WorkerError> error = readWorkerError(errorFile(tmp, w.rank));
  if (!error) {
    f.explains = Explains::kCrash;
    f.message =
        "exited with status " + std::to_string(w.exitCode) + " without reporting an error" + tail;
    return f;
  }
  f.message = error->message;
  f.explains = fsdp_opt::runtime::isConsequenceOfPeer(error->kind) ? Explains::kConsequence
                                                                   : Explains::kOwnError;
  f.exitCode = w.exitCode == kWorkerBadInput ? kExitUsage : kExitWorkerFailed;
  return f;
}

// Copies a worker's captured stderr to ours, each line prefixed with "[rank R] ".
void replayStderr(const std::string& tmp, int r) {
  std::istringstream is(readText(stderrFile(tmp, r)));
  for (std::string line; std::getline(is, line);) {
    std::cerr << "[rank " << r << "] " << line << "\n";
  }
}

// The failure that explains the run's, if any worker failed.
std::optional<Failure> rootFailure(const Run& run, std::chrono::milliseconds grace) {
  std::optional<Failure> worst;
  for (const Worker& w : run.workers) {
    if (w.succeeded()) continue;
    Failure f = failureOf(w, run.tmp, grace);
    if (!worst || f.explains > worst->explains) worst = f;
  }
  return worst;
}

// "name=value ..." from a stats file's "name value" lines.
std::string formatStats(const std::string& path) {
  std::istringstream is(readText(path));
  std::string formatted, name;
  long long value = 0;
  while (is >> name >> value) {
    formatted += (formatted.empty() ? "" : " ") + name + "=" + std::to_string(value);
  }
  return formatted;
}

// One line per rank (its outputs against the original's, or a summary), its counters with
// --stats, and the --save-outputs files.
int reportResults(const Options& o, const Job& job, const Run& run) {
  for (int r = 0; r < job.world; ++r) replayStderr(run.tmp, r);
  int exitCode = kExitOk;
  for (int r = 0; r < job.world; ++r) {
    const std::string out = outputFile(run.tmp, r);
    const std::string repeatDiff = readText(mismatchFile(run.tmp, r));
    std::string line = "rank " + std::to_string(r) + ": ";
    bool bad = false;
    if (!repeatDiff.empty()) {
      line += "MISMATCH: " + repeatDiff;
      bad = true;
    } else if (!o.check.empty()) {
      std::string diff;
      const std::string err = job.checker.compare(run.tmp, r, &diff);
      if (!err.empty() || !diff.empty()) {
        line += "MISMATCH: " + (err.empty() ? diff : err);
        bad = true;
      } else {
        line += "outputs bitwise identical to " + o.check;
      }
    } else {
      line += "ok, output " + Checker::summarize(out);
    }
    if (bad) exitCode = kExitMismatch;
    std::cout << line << "\n";
    if (o.stats)
      std::cout << "rank " << r << " stats: " << formatStats(statsFile(run.tmp, r)) << "\n";
    if (!o.saveOutputs.empty()) {
      const std::string dst = o.saveOutputs + ".rank" + std::to_string(r) + ".pt";
      std::ifstream in(out, std::ios::binary);
      std::ofstream os(dst, std::ios::binary | std::ios::trunc);
      os << in.rdbuf();
      if (!os) return usageError("cannot write " + dst);
    }
  }
  if (!o.saveOutputs.empty() && !o.check.empty()) {
    if (std::string err = job.checker.saveOriginal(o.saveOutputs + ".original.pt"); !err.empty()) {
      return usageError(err);
    }
  }
  std::cout.flush();
  return exitCode;
}

int report(const Options& o, const Job& job, const Run& run, std::chrono::milliseconds grace) {
  if (const std::optional<Failure> root = rootFailure(run, grace)) {
    if (o.verbose) {
      for (int r = 0; r < job.world; ++r) replayStderr(run.tmp, r);
    }
    std::cerr << "error: rank " << root->rank << ": " << root->message << "\n";
    return root->exitCode;
  }
  return reportResults(o, job, run);
}

}  // namespace

int launch(const Options& o, const std::string& self) {
  Job job;
  if (int rc = resolve(o, &job); rc != kExitOk) return rc;
  Run run;
  if (int rc = spawn(o, job, self, &run); rc != kExitOk) return rc;
  const auto grace =
      std::chrono::milliseconds(static_cast<int64_t>(std::min(job.timeoutS, 3.0) * 1000.0));
  if (const int sig = supervise(&run, grace)) {
    removeTree(run.tmp);
    std::cerr << "error: interrupted by signal " << sig << "\n";
    return 128 + sig;
  }
  const int rc = report(o, job, run, grace);
  removeTree(run.tmp);
  return rc;
}

void runWorker(const Options& o) {
  // A peer that died closes its sockets; Gloo then writes to a closed TCP connection. Ignored,
  // SIGPIPE becomes an EPIPE error that the runtime reports as a lost peer; left at its default
  // it kills this rank silently and the report blames the wrong one. (Python ignores SIGPIPE at
  // startup, so Python hosts already behave this way.)
  ::signal(SIGPIPE, SIG_IGN);
  WorkerArgs a;
  a.modelPath = rankFile(o, o.workerRank);
  a.method = o.method;
  a.inputsPath = o.inputs;
  a.outDir = o.workerDir;
  a.rank = o.workerRank;
  a.repeat = o.repeat;
  a.noGrad = o.noGrad;
  a.runsCheckedAgainstOriginal = o.workerRunsChecked;
  a.opLibraries = o.opLibraries;
  const int code = workerMain(a);
  std::fflush(stdout);
  std::fflush(stderr);
  // Skip static destructors: a failed collective may leave Gloo threads blocked, and nothing
  // of this process is needed any more (its results are on disk).
  ::_exit(code);
}

}  // namespace fsdp_run
