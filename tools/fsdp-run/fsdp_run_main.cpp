// fsdp-run: runs a model sharded by fsdp-opt on N local processes (one per rank) and, with
// --check, compares every rank's outputs bitwise with the original model run in this process.
//
//   fsdp-run DIR [--method=NAME] [--inputs=FILE] [--nproc=N] [--check=ORIGINAL.pt]
//                [--timeout=S] [--save-outputs=PREFIX] [--stats] [--repeat=N]
//
// The launcher re-executes itself (/proc/self/exe) once per rank with a hidden worker flag and
// torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Workers
// leave their outputs (torch::pickle_save), stats and errors in a temporary directory.
//
// Exit codes: 0 ok; 1 outputs differ (from the original, or between --repeat runs);
// 2 bad usage or input; 3 a worker failed while running.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fsdp_opt/runtime.h"
#include "run_torch.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitUsage = 2;
constexpr int kExitWorkerFailed = 3;

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
  // hidden, worker side
  int workerRank = -1;
  std::string workerDir;
};

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

std::string readText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string stderrFile(const std::string& tmp, int r) {
  return tmp + "/rank" + std::to_string(r) + ".stderr";
}

// The last non-empty line of a file ("" if none).
std::string lastLine(const std::string& path) {
  std::istringstream is(readText(path));
  std::string line, last;
  while (std::getline(is, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Copies a worker's captured stderr to ours, each line prefixed with "[rank R] ".
void replayStderr(const std::string& tmp, int r) {
  std::istringstream is(readText(stderrFile(tmp, r)));
  for (std::string line; std::getline(is, line);) {
    std::cerr << "[rank " << r << "] " << line << "\n";
  }
}

std::string rankFile(const Options& o, int r) {
  if (isFile(o.dir)) return o.dir;
  return o.dir + "/rank" + std::to_string(r) + ".pt";
}

// A TCP port that is free right now on the loopback interface.
int freePort(std::string* err) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  } else {
    *err = std::string("cannot pick a free port: ") + std::strerror(errno);
  }
  ::close(fd);
  return port;
}

// Removes the launcher's temporary directory: flat, holding only files the workers wrote.
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

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool killedByUs = false;
  int exitCode = -1;   // when exited normally
  int termSignal = 0;  // when killed by a signal
};

// Builds the worker's argv and environment and execs /proc/self/exe. Never returns.
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
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(self.c_str(), argv.data());
  std::fprintf(stderr, "error: rank %d: cannot exec %s: %s\n", rank, self.c_str(),
               std::strerror(errno));
  ::_exit(127);
}

int runWorkerProcess(const Options& o) {
  fsdp_run::WorkerArgs a;
  a.modelPath = rankFile(o, o.workerRank);
  a.method = o.method;
  a.inputsPath = o.inputs;
  a.outDir = o.workerDir;
  a.rank = o.workerRank;
  a.repeat = o.repeat;
  const int code = fsdp_run::workerMain(a);
  std::fflush(stdout);
  std::fflush(stderr);
  // Skip static destructors: a failed collective may leave Gloo threads blocked, and nothing
  // of this process is needed any more (its results are on disk).
  ::_exit(code);
}

// Failure of one worker, ranked so that the root cause is reported rather than the peers that
// failed because of it.
struct Failure {
  int rank = -1;
  int severity = 0;  // 3: crashed / killed by a signal; 2: error; 1: "peer may have died" error
  int category = kExitWorkerFailed;
  std::string message;
};

