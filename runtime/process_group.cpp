#include "process_group.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "communicator_id.h"
#include "device_mapping.h"
#include "fsdp_opt/runtime.h"

#ifdef FSDP_OPT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

constexpr double kDefaultTimeoutSeconds = 300.0;

const char* getenvOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int64_t parseIntEnv(const char* name, const char* value, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  TORCH_CHECK(errno == 0 && end != value && *end == '\0' && v >= lo && v <= hi,
              "fsdp: environment variable ", name, "='", value,
              "' is not an integer in [", lo, ", ", hi, "]");
  return v;
}

std::vector<std::string> splitComma(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, ',')) {
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

struct GroupState {
  bool initialized = false;
  GroupInfo info;
  std::string masterAddr;
  int masterPort = 0;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;  // null when world == 1
  std::shared_ptr<CollectiveBackend> cpuBackend;
  std::shared_ptr<CollectiveBackend> cudaBackend;  // NCCL, on device cudaDevice
  int cudaDevice = -1;
  std::string cudaDeviceOrigin;  // why cudaDevice, for messages ("LOCAL_RANK=1", ...)
  bool localRankFromEnv = false;  // LOCAL_RANK was set: it names this rank's CUDA device
  std::set<std::string> checkedManifests;
  int64_t manifestRounds = 0;
};

std::mutex& groupMutex() {
  static std::mutex m;
  return m;
}

// Never destroyed: tearing down Gloo threads or a TCPStore server while the process exits
// (possibly because a peer died mid-collective) must not hang or crash the exit path.
GroupState& state() {
  static GroupState* s = new GroupState();
  return *s;
}

void initLocked(GroupState& st, int rank, int world, int localRank, bool localRankFromEnv,
                const std::string& addr, int port, std::chrono::milliseconds timeout,
                bool agentStore, const std::string& keyPrefix) {
  TORCH_CHECK(world >= 1, "fsdp: world size must be >= 1, got ", world);
  TORCH_CHECK(rank >= 0 && rank < world, "fsdp: rank ", rank, " is out of range for world size ",
              world);
  c10::intrusive_ptr<c10d::Store> store;
  if (world > 1) {
    TORCH_CHECK(port > 0 && port <= 65535,
                "fsdp: a process group of world size ", world,
                " needs a master port (MASTER_PORT), got ", port);
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = (rank == 0) && !agentStore;
    opts.numWorkers = static_cast<std::size_t>(world);
    opts.waitWorkers = !agentStore;
    opts.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> tcp;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "fsdp: rendezvous at ", addr, ":", port, " (rank ", rank, " of ", world,
                  ") failed within ", timeout.count() / 1000.0,
                  " s; a peer may have died or not started: ", e.what());
    }
    tcp->setTimeout(timeout);
    store = c10::make_intrusive<c10d::PrefixStore>(keyPrefix, tcp);
  }
  st.initialized = true;
  st.info = GroupInfo{rank, world, localRank};
  st.masterAddr = addr;
  st.masterPort = port;
  st.timeout = timeout;
  st.store = std::move(store);
  st.cpuBackend.reset();
  st.cudaBackend.reset();
  st.cudaDevice = -1;
  st.cudaDeviceOrigin.clear();
  st.localRankFromEnv = localRankFromEnv;
  st.checkedManifests.clear();
  st.manifestRounds = 0;
}

