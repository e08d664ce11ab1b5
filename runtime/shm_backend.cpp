// CPU backend for a group whose ranks share one host: their byte collectives go through one
// shared-memory segment instead of Gloo's loopback TCP. docs/runtime.md, "The shared-memory
// transport".
//
// Why: on loopback, the kernel delivers a large send partly from a softirq that it may defer to
// ksoftirqd on the sender's CPU; while the sending rank computes on that CPU, the receiving rank
// waits for the scheduler's next tick (4 ms at HZ=250) with its own CPU idle. Measured on the
// 2-CPU CI machine (decode loop (f) of bench/decode_loops.py, W=2): about a third of the entry
// gathers took 3-9 ms instead of 0.5 ms. Here a rank copies its bytes into its own slot of the
// segment and every peer copies them out: no socket, no kernel thread, and no thread of the
// runtime's between the caller and the bytes.
//
// Protocol: a collective is a sequence of rounds, numbered alike on every rank (each rank issues
// the same collectives in the same order: the collective order and the fingerprint envelopes
// see to that). In round s, rank r
//   1. waits until every peer has finished reading round s-1 (done[p] >= s-1: r's slot is free),
//   2. writes its part (at most kSlotBytes) into its slot, its collective's signature beside it,
//      and publishes posted[r] = s,
//   3. for each peer p, waits for posted[p] >= s, checks p's signature against its own (ranks that
//      issued different collectives get an error, never each other's bytes) and copies out what
//      it needs, then publishes done[r] = s.
// Waiting spins briefly, then sleeps on a futex over the shared word, checking on every wake-up
// the group's timeout and whether the awaited peer's process still exists.
//
// Issuing a collective never waits for a peer (fsdp::all_gather_start must return before its peers
// start): it queues the collective and publishes its first round when this rank's slot is free.
// Waiting for one moves the queue forward in issue order, from whichever thread waits (ShmChannel).
//
// Opt-in (SPEC section 7 names Gloo for CPU tensors): used by a group, from its first CPU
// collective on, when every rank set FSDP_OPT_CPU_TRANSPORT=shm and can map the segment rank 0
// created (same host, same /dev/shm); otherwise the group uses Gloo (createHostBackend). Every
// rank takes part in that choice whatever it set, so all make the same one. The segment's name
// is unlinked as soon as every rank has answered, so nothing outlives the processes.
#include "collective_backend.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "environment.h"
#include "errors.h"
#include "stats.h"
#include "fsdp_opt/runtime/runtime.h"

