// The envelope ahead of every collective and what a fingerprint mismatch raises. See envelope.h.
#include "envelope.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "errors.h"
#include "host_buffer_pool.h"
#include "process_group.h"
#include "stats.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// How long a rank that found a mismatch waits for the other side's description. Every rank
// found it at the same moment (all have all headers), so the other side's text is normally
// there within milliseconds; this only bounds a peer that dies in between.
constexpr std::chrono::milliseconds kDescriptionWait{5000};

// `tag`: the group's (GroupMembers), "" for the world; `rank`: the rank within it.
std::string storeKey(const char* what, uint64_t generation, const std::string& tag, uint64_t sequence,
                     int rank) {
  return std::string(what) + "/" + std::to_string(generation) + "/" + tag + std::to_string(sequence) +
         "/" + std::to_string(rank);
}

std::vector<fingerprint::Header> decodeAll(const at::Tensor& all, int world, int64_t stride) {
  std::vector<fingerprint::Header> headers;
  const auto* base = static_cast<const unsigned char*>(all.data_ptr());
  for (int r = 0; r < world; ++r) headers.push_back(fingerprint::decode(base + r * stride));
  return headers;
}

void checkHeaders(const std::vector<fingerprint::Header>& headers, int rank, const GroupMembers& members,
                  const fingerprint::Identity& mine, uint64_t sequence) {
  if (fingerprint::firstDivergentRank(headers) >= 0) raiseDivergence(headers, rank, members, mine, sequence);
}

// The envelope sizers of this process (fingerprint::EnvelopeSizer), one per group (its tag), each
// fed by that group's envelopes in issue order: envelopes are issued under the collective order
// and each is finished before the next is issued (collective_order.h), on whichever thread. Per
// group, because only the ranks of one group see its envelopes: a world envelope's size must not
// depend on what one shard group agreed. A new process group starts them afresh.
struct SizerState {
  std::mutex mutex;
  uint64_t generation = 0;
  std::map<std::string, fingerprint::EnvelopeSizer> sizers;
};

SizerState& sizerState() {
  static SizerState* s = new SizerState();  // leaked, like the order: the issuer thread uses it
  return *s;
}

int64_t nextEnvelopeBytes(const std::string& tag) {
  const uint64_t generation = groupStore().generation;
  SizerState& s = sizerState();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.generation != generation) {
    s.sizers.clear();
    s.generation = generation;
  }
  return s.sizers[tag].nextEnvelopeBytes();
}

// `agreed`: the header every rank of the group sent; null after a mismatch or a failed envelope.
void noteEnvelope(const std::string& tag, const fingerprint::Header* agreed) {
  SizerState& s = sizerState();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (agreed != nullptr) {
    s.sizers[tag].agreed(*agreed);
  } else {
    s.sizers[tag].reset();
  }
}

}  // namespace

Envelope::Envelope(std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
                   const fingerprint::Identity& identity, const at::Tensor& inlinePayload)
    : identity_(identity), device_(device), backend_(std::move(backend)) {
  FSDP_CHECK(!inlinePayload.defined() ||
                 (inlinePayload.device().is_cpu() && inlinePayload.is_contiguous() &&
                  inlinePayload.nbytes() == static_cast<size_t>(identity.payloadBytes) &&
                  identity.payloadBytes <= kEnvelopeInlineBytes),
             ErrorKind::kInternal, "fsdp: an envelope's inline payload must be a contiguous CPU "
             "buffer of at most ", kEnvelopeInlineBytes, " bytes");
  issue(inlinePayload.defined() ? &inlinePayload : nullptr, nullptr);
}

Envelope::Envelope(std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
                   const fingerprint::Identity& identity, const PayloadWriter& write)
    : identity_(identity), device_(device), backend_(std::move(backend)) {
  FSDP_CHECK(device.is_cpu() && identity.payloadBytes >= 0, ErrorKind::kInternal,
             "fsdp: an envelope carries host payloads only");
  issue(nullptr, &write);
}

