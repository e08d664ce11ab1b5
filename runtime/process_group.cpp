#include "process_group.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "data_path.h"
#include "environment.h"
#include "errors.h"
#include "fsdp_opt/runtime.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

constexpr double kDefaultTimeoutSeconds = 300.0;

struct GroupState {
  bool initialized = false;
  GroupInfo info;
  std::string masterAddr;
  int masterPort = 0;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;  // null when world == 1
  // One backend per device type, created at the first gather that needs it (data_path.h).
  std::map<c10::DeviceType, std::shared_ptr<CollectiveBackend>> backends;
  bool localRankFromEnv = false;  // LOCAL_RANK was set: it names this rank's CUDA device
  std::set<std::string> checkedManifests;
  int64_t manifestRounds = 0;
  std::map<std::string, int64_t> storeExchangeRounds;  // per topic (exchangeThroughStore)
  uint64_t collectiveSequence = 0;  // the last collective's number (fingerprints)
  uint64_t generation = 0;
};

// Groups initialised by this process so far (GroupState::generation).
uint64_t g_generations = 0;

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
  FSDP_CHECK(world >= 1, ErrorKind::kBadInput, "fsdp: world size must be >= 1, got ", world);
  FSDP_CHECK(rank >= 0 && rank < world, ErrorKind::kBadInput, "fsdp: rank ", rank,
             " is out of range for world size ", world);
  c10::intrusive_ptr<c10d::Store> store;
  if (world > 1) {
    FSDP_CHECK(port > 0 && port <= 65535, ErrorKind::kBadInput,
               "fsdp: a process group of world size ", world,
               " needs a master port (MASTER_PORT), got ", port);
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = (rank == 0) && !agentStore;
    opts.numWorkers = static_cast<std::size_t>(world);
    opts.waitWorkers = !agentStore;
    opts.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> tcp;
    const auto started = std::chrono::steady_clock::now();
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    } catch (const std::exception& e) {
      raise(waitFailureKind(started, timeout),
            c10::str("fsdp: rendezvous at ", addr, ":", port, " (rank ", rank, " of ", world,
                     ") failed within ", timeout.count() / 1000.0,
                     " s; a peer may have died or not started: ", describeException(e)));
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
  st.backends.clear();
  st.localRankFromEnv = localRankFromEnv;
  st.checkedManifests.clear();
  st.manifestRounds = 0;
  st.storeExchangeRounds.clear();
  st.collectiveSequence = 0;
  st.generation = ++g_generations;
}

void initFromEnvLocked(GroupState& st) {
  int world = 1;
  int rank = 0;
  if (envValue("WORLD_SIZE") != nullptr) world = static_cast<int>(envInt("WORLD_SIZE", 1, INT_MAX));
  if (envValue("RANK") != nullptr) {
    rank = static_cast<int>(envInt("RANK", 0, INT_MAX));
  } else {
    FSDP_CHECK(world == 1, ErrorKind::kBadInput, "fsdp: WORLD_SIZE=", world,
               " is set but RANK is not");
  }
  FSDP_CHECK(rank < world, ErrorKind::kBadInput, "fsdp: RANK=", rank,
             " is out of range for WORLD_SIZE=", world);
  int localRank = rank;
  const bool localRankFromEnv = envValue("LOCAL_RANK") != nullptr;
  if (localRankFromEnv) localRank = static_cast<int>(envInt("LOCAL_RANK", 0, INT_MAX));
  std::string addr = "127.0.0.1";
  if (const char* a = envValue("MASTER_ADDR")) addr = a;
  int port = 0;
  if (envValue("MASTER_PORT") != nullptr) {
    port = static_cast<int>(envInt("MASTER_PORT", 1, 65535));
  } else {
    FSDP_CHECK(world == 1, ErrorKind::kBadInput, "fsdp: WORLD_SIZE=", world,
               " needs MASTER_PORT (the port of rank 0's rendezvous store)");
  }
  // Under torchrun the agent already hosts a TCPStore on MASTER_PORT: every rank is a client.
  const char* agent = envValue("TORCHELASTIC_USE_AGENT_STORE");
  const bool agentStore = agent != nullptr && std::string(agent) == "True";
  std::string prefix = "fsdp_opt/";
  if (const char* restart = envValue("TORCHELASTIC_RESTART_COUNT")) {
    prefix += std::string(restart) + "/";
  }
  initLocked(st, rank, world, localRank, localRankFromEnv, addr, port, timeoutFromEnv(), agentStore,
             prefix);
}

GroupState& ensureLocked() {
  GroupState& st = state();
  if (!st.initialized) initFromEnvLocked(st);
  return st;
}

}  // namespace