namespace fsdp_opt {
namespace runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes a rank can publish per round. A larger collective takes several rounds; 4 MiB keeps a
// W=8 segment at 32 MiB, half of a container's default /dev/shm.
constexpr int64_t kSlotBytes = int64_t(4) << 20;
constexpr uint64_t kMagic = 0x66736470'73686d31ULL;  // "fsdpshm1"
// How long a waiter spins before it sleeps: the peer of a lockstep program is usually there
// within microseconds, and a sleeping waiter is woken by the scheduler, not by the peer.
constexpr auto kSpin = std::chrono::microseconds(50);
// How often a sleeping waiter looks at the clock and at the peer's process.
constexpr auto kSleepSlice = std::chrono::milliseconds(20);

struct alignas(64) RankControl {
  std::atomic<uint32_t> posted{0};     // last round whose part this rank published
  std::atomic<uint32_t> done{0};       // last round this rank finished reading
  std::atomic<uint64_t> signature{0};  // what the posted round belongs to (kind, sizes, root)
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory words must be lock-free to be shared between processes");

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint64_t token;  // rank 0's random number: a segment of another group cannot pass for this one
  int64_t world;
  int64_t slotBytes;
};

size_t segmentBytes(int world) {
  return sizeof(SegmentHeader) + sizeof(RankControl) * static_cast<size_t>(world) +
         static_cast<size_t>(kSlotBytes) * static_cast<size_t>(world);
}

bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// Bytes of round i when n bytes go `piece` bytes per round.
size_t pieceOf(int64_t i, int64_t n, int64_t piece) { return static_cast<size_t>(std::min(piece, n - i * piece)); }

// Whether process `pid` has exited: gone, or a zombie its parent has not reaped yet (a launcher
// may poll its children only now and then, and kill() succeeds on a zombie).
bool processExited(int64_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[512] = {0};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    const char* close = std::strrchr(buf, ')');  // the state follows the command name's ')'
    if (n > 0 && close != nullptr && close[1] == ' ') return close[2] == 'Z' || close[2] == 'X';
    return false;
  }
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void futexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds slice) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(slice.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(slice.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

class SharedSegment {
 public:
  SharedSegment(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~SharedSegment() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  RankControl* control(int r) const {
    return reinterpret_cast<RankControl*>(static_cast<char*>(base_) + sizeof(SegmentHeader)) + r;
  }
  uint8_t* slot(int r) const {
    const int64_t world = header()->world;
    return static_cast<uint8_t*>(base_) + sizeof(SegmentHeader) + sizeof(RankControl) * world +
           static_cast<size_t>(kSlotBytes) * static_cast<size_t>(r);
  }

 private:
  void* base_;
  size_t bytes_;
};

// What a round's signature hashes: ranks whose collectives differ in kind, size or root fail
// the check instead of reading each other's bytes.
uint64_t signatureOf(uint64_t kind, int64_t bytes, int64_t extra) {
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t v : {kind, static_cast<uint64_t>(bytes), static_cast<uint64_t>(extra)}) {
    h ^= v;
    h *= 1099511628211ULL;
  }
  return h | 1;  // never 0, the value of a rank that never posted
}

// One collective: `rounds` rounds, each writing this rank's part of round i into its slot and
// reading every peer's. It holds its tensors until it completed (the caller's PendingCollective
// may be dropped unwaited on an error path; the rounds it already posted still have readers).
struct ShmOp {
  uint64_t signature = 0;
  int64_t rounds = 0;
  std::function<void(int64_t round, uint8_t* slot)> write;
  std::function<void(int64_t round, int peer, const uint8_t* slot)> read;
  std::vector<at::Tensor> owners;
  int64_t next = 0;     // the round in progress
  bool posted = false;  // whether this rank's part of round `next` is published
  bool done = false;
};

class ShmChannel;

class ShmPending final : public PendingCollective {
 public:
  ShmPending(std::shared_ptr<ShmChannel> channel, std::shared_ptr<ShmOp> op)
      : channel_(std::move(channel)), op_(std::move(op)) {}
  void wait() override;

 private:
  std::shared_ptr<ShmChannel> channel_;  // the segment stays mapped while a collective may use it
  std::shared_ptr<ShmOp> op_;
};

// The segment and the queue of collectives in flight. Collectives are issued into the queue and
// complete in issue order (their rounds are numbered alike on every rank). Issuing publishes the
// first round's part when the peers have finished reading this rank's slot, and returns without
// waiting for any peer (fsdp::all_gather_start must not); waiting for a collective moves the
// queue forward, from whichever thread waits, until that collective is done.
class ShmChannel final : public std::enable_shared_from_this<ShmChannel> {
 public:
  ShmChannel(std::unique_ptr<SharedSegment> segment, int rank, int size, std::vector<int64_t> peerPids,
             bool peersVisible, std::chrono::milliseconds timeout)
      : segment_(std::move(segment)),
        rank_(rank),
        size_(size),
        peerPids_(std::move(peerPids)),
        peersVisible_(peersVisible),
        timeout_(timeout) {}

  // Queues `op`; publishes this rank's part of its first round when that needs no wait.
  std::unique_ptr<PendingCollective> issue(std::shared_ptr<ShmOp> op, const GroupMembers& members) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The backend's members, set once after it is made: copied when they change, not on every
    // collective (a string and a vector each time).
    if (members_.tag != members.tag || members_.ranks != members.ranks) members_ = members;
    throwIfBroken();
    if (op->rounds == 0) {
      op->done = true;
    } else {
      queue_.push_back(op);
      try {
        Blocker ignored;
        while (progress(&ignored)) {
        }
      } catch (const std::exception& e) {
        breakWith(e);
        throw;
      }
    }
    return std::make_unique<ShmPending>(shared_from_this(), std::move(op));
  }

  // Moves the queue forward until `op` is done (PendingCollective::wait).
  void complete(const std::shared_ptr<ShmOp>& op) {
    const auto started = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!op->done) {
      throwIfBroken();
      Blocker blocker;
      try {
        if (progress(&blocker)) continue;
        // Nothing moved: sleep on the word that holds us up, without the lock, so that other
        // threads may issue meanwhile.
        lock.unlock();
        awaitChange(blocker, started);
        lock.lock();
      } catch (const std::exception& e) {
        if (!lock.owns_lock()) lock.lock();
        breakWith(e);
        throw;
      }
    }
  }

 private:
  // The word a stalled round waits on, the value it needs, and whose it is.
  struct Blocker {
    std::atomic<uint32_t>* word = nullptr;
    uint32_t target = 0;
    int peer = -1;
    const char* what = "";
  };

  // One step of the queue's first collective without waiting: publish this rank's part of the
  // current round when the peers are done with the previous one, or read the peers' parts when
  // they are all published. False (and what it waits for in `blocker`) when it cannot move.
  bool progress(Blocker* blocker) {
    if (queue_.empty()) return false;
    ShmOp& op = *queue_.front();
    const uint32_t s = round_ + 1;  // the current round's number
    RankControl* mine = segment_->control(rank_);
    if (!op.posted) {
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        std::atomic<uint32_t>* done = &segment_->control(p)->done;
        if (!reached(done->load(std::memory_order_acquire), s - 1)) {
          *blocker = Blocker{done, s - 1, p, "finish reading the previous round"};
          return false;
        }
      }
      op.write(op.next, segment_->slot(rank_));
      mine->signature.store(op.signature, std::memory_order_relaxed);
      mine->posted.store(s, std::memory_order_release);
      futexWakeAll(&mine->posted);
      op.posted = true;
      return true;
    }
    for (int k = 1; k < size_; ++k) {
      const int p = (rank_ + k) % size_;
      std::atomic<uint32_t>* posted = &segment_->control(p)->posted;
      if (!reached(posted->load(std::memory_order_acquire), s)) {
        *blocker = Blocker{posted, s, p, "publish its part"};
        return false;
      }
    }
    for (int k = 1; k < size_; ++k) {
      const int p = (rank_ + k) % size_;  // peers in a different order on every rank
      const uint64_t theirs = segment_->control(p)->signature.load(std::memory_order_relaxed);
      FSDP_CHECK(theirs == op.signature, ErrorKind::kDivergence, "shared-memory transport: rank ",
                 members_.global(p), " issued a different collective (kind, size or root) in round ", s,
                 " than rank ", members_.global(rank_));
      op.read(op.next, p, segment_->slot(p));
    }
    mine->done.store(s, std::memory_order_release);
    futexWakeAll(&mine->done);
    round_ = s;
    detail::updateStats([](Stats& st) { st.shm_rounds += 1; });
    op.posted = false;
    if (++op.next == op.rounds) {
      op.done = true;
      op.write = nullptr;
      op.read = nullptr;
      op.owners.clear();
      queue_.pop_front();
    }
    return true;
  }

  // Returns once `blocker`'s word changed (or after a while); throws when its peer's process is
  // gone or the collective has waited for the whole timeout.
  void awaitChange(const Blocker& blocker, Clock::time_point started) {
    const auto spinUntil = Clock::now() + kSpin;
    uint32_t v = blocker.word->load(std::memory_order_acquire);
    while (Clock::now() < spinUntil) {
      if (reached(v, blocker.target)) return;
      v = blocker.word->load(std::memory_order_acquire);
    }
    if (reached(v, blocker.target)) return;
    futexWait(blocker.word, v, kSleepSlice);
    if (reached(blocker.word->load(std::memory_order_acquire), blocker.target)) return;
    const int64_t pid = peerPids_[static_cast<size_t>(blocker.peer)];
    if (peersVisible_ && processExited(pid)) {
      detail::raise(ErrorKind::kPeerLost,
                    c10::str("shared-memory transport: rank ", members_.global(blocker.peer), " (pid ", pid,
                             ") exited before it did ", blocker.what, " (round ", blocker.target, ")"));
    }
    if (Clock::now() - started >= timeout_) {
      detail::raise(ErrorKind::kTimeout,
                    c10::str("shared-memory transport: rank ", members_.global(blocker.peer), " did not ",
                             blocker.what, " (round ", blocker.target, ") within ",
                             timeout_.count() / 1000.0, " s"));
    }
  }

  // After a failure the ranks' round numbers no longer line up: every later collective fails.
  void breakWith(const std::exception& e) {
    if (broken_.empty()) broken_ = detail::describeException(e);
  }

  void throwIfBroken() const {
    FSDP_CHECK(broken_.empty(), ErrorKind::kPeerLost,
               "the shared-memory transport failed in an earlier collective: ", broken_);
  }

  std::unique_ptr<SharedSegment> segment_;
  int rank_;
  int size_;
  std::vector<int64_t> peerPids_;
  bool peersVisible_;  // same PID namespace: a peer's pid says whether it still runs
  std::chrono::milliseconds timeout_;
  GroupMembers members_;  // for messages: global ranks
  std::mutex mutex_;
  std::deque<std::shared_ptr<ShmOp>> queue_;
  uint32_t round_ = 0;  // the last round this rank completed
  std::string broken_;
};

