#include "process_group.h"

#include <unistd.h>

#include <algorithm>
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
#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

constexpr double kDefaultTimeoutSeconds = 300.0;

struct GroupState {
  bool initialized = false;
  RankInfo info;
  std::string masterAddr;
  int masterPort = 0;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;  // null when world == 1
  // One backend per device type and group (its tag, "" for the world), created at the first
  // collective that needs it (data_path.h).
  std::map<std::pair<c10::DeviceType, std::string>, std::shared_ptr<CollectiveBackend>> backends;
  // The shard group size of the rank files checked last (check_rank); 0 until then: the world.
  int shardGroupSize = 0;
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
  st.info = RankInfo{rank, world, localRank};
  st.masterAddr = addr;
  st.masterPort = port;
  st.timeout = timeout;
  st.store = std::move(store);
  st.backends.clear();
  st.shardGroupSize = 0;
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

// Shard groups are consecutive ranks, as torchrun numbers a node's ranks: group g holds ranks
// [g*S, (g+1)*S), and its rank j is global rank g*S + j. Replica group j holds the ranks j,
// j + S, j + 2S, ...: one of each shard group, all holding shard j.
GroupMembers membersLocked(const GroupState& st, CollectiveGroup scope) {
  const int world = st.info.world;
  const int s = st.shardGroupSize > 0 ? st.shardGroupSize : world;
  const int rank = st.info.rank;
  GroupMembers m;
  if (scope == CollectiveGroup::kWorld || (scope == CollectiveGroup::kShardGroup && s == world)) {
    for (int r = 0; r < world; ++r) m.ranks.push_back(r);
    return m;
  }
  if (scope == CollectiveGroup::kShardGroup) {
    const int g = rank / s;
    m.tag = "shard" + std::to_string(s) + "." + std::to_string(g) + "/";
    for (int j = 0; j < s; ++j) m.ranks.push_back(g * s + j);
  } else {
    const int j = rank % s;
    m.tag = "replica" + std::to_string(s) + "." + std::to_string(j) + "/";
    for (int r = j; r < world; r += s) m.ranks.push_back(r);
  }
  return m;
}

int positionOf(const GroupMembers& m, int rank) {
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    if (m.ranks[i] == rank) return static_cast<int>(i);
  }
  return 0;
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

RankInfo ensureGroup() {
  std::lock_guard<std::mutex> lock(groupMutex());
  return ensureLocked().info;
}

RankInfo groupOf(CollectiveGroup scope) {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  const GroupMembers m = membersLocked(st, scope);
  return RankInfo{positionOf(m, st.info.rank), static_cast<int>(m.ranks.size()), st.info.localRank};
}

GroupMembers membersOf(CollectiveGroup scope) {
  std::lock_guard<std::mutex> lock(groupMutex());
  return membersLocked(ensureLocked(), scope);
}

std::shared_ptr<CollectiveBackend> backendFor(const c10::Device& device,
                                              const std::string& context, CollectiveGroup scope) {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  const DevicePath* path = devicePathFor(device);
  if (path == nullptr) throwNoDevicePath(device, context);
  GroupMembers members = membersLocked(st, scope);
  std::shared_ptr<CollectiveBackend>& backend = st.backends[{device.type(), members.tag}];
  if (!backend) {
    BackendRendezvous group;
    // A smaller group meets under its own tag: its rendezvous keys (Gloo's, NCCL's id) cannot
    // meet another group's.
    group.store = st.store;
    if (!members.tag.empty() && st.store) group.store = c10::make_intrusive<c10d::PrefixStore>(members.tag, st.store);
    group.rank = positionOf(members, st.info.rank);
    group.world = static_cast<int>(members.ranks.size());
    if (st.localRankFromEnv) group.localRank = st.info.localRank;
    group.masterAddr = st.masterAddr;
    group.timeout = st.timeout;
    backend = path->createBackend(group, device, context);
    backend->setMembers(std::move(members));
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

// "2x2": R replicas of shard groups of S ranks.
std::string meshText(int64_t world, int64_t shardGroupSize) {
  return std::to_string(world / shardGroupSize) + "x" + std::to_string(shardGroupSize);
}

void checkRank(int64_t rank, int64_t world, int64_t shardGroupSize, const std::string& manifestSha256) {
  std::lock_guard<std::mutex> lock(groupMutex());
  GroupState& st = ensureLocked();
  const int64_t s = shardGroupSize > 0 ? shardGroupSize : world;
  FSDP_CHECK(world >= 1 && s >= 1 && s <= world && world % s == 0, ErrorKind::kBadInput,
             "fsdp::check_rank: this model file has shard group size ", s, " for world size ", world,
             ", which it does not divide");
  // What keeps this rank from running its file, and what its peers are told about it.
  std::string refusal;
  std::string note;
  if (rank != st.info.rank || world != st.info.world) {
    refusal = c10::str("fsdp::check_rank: this model file is rank ", rank, " of world size ", world,
                       ", but the process group is rank ", st.info.rank, " of world size ", st.info.world,
                       " (a file sharded for world size ", world, " must run as rank", rank, ".pt on rank ",
                       rank, " of ", world, " processes)");
    note = "a file sharded as rank " + std::to_string(rank) + " of world size " + std::to_string(world);
  } else if (const char* expected = envValue("FSDP_OPT_SHARD_GROUP_SIZE")) {
    const int64_t want = envInt("FSDP_OPT_SHARD_GROUP_SIZE", 1, INT_MAX);
    if (want != s) {
      refusal = c10::str("fsdp::check_rank: this model file shards over groups of ", s, " ranks (mesh ",
                         meshText(world, s), "), but FSDP_OPT_SHARD_GROUP_SIZE=", expected,
                         " expects groups of ", want, "; make the rank files with fsdp-opt --shard-group-size=",
                         want);
      note = "a file sharded for mesh " + meshText(world, s) + " where FSDP_OPT_SHARD_GROUP_SIZE=" + expected;
    }
  }
  if (!refusal.empty()) {
    if (st.info.world > 1) {
      // The peers wait for this rank's hash in the exchange below: tell them now, or a peer
      // whose own file is right would only learn it from the timeout. Best effort: the error
      // below is this rank's answer either way.
      const std::string published = std::string(kWrongFile) + note;
      try {
        st.store->set(nextManifestRound(st) + std::to_string(st.info.rank),
                      std::vector<uint8_t>(published.begin(), published.end()));
      } catch (const std::exception&) {
      }
    }
    raise(ErrorKind::kBadInput, refusal);
  }
  const auto adopt = [&] { st.shardGroupSize = static_cast<int>(s); };
  if (st.info.world == 1 || st.checkedManifests.count(manifestSha256) != 0) {
    adopt();
    return;
  }

  // Every rank publishes its file's manifest hash and mesh and compares them with all the others'.
  const std::string round = nextManifestRound(st);
  const std::string published = manifestSha256 + " " + meshText(world, s);
  const std::vector<uint8_t> mine(published.begin(), published.end());
  std::vector<std::string> shas(static_cast<size_t>(st.info.world));
  const auto started = std::chrono::steady_clock::now();
  try {
    st.store->set(round + std::to_string(st.info.rank), mine);
    for (int r = 0; r < st.info.world; ++r) {
      if (r == st.info.rank) {
        shas[static_cast<size_t>(r)] = published;
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
  // Rank 0 hosts the store (unless torchrun's agent does). Returning at once, it could exit
  // while the others are still reading: before the error below when the files disagree, or,
  // when they agree, after an entry method that issues no collective (a helper that returns a
  // setting), and the others would fail with a closed connection instead. So every rank says
  // it has read everything, and rank 0 waits for that, briefly (best effort: a peer that died
  // meanwhile is the next collective's to report). Once per manifest, at its first check.
  try {
    st.store->set(round + "read/" + std::to_string(st.info.rank), std::vector<uint8_t>{1});
    if (st.info.rank == 0) {
      std::vector<std::string> keys;
      for (int r = 1; r < st.info.world; ++r) {
        // A rank that published a note instead of its hash raised at once and reads nothing.
        if (shas[static_cast<size_t>(r)].rfind(kWrongFile, 0) != 0) keys.push_back(round + "read/" + std::to_string(r));
      }
      if (!keys.empty()) st.store->wait(keys, std::min(std::chrono::milliseconds(5000), st.timeout));
    }
  } catch (const std::exception&) {
  }
  for (int r = 0; r < st.info.world; ++r) {
    const std::string& other = shas[static_cast<size_t>(r)];
    FSDP_CHECK(other.rfind(kWrongFile, 0) != 0, ErrorKind::kPeerFailed, "fsdp::check_rank: rank ",
               r, " of this job (world size ", st.info.world, ") loaded ",
               other.substr(strlen(kWrongFile)),
               "; every rank must load its own rank{r}.pt from one fsdp-opt run for world size ",
               st.info.world);
    const size_t space = other.find(' ');
    const std::string otherSha = other.substr(0, space);
    const std::string otherMesh = space == std::string::npos ? "" : other.substr(space + 1);
    FSDP_CHECK(otherMesh.empty() || otherMesh == meshText(world, s), ErrorKind::kMismatch,
               "fsdp::check_rank: rank files for different meshes: rank ", st.info.rank,
               " loaded a file sharded for mesh ", meshText(world, s), " (replicas x shard group size), rank ", r,
               " one for mesh ", otherMesh, "; every rank must load its rank{r}.pt from one fsdp-opt run");
    FSDP_CHECK(otherSha == manifestSha256, ErrorKind::kMismatch,
               "fsdp::check_rank: rank files come from different fsdp-opt runs: rank ",
               st.info.rank, " loaded a file with manifest sha256 '", manifestSha256, "', rank ", r,
               " one with '", otherSha, "'");
  }
  st.checkedManifests.insert(manifestSha256);
  adopt();
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
  std::map<std::pair<c10::DeviceType, std::string>, std::shared_ptr<CollectiveBackend>> backends;
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