void Envelope::issue(const at::Tensor* inlinePayload, const PayloadWriter* write) {
  rank_ = backend_->rank();
  world_ = backend_->size();
  members_ = backend_->members();
  sequence_ = nextCollectiveSequence();
  bytes_ = nextEnvelopeBytes(members_.tag);
  const int64_t payload = identity_.payloadBytes;
  const auto header = static_cast<int64_t>(fingerprint::kHeaderBytes);
  uint64_t capacity = 0;
  if (inlinePayload != nullptr) {
    inline_ = true;  // at most kEnvelopeInlineBytes: fits every envelope
    capacity = static_cast<uint64_t>(payload);
  } else if (write != nullptr) {
    capacity = fingerprint::EnvelopeSizer::capacityFor(payload);
    inline_ = header + payload <= bytes_;
  }
  const fingerprint::Header h = fingerprint::headerOf(
      identity_, sequence_, rank_, inline_ ? static_cast<uint64_t>(payload) : 0, capacity);
  // On the host the envelope is written straight into this rank's slot of the receive buffer,
  // which the backend sends from (a broadcast-based gather moves each slot where it lies).
  if (device_.is_cpu()) recv_ = pooledEmptyCpu({world_ * bytes_}, at::kByte);
  at::Tensor mine = device_.is_cpu() ? recv_.narrow(0, rank_ * bytes_, bytes_) : pooledEmptyCpu({bytes_}, at::kByte);
  auto* out = static_cast<unsigned char*>(mine.data_ptr());
  fingerprint::encode(h, out);
  int64_t used = header;
  if (inline_ && payload > 0) {
    if (write != nullptr) {
      (*write)(out + header);
    } else {
      std::memcpy(out + header, inlinePayload->data_ptr(), static_cast<size_t>(payload));
    }
    used += payload;
  }
  std::memset(out + used, 0, static_cast<size_t>(bytes_ - used));
  if (device_.is_cpu()) {
    send_ = mine;
  } else {
    send_ = mine.to(device_);
    recv_ = at::empty({world_ * bytes_}, send_.options());
  }
  pending_ = backend_->allGatherBytesAsync(send_, recv_);
  countBytesSent(members_.tag, bytes_ + (inline_ ? 0 : payload));
}

Envelope::~Envelope() = default;

void Envelope::finish(void* inlineOut) {
  if (pending_) {
    auto p = std::move(pending_);
    try {
      p->wait();
    } catch (...) {
      noteEnvelope(members_.tag, nullptr);
      throw;
    }
  }
  const at::Tensor all = recv_.is_cpu() ? recv_ : recv_.cpu();
  const std::vector<fingerprint::Header> headers = decodeAll(all, world_, bytes_);
  if (fingerprint::firstDivergentRank(headers) >= 0) {
    noteEnvelope(members_.tag, nullptr);  // every rank sees the same headers: every rank starts again
    raiseDivergence(headers, rank_, members_, identity_, sequence_);
  }
  noteEnvelope(members_.tag, &headers[static_cast<size_t>(rank_)]);
  if (inline_ && inlineOut != nullptr && identity_.payloadBytes > 0) {
    const auto* base = static_cast<const unsigned char*>(all.data_ptr());
    auto* out = static_cast<unsigned char*>(inlineOut);
    for (int r = 0; r < world_; ++r) {
      std::memcpy(out + r * identity_.payloadBytes,
                  base + r * bytes_ + fingerprint::kHeaderBytes,
                  static_cast<size_t>(identity_.payloadBytes));
    }
  }
  send_.reset();
  recv_.reset();
}