void ShmPending::wait() { channel_->complete(op_); }

class ShmBackend final : public CollectiveBackend {
 public:
  ShmBackend(std::shared_ptr<ShmChannel> channel, int rank, int size, const Options& options)
      : CollectiveBackend(options), channel_(std::move(channel)), rank_(rank), size_(size) {}

  std::string name() const override { return "shm"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PendingCollective> allGatherBytesAsync(const at::Tensor& input,
                                                         const at::Tensor& output) override {
    checkAllGatherArgs(input, output);
    requireCpu(input);
    const int64_t n = input.numel();
    const auto* in = static_cast<const uint8_t*>(input.data_ptr());
    auto* out = static_cast<uint8_t*>(output.data_ptr());
    if (out + rank_ * n != in) std::memcpy(out + rank_ * n, in, static_cast<size_t>(n));
    auto op = std::make_shared<ShmOp>();
    op->signature = signatureOf(1, n, 0);
    op->rounds = (n + kSlotBytes - 1) / kSlotBytes;
    op->write = [in, n](int64_t i, uint8_t* slot) {
      std::memcpy(slot, in + i * kSlotBytes, pieceOf(i, n, kSlotBytes));
    };
    op->read = [out, n](int64_t i, int p, const uint8_t* slot) {
      std::memcpy(out + p * n + i * kSlotBytes, slot, pieceOf(i, n, kSlotBytes));
    };
    op->owners = {input, output};
    return channel_->issue(std::move(op), members());
  }

  std::unique_ptr<PendingCollective> allToAllBytesAsync(const at::Tensor& input, const at::Tensor& output) override {
    for (const at::Tensor* t : {&input, &output}) requireCpu(*t);
    checkAllToAllArgs(input, output);
    const int64_t n = input.numel() / size_;
    const auto* in = static_cast<const uint8_t*>(input.data_ptr());
    auto* out = static_cast<uint8_t*>(output.data_ptr());
    std::memmove(out + rank_ * n, in + rank_ * n, static_cast<size_t>(n));
    // Each round carries, for every destination, the next piece of its chunk: the slot holds
    // size() pieces of `piece` bytes, and rank p reads piece p of every peer's slot.
    const int64_t piece = kSlotBytes / size_;
    const int me = rank_, world = size_;
    auto op = std::make_shared<ShmOp>();
    op->signature = signatureOf(2, n, 0);
    op->rounds = (n + piece - 1) / piece;
    op->write = [in, n, piece, me, world](int64_t i, uint8_t* slot) {
      for (int p = 0; p < world; ++p) {
        if (p != me) std::memcpy(slot + p * piece, in + p * n + i * piece, pieceOf(i, n, piece));
      }
    };
    op->read = [out, n, piece, me](int64_t i, int p, const uint8_t* slot) {
      std::memcpy(out + p * n + i * piece, slot + me * piece, pieceOf(i, n, piece));
    };
    op->owners = {input, output};
    return channel_->issue(std::move(op), members());
  }

  std::unique_ptr<PendingCollective> broadcastBytesAsync(const at::Tensor& buffer, int root) override {
    checkBroadcastArgs(buffer, root);
    const int64_t n = buffer.numel();
    auto* data = static_cast<uint8_t*>(buffer.data_ptr());
    const bool isRoot = rank_ == root;
    auto op = std::make_shared<ShmOp>();
    op->signature = signatureOf(3, n, root);
    op->rounds = (n + kSlotBytes - 1) / kSlotBytes;
    op->write = [data, n, isRoot](int64_t i, uint8_t* slot) {
      if (isRoot) std::memcpy(slot, data + i * kSlotBytes, pieceOf(i, n, kSlotBytes));
    };
    op->read = [data, n, root](int64_t i, int p, const uint8_t* slot) {
      if (p == root) std::memcpy(data + i * kSlotBytes, slot, pieceOf(i, n, kSlotBytes));
    };
    op->owners = {buffer};
    return channel_->issue(std::move(op), members());
  }

 private:
  void requireCpu(const at::Tensor& t) const {
    if (!t.device().is_cpu()) unsupported("tensors on " + t.device().str() + " (it handles CPU tensors only)");
  }

  std::shared_ptr<ShmChannel> channel_;
  int rank_;
  int size_;
};


std::string pidNamespace() {
  char buf[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string randomHex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

std::vector<uint8_t> bytesOf(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string stringOf(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Rank 0: a new segment, initialised; its name and token as "NAME TOKEN", or "" when it could not
// make one (the group then uses Gloo).
std::string createSegment(int world, std::unique_ptr<SharedSegment>* out) {
  const std::string name = "/fsdp_opt." + std::to_string(getpid()) + "." + randomHex();
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return "";
  const size_t bytes = segmentBytes(world);
  void* base = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return "";
  }
  std::random_device rd;
  const uint64_t token = (static_cast<uint64_t>(rd()) << 32) | rd();
  new (base) SegmentHeader{kMagic, token, world, kSlotBytes};
  for (int r = 0; r < world; ++r) {
    new (reinterpret_cast<RankControl*>(static_cast<char*>(base) + sizeof(SegmentHeader)) + r) RankControl();
  }
  *out = std::make_unique<SharedSegment>(base, bytes);
  return name + " " + std::to_string(token);
}

// Another rank: rank 0's segment, when this process can map it and it is the one announced.
std::unique_ptr<SharedSegment> openSegment(const std::string& announced, int world) {
  const size_t space = announced.find(' ');
  if (space == std::string::npos) return nullptr;
  const std::string name = announced.substr(0, space);
  const uint64_t token = std::stoull(announced.substr(space + 1));
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return nullptr;
  const size_t bytes = segmentBytes(world);
  struct stat st {};
  void* base = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (base == MAP_FAILED) return nullptr;
  auto segment = std::make_unique<SharedSegment>(base, bytes);
  const SegmentHeader* h = segment->header();
  if (h->magic != kMagic || h->token != token || h->world != world || h->slotBytes != kSlotBytes) return nullptr;
  return segment;
}

// FSDP_OPT_CPU_TRANSPORT: "gloo" (the default, SPEC section 7) or "shm".
bool shmRequested() {
  const char* v = detail::envValue("FSDP_OPT_CPU_TRANSPORT");
  if (v == nullptr) return false;
  const std::string s(v);
  FSDP_CHECK(s == "gloo" || s == "shm", ErrorKind::kBadInput,
             "FSDP_OPT_CPU_TRANSPORT must be 'gloo' or 'shm', not '", s, "'");
  return s == "shm";
}

// Every rank answers whether it can use rank 0's segment; the group uses it only when all can.
// Store keys: "segment" (rank 0's announcement), "answer/R" ("1 PID PIDNS" or "0").
std::unique_ptr<CollectiveBackend> tryShmBackend(const BackendRendezvous& group, const std::string& context) {
  auto store = c10::make_intrusive<c10d::PrefixStore>("fsdp_opt/shm/", group.store);
  const bool wantShm = shmRequested();
  std::unique_ptr<SharedSegment> segment;
  std::vector<std::string> answers(static_cast<size_t>(group.world));
  const auto started = Clock::now();
  try {
    std::string announced;
    if (group.rank == 0) {
      if (wantShm) announced = createSegment(group.world, &segment);
      store->set("segment", bytesOf(announced));
    } else {
      announced = stringOf(store->get("segment"));
      if (wantShm && !announced.empty()) segment = openSegment(announced, group.world);
    }
    const std::string mine =
        segment ? "1 " + std::to_string(getpid()) + " " + pidNamespace() : std::string("0");
    store->set("answer/" + std::to_string(group.rank), bytesOf(mine));
    for (int r = 0; r < group.world; ++r) answers[static_cast<size_t>(r)] = stringOf(store->get("answer/" + std::to_string(r)));
    if (group.rank == 0 && !announced.empty()) shm_unlink(announced.substr(0, announced.find(' ')).c_str());
  } catch (const std::exception& e) {
    detail::raise(detail::waitFailureKind(started, group.timeout),
                  c10::str(context, ": choosing the CPU transport through the store failed: ",
                           detail::describeException(e)));
  }
  std::vector<int64_t> pids(static_cast<size_t>(group.world), 0);
  bool visible = true;
  const std::string ns = pidNamespace();
  for (int r = 0; r < group.world; ++r) {
    const std::string& a = answers[static_cast<size_t>(r)];
    if (a.rfind("1 ", 0) != 0) return nullptr;
    const size_t space = a.find(' ', 2);
    pids[static_cast<size_t>(r)] = std::stoll(a.substr(2, space - 2));
    if (space == std::string::npos || a.substr(space + 1) != ns || ns.empty()) visible = false;
  }
  CollectiveBackend::Options options;
  options.timeout = group.timeout;
  auto channel = std::make_shared<ShmChannel>(std::move(segment), group.rank, group.world, std::move(pids),
                                              visible, group.timeout);
  return std::make_unique<ShmBackend>(std::move(channel), group.rank, group.world, options);
}

}  // namespace

std::unique_ptr<CollectiveBackend> createHostBackend(const BackendRendezvous& group, const c10::Device& tensors,
                                                     const std::string& context) {
  FSDP_CHECK(group.store, ErrorKind::kInternal, context, ": no rendezvous store for world size ", group.world);
  if (auto shm = tryShmBackend(group, context)) return shm;
  return createGlooBackend(group, tensors, context);
}

}  // namespace runtime
}  // namespace fsdp_opt