void initFromEnvLocked(GroupState& st) {
  const char* worldEnv = getenvOrNull("WORLD_SIZE");
  const char* rankEnv = getenvOrNull("RANK");
  int world = 1;
  int rank = 0;
  if (worldEnv != nullptr) {
    world = static_cast<int>(parseIntEnv("WORLD_SIZE", worldEnv, 1, INT_MAX));
  }
  if (rankEnv != nullptr) {
    rank = static_cast<int>(parseIntEnv("RANK", rankEnv, 0, INT_MAX));
  } else {
    TORCH_CHECK(world == 1, "fsdp: WORLD_SIZE=", world, " is set but RANK is not");
  }
  TORCH_CHECK(rank < world, "fsdp: RANK=", rank, " is out of range for WORLD_SIZE=", world);
  int localRank = rank;
  const char* lr = getenvOrNull("LOCAL_RANK");
  if (lr != nullptr) localRank = static_cast<int>(parseIntEnv("LOCAL_RANK", lr, 0, INT_MAX));
  std::string addr = "127.0.0.1";
  if (const char* a = getenvOrNull("MASTER_ADDR")) addr = a;
  int port = 0;
  if (const char* p = getenvOrNull("MASTER_PORT")) {
    port = static_cast<int>(parseIntEnv("MASTER_PORT", p, 1, 65535));
  } else {
    TORCH_CHECK(world == 1, "fsdp: WORLD_SIZE=", world,
                " needs MASTER_PORT (the port of rank 0's rendezvous store)");
  }
  // Under torchrun the agent already hosts a TCPStore on MASTER_PORT: every rank is a client.
  const char* agent = getenvOrNull("TORCHELASTIC_USE_AGENT_STORE");
  const bool agentStore = agent != nullptr && std::string(agent) == "True";
  std::string prefix = "fsdp_opt/";
  if (const char* restart = getenvOrNull("TORCHELASTIC_RESTART_COUNT")) {
    prefix += std::string(restart) + "/";
  }
  initLocked(st, rank, world, localRank, lr != nullptr, addr, port, timeoutFromEnv(), agentStore,
             prefix);
}

GroupState& ensureLocked() {
  GroupState& st = state();
  if (!st.initialized) initFromEnvLocked(st);
  return st;
}

std::string gatherHostname(const std::string& masterAddr) {
  if (isLoopback(masterAddr)) return "127.0.0.1";
  char buf[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] != '\0') return buf;
  return "127.0.0.1";
}

#ifdef FSDP_OPT_WITH_CUDA
// What chooses this rank's CUDA device. LOCAL_RANK and LOCAL_WORLD_SIZE count only when the
// group came from torchrun's environment; an explicit init names no local rank.
CudaDeviceEnv cudaDeviceEnvLocked(const GroupState& st) {
  CudaDeviceEnv env;
  if (const char* v = getenvOrNull("FSDP_OPT_CUDA_DEVICE")) env.override = v;
  if (st.localRankFromEnv) {
    env.localRank = st.info.localRank;
    if (const char* v = getenvOrNull("LOCAL_WORLD_SIZE")) {
      env.localWorldSize = static_cast<int>(parseIntEnv("LOCAL_WORLD_SIZE", v, 1, INT_MAX));
    }
  }
  return env;
}
#endif

}  // namespace

std::chrono::milliseconds timeoutFromEnv() {
  double seconds = kDefaultTimeoutSeconds;
  if (const char* v = getenvOrNull("FSDP_OPT_TIMEOUT_S")) {
    char* end = nullptr;
    errno = 0;
    seconds = std::strtod(v, &end);
    TORCH_CHECK(errno == 0 && end != v && *end == '\0' && std::isfinite(seconds) &&
                    seconds > 0 && seconds < 1e9,
                "fsdp: FSDP_OPT_TIMEOUT_S='", v, "' is not a positive number of seconds");
  }
  const auto ms = static_cast<int64_t>(std::ceil(seconds * 1000.0));
  return std::chrono::milliseconds(ms < 1 ? 1 : ms);
}

GroupInfo ensureGroup() {
  std::lock_guard<std::mutex> lock(groupMutex());
  return ensureLocked().info;
}