void exchangeHostEnvelope(const fingerprint::Identity& identity, const std::string& context, CollectiveGroup scope) {
  const RankInfo group = groupOf(scope);
  if (group.world == 1) return;
  if (glooBuilt()) {
    Envelope envelope(backendFor(c10::Device(c10::kCPU), context, scope), c10::Device(c10::kCPU),
                      identity, at::Tensor());
    envelope.finish();
    return;
  }
  // No host backend in this build: the headers go through the store. Each rank writes its own
  // and reads the others'; having read every rank's header of collective n, a rank knows every
  // rank is done reading n - 1, so it deletes its own key of n - 1 (the store stays small).
  const StoreAccess sa = groupStore();
  const GroupMembers members = membersOf(scope);
  const uint64_t sequence = nextCollectiveSequence();
  const fingerprint::Header mine = fingerprint::headerOf(identity, sequence, group.rank, 0);
  countBytesSent(members.tag, identity.payloadBytes);  // the payload's; the header goes to the store
  std::vector<uint8_t> bytes(fingerprint::kHeaderBytes);
  fingerprint::encode(mine, bytes.data());
  std::vector<fingerprint::Header> headers(static_cast<size_t>(group.world));
  const auto started = std::chrono::steady_clock::now();
  try {
    sa.store->set(storeKey("envelope", sa.generation, members.tag, sequence, group.rank), bytes);
    for (int r = 0; r < group.world; ++r) {
      if (r == group.rank) {
        headers[static_cast<size_t>(r)] = mine;
        continue;
      }
      const std::vector<uint8_t> v =
          sa.store->get(storeKey("envelope", sa.generation, members.tag, sequence, r));
      FSDP_CHECK(v.size() == fingerprint::kHeaderBytes, ErrorKind::kInternal, "fsdp: rank ", members.global(r),
                 "'s envelope in the store has ", v.size(), " bytes");
      headers[static_cast<size_t>(r)] = fingerprint::decode(v.data());
    }
    if (sequence > 1) {
      sa.store->deleteKey(storeKey("envelope", sa.generation, members.tag, sequence - 1, group.rank));
    }
  } catch (const KindedError&) {
    throw;
  } catch (const std::exception& e) {
    raise(waitFailureKind(started, sa.timeout),
          c10::str("exchanging collective fingerprints through the store failed: ",
                   describeException(e)));
  }
  checkHeaders(headers, group.rank, members, identity, sequence);
}

void raiseDivergence(const std::vector<fingerprint::Header>& headers, int rank, const GroupMembers& members,
                     const fingerprint::Identity& mine, uint64_t sequence) {
  const int other = fingerprint::firstDivergentRank(headers);
  const std::string mineText = fingerprint::describe(mine, sequence);
  StoreAccess sa;
  try {
    sa = groupStore();
    if (sa.store) {
      sa.store->set(storeKey("fingerprint", sa.generation, members.tag, sequence, rank),
                    std::vector<uint8_t>(mineText.begin(), mineText.end()));
    }
  } catch (const std::exception&) {
    // best effort: the peers fall back to what this rank's header says
  }
  auto textOf = [&](int r) -> std::string {
    if (r == rank) return mineText;
    const fingerprint::Header& h = headers[static_cast<size_t>(r)];
    if (sa.store) {
      try {
        const std::string key = storeKey("fingerprint", sa.generation, members.tag, h.sequence, r);
        sa.store->wait({key}, std::min(kDescriptionWait, sa.timeout));
        const std::vector<uint8_t> v = sa.store->get(key);
        return std::string(v.begin(), v.end());
      } catch (const std::exception&) {
      }
    }
    return fingerprint::describe(h);
  };
  const std::string a = textOf(0);
  const std::string b = textOf(other);
  // Rank 0 hosts the store: if it raised and its process exited at once, the others could not
  // read its description any more. So every rank says it has read what it needs, and rank 0
  // waits for that (briefly) before raising.
  if (sa.store) {
    try {
      sa.store->set(storeKey("fingerprint-read", sa.generation, members.tag, sequence, rank),
                    std::vector<uint8_t>{1});
      if (rank == 0) {
        std::vector<std::string> keys;
        for (int r = 1; r < static_cast<int>(headers.size()); ++r) {
          keys.push_back(storeKey("fingerprint-read", sa.generation, members.tag,
                                  headers[static_cast<size_t>(r)].sequence, r));
        }
        sa.store->wait(keys, std::min(kDescriptionWait, sa.timeout));
      }
    } catch (const std::exception&) {
    }
  }
  raise(ErrorKind::kDivergence, fingerprint::divergenceMessage(members.global(0), a, members.global(other), b));
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