std::chrono::milliseconds timeoutFromEnv() {
  double seconds = kDefaultTimeoutSeconds;
  if (const char* v = envValue("FSDP_OPT_TIMEOUT_S")) {
    char* end = nullptr;
    errno = 0;
    seconds = std::strtod(v, &end);
    FSDP_CHECK(errno == 0 && end != v && *end == '\0' && std::isfinite(seconds) && seconds > 0 &&
                   seconds < 1e9,
               ErrorKind::kBadInput, "fsdp: FSDP_OPT_TIMEOUT_S='", v,
               "' is not a positive number of seconds");
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
  const DevicePath* path = devicePathFor(device);
  if (path == nullptr) throwNoDevicePath(device, context);
  std::shared_ptr<CollectiveBackend>& backend = st.backends[device.type()];
  if (!backend) {
    BackendGroup group;
    group.store = st.store;
    group.rank = st.info.rank;
    group.world = st.info.world;
    if (st.localRankFromEnv) group.localRank = st.info.localRank;
    group.masterAddr = st.masterAddr;
    group.timeout = st.timeout;
    backend = path->createBackend(group, device, context);
  }
  backend->checkTensorDevice(device, context);
  return backend;
}

uint64_t nextCollectiveSequence() {
  std::lock_guard<std::mutex> lock(groupMutex());
  return ++ensureLocked().collectiveSequence;
}

StoreAccess groupStore() {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  return StoreAccess{st.store, st.generation, st.timeout, st.info.rank, st.info.world};
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
  FSDP_CHECK(rank == st.info.rank && world == st.info.world, ErrorKind::kBadInput,
             "fsdp::check_rank: this model file is rank ", rank, " of world size ", world,
             ", but the process group is rank ", st.info.rank, " of world size ", st.info.world,
             " (a file sharded for world size ", world, " must run as rank", rank, ".pt on rank ",
             rank, " of ", world, " processes)");
  if (st.info.world == 1 || st.checkedManifests.count(manifestSha256) != 0) return;

  // Every rank publishes its file's manifest hash and compares it with all the others'.
  const std::string round = nextManifestRound(st);
  const std::vector<uint8_t> mine(manifestSha256.begin(), manifestSha256.end());
  std::vector<std::string> shas(static_cast<size_t>(st.info.world));
  const auto started = std::chrono::steady_clock::now();
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
  } catch (const std::exception& e) {
    raise(
        waitFailureKind(started, st.timeout),
        c10::str("fsdp::check_rank: exchanging manifest hashes through the store failed "
                 "within ",
                 st.timeout.count() / 1000.0, " s; a peer may have died: ", describeException(e)));
  }
  for (int r = 0; r < st.info.world; ++r) {
    const std::string& other = shas[static_cast<size_t>(r)];
    FSDP_CHECK(other.rfind(kWrongFile, 0) != 0, ErrorKind::kPeerFailed, "fsdp::check_rank: rank ",
               r, " of this job (world size ", st.info.world, ") loaded ",
               other.substr(strlen(kWrongFile)),
               "; every rank must load its own rank{r}.pt from one fsdp-opt run for world size ",
               st.info.world);
    FSDP_CHECK(other == manifestSha256, ErrorKind::kMismatch,
               "fsdp::check_rank: rank files come from different fsdp-opt runs: rank ",
               st.info.rank, " loaded a file with manifest sha256 '", manifestSha256, "', rank ", r,
               " one with '", other, "'");
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
    FSDP_CHECK(same, ErrorKind::kBadInput,
               "fsdp::init_process_group: the process group is already initialised as rank ",
               st.info.rank, " of world size ", st.info.world, " (", st.masterAddr, ":",
               st.masterPort, "); call destroy_process_group first");
    return;
  }
  detail::initLocked(st, rank, worldSize, rank, /*localRankFromEnv=*/false, addr, masterPort, t,
                     /*agentStore=*/false, "fsdp_opt/");
}

void destroyProcessGroup() {
  std::map<c10::DeviceType, std::shared_ptr<CollectiveBackend>> backends;
  c10::intrusive_ptr<c10d::Store> store;
  {
    std::lock_guard<std::mutex> lock(detail::groupMutex());
    detail::GroupState& st = detail::state();
    backends = std::move(st.backends);
    store = std::move(st.store);
    st = detail::GroupState();
  }
  // Destroyed outside the lock: Gloo joins its threads; NCCL finalizes its communicator.
  backends.clear();
  store.reset();
}

std::vector<std::string> exchangeThroughStore(const std::string& topic, const std::string& mine) {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{0};
  {
    std::lock_guard<std::mutex> lock(detail::groupMutex());
    detail::GroupState& st = detail::ensureLocked();
    if (st.info.world == 1) return {mine};
    // Rounds per topic: every rank running the same program exchanges the same topics in the
    // same order, so the n-th exchange of a topic meets the peers' n-th.
    prefix = "exchange/" + topic + "/" + std::to_string(st.storeExchangeRounds[topic]++) + "/";
    store = st.store;
    rank = st.info.rank;
    world = st.info.world;
    timeout = st.timeout;
  }
  std::vector<std::string> all(static_cast<size_t>(world));
  const auto started = std::chrono::steady_clock::now();
  try {
    store->set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int r = 0; r < world; ++r) {
      if (r == rank) {
        all[static_cast<size_t>(r)] = mine;
        continue;
      }
      const std::vector<uint8_t> v = store->get(prefix + std::to_string(r));
      all[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    detail::raise(detail::waitFailureKind(started, timeout),
                  c10::str("fsdp: exchanging '", topic, "' through the store failed within ",
                           timeout.count() / 1000.0, " s; a peer may have died or not reached it: ",
                           detail::describeException(e)));
  }
  return all;
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