std::shared_ptr<CollectiveBackend> backendFor(const c10::Device& device,
                                              const std::string& context) {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  if (device.is_cpu()) {
    if (!st.cpuBackend) {
      TORCH_CHECK(st.store, context, ": no rendezvous store for world size ", st.info.world);
      GlooBackendOptions opts;
      opts.timeout = st.timeout;
      if (const char* ifn = getenvOrNull("GLOO_SOCKET_IFNAME")) {
        opts.interfaces = splitComma(ifn);
      }
      opts.hostname = gatherHostname(st.masterAddr);
      try {
        st.cpuBackend = makeGlooBackend(st.store, st.info.rank, st.info.world, opts);
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, context, ": creating the gloo backend failed: ",
                    e.what_without_backtrace());
      }
    }
    return st.cpuBackend;
  }
  if (device.is_cuda()) {
#ifdef FSDP_OPT_WITH_CUDA
    // One communicator per process group, on this rank's device (device_mapping.h).
    const int index = device.has_index() ? device.index() : 0;
    if (!st.cudaBackend) {
      // First thing of every creation attempt, on every rank, whatever fails below: the n-th
      // attempt of every rank then uses the same store key (communicator_id.h).
      const std::string key = nextCommunicatorIdKey();
      TORCH_CHECK(st.info.world == 1 || st.store, context, ": no rendezvous store for world size ",
                  st.info.world);
      CudaDeviceChoice choice;
      try {
        choice = chooseCudaDevice(cudaDeviceEnvLocked(st), index, c10::cuda::device_count());
      } catch (const c10::Error& e) {
        choice.error = e.what_without_backtrace();
      }
      if (!choice.error.empty()) {
        // The peers are about to wait for rank 0's id: tell them why there is none.
        if (st.info.rank == 0 && st.info.world > 1) {
          publishCommunicatorIdFailure(*st.store, key, "rank 0: " + choice.error);
        }
        TORCH_CHECK(false, context, ": ", choice.error);
      }
      NcclBackendOptions opts;
      opts.timeout = st.timeout.count() > 0 ? st.timeout : timeoutFromEnv();
      const char* blocking = getenvOrNull("FSDP_OPT_CUDA_BLOCKING_WAIT");
      opts.blockingWait = blocking != nullptr && std::string(blocking) != "0";
      opts.storeKey = key;
      try {
        st.cudaBackend = makeNcclBackend(st.store, st.info.rank, st.info.world, choice.device, opts);
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, context, ": creating the nccl backend failed: ",
                    e.what_without_backtrace());
      }
      st.cudaDevice = choice.device;
      st.cudaDeviceOrigin = choice.origin;
    }
    TORCH_CHECK(index == st.cudaDevice, context, ": parameters are on ", device.str(),
                " but this rank's NCCL communicator is on cuda:", st.cudaDevice, " (",
                st.cudaDeviceOrigin, "; one device per rank); move the model to cuda:",
                st.cudaDevice);
    return st.cudaBackend;
#else
    TORCH_CHECK(false, context, ": parameters are on ", device.str(),
                " but no CUDA backend is built into libfsdp_runtime (only gloo for CPU tensors; "
                "build with -DFSDP_OPT_ENABLE_CUDA=ON)");
#endif
  }
  TORCH_CHECK(false, context, ": no collective backend for tensors on ", device.str());
  return nullptr;
}

// What a rank whose file does not fit the process group publishes in place of its hash.
constexpr const char* kWrongFile = "wrong-file: ";

// The store key prefix of the next manifest exchange. Rounds keep keys of successive checks
// (another model loaded later) apart; every rank runs the same program, so the rounds line up.
std::string nextManifestRound(GroupState& st) {
  return "manifest/" + std::to_string(st.manifestRounds++) + "/";
}