Failure failureOf(const Worker& w, const std::string& tmp) {
  Failure f;
  f.rank = w.rank;
  const std::string err = readText(fsdp_run::errorFile(tmp, w.rank));
  const std::string lastErr = lastLine(stderrFile(tmp, w.rank));
  const std::string tail = lastErr.empty() ? std::string() : "; its last stderr line: " + lastErr;
  if (w.termSignal != 0) {
    f.severity = 3;
    f.message = std::string("killed by signal ") + std::to_string(w.termSignal) + " (" +
                strsignal(w.termSignal) + ")" + tail;
    return f;
  }
  if (err.empty()) {
    f.severity = 3;
    f.message = "exited with status " + std::to_string(w.exitCode) +
                " without reporting an error" + tail;
    return f;
  }
  f.message = err;
  f.severity = err.find("peer may have died") != std::string::npos ? 1 : 2;
  f.category = w.exitCode == fsdp_run::kWorkerBadInput ? kExitUsage : kExitWorkerFailed;
  return f;
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

int launcherMain(const Options& o, const std::string& self) {
  // ---- resolve the rank files ----
  int world = o.nproc;
  if (isDir(o.dir)) {
    const std::string manifestPath = o.dir + "/manifest.json";
    if (isFile(manifestPath)) {
      try {
        std::ifstream f(manifestPath);
        const nlohmann::json m = nlohmann::json::parse(f);
        if (world == 0 && m.contains("world_size")) world = m.at("world_size").get<int>();
      } catch (const std::exception& e) {
        std::cerr << "error: cannot read " << manifestPath << ": " << e.what() << "\n";
        return kExitUsage;
      }
    }
    if (world == 0) {
      while (isFile(rankFile(o, world))) ++world;
      if (world == 0) {
        std::cerr << "error: " << o.dir << " holds no manifest.json and no rank0.pt\n";
        return kExitUsage;
      }
    }
  } else if (isFile(o.dir)) {
    if (world == 0) world = 1;
    if (world != 1) {
      std::cerr << "error: " << o.dir << " is a single model file; --nproc=" << world
                << " needs a directory of rank files\n";
      return kExitUsage;
    }
  } else {
    std::cerr << "error: " << o.dir << ": no such file or directory\n";
    return kExitUsage;
  }
  if (world < 1) {
    std::cerr << "error: world size must be at least 1, got " << world << "\n";
    return kExitUsage;
  }
  for (int r = 0; r < world; ++r) {
    if (!isFile(rankFile(o, r))) {
      std::cerr << "error: " << rankFile(o, r) << " does not exist (world size " << world
                << ")\n";
      return kExitUsage;
    }
  }

  // ---- timeout (validated before anything starts) ----
  double timeoutS = o.timeout;
  if (timeoutS <= 0) {
    try {
      timeoutS = fsdp_opt::runtime::defaultTimeout().count() / 1000.0;
    } catch (const std::exception& e) {
      std::string msg = e.what();
      msg = msg.substr(0, msg.find('\n'));
      std::cerr << "error: " << msg << "\n";
      return kExitUsage;
    }
  }

  // ---- inputs and the reference run ----
  fsdp_run::Checker checker;
  if (!o.inputs.empty()) {
    const std::string err = checker.loadInputs(o.inputs);
    if (!err.empty()) {
      std::cerr << "error: " << err << "\n";
      return kExitUsage;
    }
  }
  if (!o.check.empty()) {
    if (!isFile(o.check)) {
      std::cerr << "error: " << o.check << ": no such file\n";
      return kExitUsage;
    }
    // The reference runs unsharded in this process: world size 1, whatever the environment.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"}) ::unsetenv(v);
    const std::string err = checker.runOriginal(o.check, o.method);
    if (!err.empty()) {
      std::cerr << "error: " << err << "\n";
      return kExitUsage;
    }
  }

  // ---- spawn ----
  std::string portErr;
  const int port = freePort(&portErr);
  if (port < 0) {
    std::cerr << "error: " << portErr << "\n";
    return kExitWorkerFailed;
  }
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
  const std::string tmp = tmpBuf.data();

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<Worker> workers(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::cerr << "error: fork: " << std::strerror(errno) << "\n";
      killAll(workers, SIGKILL);
      while (reap(workers) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      removeTree(tmp);
      return kExitWorkerFailed;
    }
    if (pid == 0) execWorker(self, o, r, world, port, tmp);
    workers[static_cast<size_t>(r)] = Worker{r, pid, true};
  }

  // ---- supervise ----
  // Once a worker has failed, the others normally fail fast on their own (a closed socket);
  // give them a moment so their errors can be read, then kill them, well within the timeout.
  const auto grace = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(timeoutS, 3.0) * 1000.0));
  bool anyFailed = false;
  std::chrono::steady_clock::time_point killAt{};
  while (reap(workers) > 0) {
    if (gSignal.load() != 0) {
      killAll(workers, SIGKILL);
      while (reap(workers) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      removeTree(tmp);
      std::cerr << "error: interrupted by signal " << gSignal.load() << "\n";
      return 128 + gSignal.load();
    }
    if (!anyFailed) {
      for (const Worker& w : workers) {
        if (!w.running && !(w.exitCode == fsdp_run::kWorkerOk ||
                            w.exitCode == fsdp_run::kWorkerRepeatMismatch)) {
          anyFailed = true;
          killAt = std::chrono::steady_clock::now() + grace;
        }
      }
    } else if (std::chrono::steady_clock::now() >= killAt) {
      killAll(workers, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // ---- failures ----
  Failure worst;
  for (const Worker& w : workers) {
    const bool ok = w.termSignal == 0 && (w.exitCode == fsdp_run::kWorkerOk ||
                                          w.exitCode == fsdp_run::kWorkerRepeatMismatch);
    if (ok) continue;
    Failure f = failureOf(w, tmp);
    if (w.killedByUs && w.termSignal == SIGKILL) {
      f.severity = 0;
      f.message = "killed by fsdp-run after rank failures (no error of its own within " +
                  std::to_string(grace.count() / 1000.0).substr(0, 4) + " s)";
    }
    if (worst.rank < 0 || f.severity > worst.severity) worst = f;
  }
  if (worst.rank >= 0) {
    if (o.verbose) {
      for (int r = 0; r < world; ++r) replayStderr(tmp, r);
    }
    std::cerr << "error: rank " << worst.rank << ": " << worst.message << "\n";
    removeTree(tmp);
    return worst.category;
  }

  // ---- results ----
  for (int r = 0; r < world; ++r) replayStderr(tmp, r);
  int exitCode = kExitOk;
  for (int r = 0; r < world; ++r) {
    const std::string out = fsdp_run::outputFile(tmp, r);
    const std::string repeatDiff = readText(fsdp_run::mismatchFile(tmp, r));
    std::string line = "rank " + std::to_string(r) + ": ";
    bool bad = false;
    if (!repeatDiff.empty()) {
      line += "MISMATCH: " + repeatDiff;
      bad = true;
    } else if (!o.check.empty()) {
      std::string diff;
      const std::string err = checker.compare(out, &diff);
      if (!err.empty()) {
        line += "MISMATCH: " + err;
        bad = true;
      } else if (!diff.empty()) {
        line += "MISMATCH: " + diff;
        bad = true;
      } else {
        line += "outputs bitwise identical to " + o.check;
      }
    } else {
      line += "ok, output " + fsdp_run::Checker::summarize(out);
    }
    if (bad) exitCode = kExitMismatch;
    std::cout << line << "\n";
    if (o.stats) {
      std::string s = readText(fsdp_run::statsFile(tmp, r));
      for (char& c : s) {
        if (c == '\n') c = ' ';
      }
      std::string formatted;
      std::istringstream is(s);
      std::string name;
      long long value = 0;
      while (is >> name >> value) {
        formatted += (formatted.empty() ? "" : " ") + name + "=" + std::to_string(value);
      }
      std::cout << "rank " << r << " stats: " << formatted << "\n";
    }
    if (!o.saveOutputs.empty()) {
      const std::string dst = o.saveOutputs + ".rank" + std::to_string(r) + ".pt";
      std::ifstream in(out, std::ios::binary);
      std::ofstream os(dst, std::ios::binary | std::ios::trunc);
      os << in.rdbuf();
      if (!os) {
        std::cerr << "error: cannot write " << dst << "\n";
        removeTree(tmp);
        return kExitUsage;
      }
    }
  }
  if (!o.saveOutputs.empty() && !o.check.empty()) {
    const std::string err = checker.saveOriginal(o.saveOutputs + ".original.pt");
    if (!err.empty()) {
      std::cerr << "error: " << err << "\n";
      removeTree(tmp);
      return kExitUsage;
    }
  }
  std::cout.flush();
  removeTree(tmp);
  return exitCode;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdp-run: run a model sharded by fsdp-opt on N local processes, one per rank.\n"
               "DIR is fsdp-opt's output directory (rank{r}.pt, manifest.json) or a single\n"
               "model file (world size 1). Exit codes: 0 ok, 1 outputs differ, 2 bad usage or\n"
               "input, 3 a worker failed.",
               "fsdp-run"};
  Options o;
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
                 "run the method N times per rank; every run must give the same outputs")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--internal-worker-rank", o.workerRank)->group("");
  app.add_option("--internal-worker-dir", o.workerDir)->group("");
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
    return kExitUsage;
  }

  if (o.workerRank >= 0) return runWorkerProcess(o);

  char selfBuf[4096] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", selfBuf, sizeof(selfBuf) - 1);
  if (n <= 0) {
    std::cerr << "error: cannot resolve /proc/self/exe: " << std::strerror(errno) << "\n";
    return kExitWorkerFailed;
  }
  return launcherMain(o, std::string(selfBuf, static_cast<size_t>(n)));
}
