// Collective fingerprints (SPEC section 11): what a collective is, in a fixed 64-byte header that
// every rank sends ahead of it, so that ranks about to issue different collectives find out before
// any payload moves, and one error can name what each side was doing.
//
// Why a header exchanged on its own (the envelope, envelope.h) rather than one prepended to the
// payload: the header would only be read after the collective, and a collective whose sizes differ
// between ranks never gets there. Gloo aborts the process whose receive buffer is the smaller one
// (`enforce fail at gloo/transport/tcp/pair.cc: op.preamble.length <= op.nbytes`, std::terminate
// on its I/O thread) and lets the other return "successfully" with a partial, mixed buffer;
// NCCL's behaviour is undefined. So every collective is preceded by an envelope of a size every
// rank knows (EnvelopeSizer) that carries this header (and the payload itself when it fits, so
// small collectives such as fsdp::rank_any stay one collective); only when every rank's header equals
// this rank's is the payload's own collective issued. docs/runtime.md, "Collective fingerprints".
//
// Torch-free: the format, its comparison and the messages are unit-tested on their own
// (test/unit/test_fingerprint.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace fsdp_opt {
namespace runtime {
namespace fingerprint {

/// What kind of collective a header announces.
enum class Kind : uint16_t {
  kGather = 1,     // fsdp::all_gather / all_gather_start of one unit (or of merged units)
  kAgreement = 2,  // fsdp::rank_any
  kBroadcast = 3,  // module states from one rank (fsdp_opt::transform with sync_module_states)
  kGradients = 4,  // backward: a unit's gradient all-to-all, a replicated gradient's all-gather
};

/// The identity of one collective, as this rank sees it. Two ranks must issue collectives of
/// equal identity (and sequence number) in the same order.
struct Identity {
  Kind kind = Kind::kGather;
  /// The unit ("blocks.3"; merged gathers list their units, "a, b"), or what else the
  /// collective is for; part of the fingerprint through its hash.
  std::string unit;
  /// Bytes each rank sends.
  int64_t payloadBytes = 0;
  /// Parameters (or tensors) the payload holds.
  int64_t numTensors = 0;
  /// Hash of the payload's layout: every tensor's rows, row bytes and dtype, and how the backend
  /// lays them out (LayoutHash).
  uint64_t layoutHash = 0;
  /// For messages only: the dtypes in the payload, "float32" or "float32+int64".
  std::string dtypes;
};

/// Accumulates Identity::layoutHash (FNV-1a over the values in order).
class LayoutHash {
 public:
  LayoutHash& add(int64_t value);
  LayoutHash& add(const std::string& text);
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

/// 64-bit FNV-1a of `bytes`.
uint64_t fnv1a(const void* bytes, size_t size);

constexpr size_t kHeaderBytes = 64;
constexpr uint32_t kMagic = 0x50465346u;  // "FSFP" in little-endian bytes
constexpr uint16_t kVersion = 2;

/// The header as sent: fields at fixed offsets in the host's byte order (little-endian wherever
/// torch runs; the ranks of a job share one byte order, as Gloo and NCCL assume too).
///   0 magic u32 | 4 version u16 | 6 kind u16 | 8 rank u32 | 12 tensors u32 | 16 sequence u64 |
///   24 payload bytes u64 | 32 unit hash u64 | 40 layout hash u64 | 48 inline bytes u64 |
///   56 inline capacity u64
struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = 0;
  uint32_t rank = 0;           // the sender (not part of the comparison)
  uint32_t numTensors = 0;
  uint64_t sequence = 0;       // this process's collective number, from 1
  uint64_t payloadBytes = 0;
  uint64_t unitHash = 0;
  uint64_t layoutHash = 0;
  uint64_t inlineBytes = 0;    // payload bytes the envelope itself carries (0 or payloadBytes)
  // Payload bytes this collective could carry in an envelope large enough (payloadBytes for a
  // host payload of at most EnvelopeSizer's maximum, else 0): what EnvelopeSizer learns.
  uint64_t inlineCapacity = 0;
};

/// The header this rank sends for collective number `sequence` of `identity`.
Header headerOf(const Identity& identity, uint64_t sequence, int rank, uint64_t inlineBytes,
                uint64_t inlineCapacity = 0);

void encode(const Header& header, void* out);  // writes kHeaderBytes bytes
Header decode(const void* in);

/// Whether `a` and `b` announce the same collective (everything but the sender's rank).
bool sameCollective(const Header& a, const Header& b);

/// The lowest rank whose header announces another collective than rank 0's; -1 when all agree.
/// Every rank computes it from the same headers, so every rank names the same two sides.
int firstDivergentRank(const std::vector<Header>& headers);

/// How big the next envelope is (docs/runtime.md, "Envelopes sized by what came before"). An
/// envelope's size must be the same on every rank without being exchanged (Gloo aborts on
/// different sizes), and a payload that fits in its envelope needs no collective of its own. So
/// the size follows the collectives every rank agreed on so far, which every rank has seen
/// alike: after collective X, the envelope is sized for the inline capacity of what followed X
/// the last two times (the larger), at least kMinBytes. A program that repeats its collectives
/// (a decoding loop, one forward after another) then sends each payload inside its envelope:
/// one collective instead of two, with the fingerprint checked before any of it is unpacked.
/// Every rank must feed it every agreed header in issue order and reset() it on a mismatch.
class EnvelopeSizer {
 public:
  static constexpr int64_t kMinBytes = 512;
  /// No envelope grows past this: a larger payload goes in its own collective(s), which the
  /// Gloo backend splits over its threads.
  static constexpr int64_t kMaxBytes = int64_t(1) << 20;

  /// Bytes of the next envelope: a multiple of 16 in [kMinBytes, kMaxBytes].
  int64_t nextEnvelopeBytes() const;
  /// What a payload of `payloadBytes` announces as its capacity when it can ride inline.
  static uint64_t capacityFor(int64_t payloadBytes);
  /// Every rank's header of the last envelope matched; `agreed` is one of them.
  void agreed(const Header& agreed);
  /// A mismatch, a failed envelope or a new group: start again from kMinBytes.
  void reset();

 private:
  struct Seen {
    uint64_t last = 0;
    uint64_t before = 0;
  };
  static uint64_t keyOf(const Header& h);
  bool hasPrevious_ = false;
  uint64_t previous_ = 0;
  std::unordered_map<uint64_t, Seen> after_;  // collective key -> capacities of what followed it
};

/// "69 KiB", "1.5 MiB", "12 bytes".
std::string formatBytes(int64_t bytes);

/// What a rank does at collective `sequence`, for the error: "gathers unit 'a' (#12: 2
/// parameters, 69 KiB per rank, float32)". Exchanged as text on a mismatch (a peer's hash cannot
/// name its unit).
std::string describe(const Identity& identity, uint64_t sequence);
/// The same from a peer's header alone, when its description could not be fetched.
std::string describe(const Header& header);

/// The one error every rank raises when ranks issue different collectives; `a`/`b` are two ranks
/// and what each does (describe()).
std::string divergenceMessage(int rankA, const std::string& whatA, int rankB,
                              const std::string& whatB);

}  // namespace fingerprint
}  // namespace runtime
}  // namespace fsdp_opt