void checkRank(int64_t rank, int64_t world, const std::string& manifestSha256) {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  if ((rank != st.info.rank || world != st.info.world) && st.info.world > 1) {
    // The peers wait for this rank's hash in the exchange below: tell them now, or a peer whose
    // own file is right would only learn it from the timeout. Best effort: the error below is
    // this rank's answer either way.
    const std::string note = std::string(kWrongFile) + "a file sharded as rank " +
                             std::to_string(rank) + " of world size " + std::to_string(world);
    try {
      st.store->set(nextManifestRound(st) + std::to_string(st.info.rank),
                    std::vector<uint8_t>(note.begin(), note.end()));
    } catch (const std::exception&) {
    }
  }
  TORCH_CHECK(rank == st.info.rank && world == st.info.world,
              "fsdp::check_rank: this model file is rank ", rank, " of world size ", world,
              ", but the process group is rank ", st.info.rank, " of world size ", st.info.world,
              " (a file sharded for world size ", world, " must run as rank", rank, ".pt on rank ",
              rank, " of ", world, " processes)");
  if (st.info.world == 1 || st.checkedManifests.count(manifestSha256) != 0) return;

  // Every rank publishes its file's manifest hash and compares it with all the others'.
  const std::string round = nextManifestRound(st);
  const std::vector<uint8_t> mine(manifestSha256.begin(), manifestSha256.end());
  std::vector<std::string> shas(static_cast<size_t>(st.info.world));
  try {
    st.store->set(round + std::to_string(st.info.rank), mine);
    for (int r = 0; r < st.info.world; ++r) {
      if (r == st.info.rank) {
        shas[static_cast<size_t>(r)] = manifestSha256;
        continue;
      }
      const std::vector<uint8_t> v = st.store->get(round + std::to_string(r));
      shas[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
    }
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "fsdp::check_rank: exchanging manifest hashes through the store failed "
                "within ", st.timeout.count() / 1000.0, " s; a peer may have died: ",
                e.what_without_backtrace());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "fsdp::check_rank: exchanging manifest hashes through the store failed "
                "within ", st.timeout.count() / 1000.0, " s; a peer may have died: ", e.what());
  }
  for (int r = 0; r < st.info.world; ++r) {
    const std::string& other = shas[static_cast<size_t>(r)];
    TORCH_CHECK(other.rfind(kWrongFile, 0) != 0, "fsdp::check_rank: rank ", r,
                " of this job (world size ", st.info.world, ") loaded ", other.substr(strlen(kWrongFile)),
                "; every rank must load its own rank{r}.pt from one fsdp-opt run for world size ",
                st.info.world);
    TORCH_CHECK(other == manifestSha256,
                "fsdp::check_rank: rank files come from different fsdp-opt runs: rank ",
                st.info.rank, " loaded a file with manifest sha256 '", manifestSha256,
                "', rank ", r, " one with '", other, "'");
  }
  st.checkedManifests.insert(manifestSha256);
}

}  // namespace detail

void initProcessGroup(int rank, int worldSize, const std::string& masterAddr, int masterPort,
                      std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(detail::groupMutex());
  detail::GroupState& st = detail::state();
  const auto t = timeout.count() > 0 ? timeout : detail::timeoutFromEnv();
  const std::string addr = masterAddr.empty() ? std::string("127.0.0.1") : masterAddr;
  if (st.initialized) {
    const bool same = st.info.rank == rank && st.info.world == worldSize &&
                      (worldSize == 1 || (st.masterAddr == addr && st.masterPort == masterPort));
    TORCH_CHECK(same, "fsdp::init_process_group: the process group is already initialised as rank ",
                st.info.rank, " of world size ", st.info.world, " (", st.masterAddr, ":",
                st.masterPort, "); call destroy_process_group first");
    return;
  }
  detail::initLocked(st, rank, worldSize, rank, /*localRankFromEnv=*/false, addr, masterPort, t,
                     /*agentStore=*/false, "fsdp_opt/");
}

void destroyProcessGroup() {
  std::shared_ptr<CollectiveBackend> backend;
  std::shared_ptr<CollectiveBackend> cudaBackend;
  c10::intrusive_ptr<c10d::Store> store;
  {
    std::lock_guard<std::mutex> lock(detail::groupMutex());
    detail::GroupState& st = detail::state();
    backend = std::move(st.cpuBackend);
    cudaBackend = std::move(st.cudaBackend);
    store = std::move(st.store);
    st = detail::GroupState();
  }
  // Destroyed outside the lock: Gloo joins its threads; NCCL finalizes its communicator.
  backend.reset();
  cudaBackend.reset();
  store.reset();
}

bool isProcessGroupInitialized() {
  std::lock_guard<std::mutex> lock(detail::groupMutex());
  return detail::state().initialized;
}

int rank() { return detail::ensureGroup().rank; }
int worldSize() { return detail::ensureGroup().world; }

std::chrono::milliseconds defaultTimeout() { return detail::timeoutFromEnv(); }

}  // namespace runtime
}  // namespace fsdp_opt
