#include "fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace fsdp_opt {
namespace runtime {
namespace fingerprint {
namespace {

constexpr uint64_t kFnvPrime = 1099511628211ull;

template <typename T>
void put(unsigned char* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof(T));
}

template <typename T>
T get(const unsigned char* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

const char* kindVerb(uint16_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kGather:
      return "gathers";
    case Kind::kAgreement:
      return "agrees whether any rank goes on (fsdp::rank_any)";
    case Kind::kBroadcast:
      return "broadcasts";
    case Kind::kGradients:
      return "reduces gradients";
  }
  return "issues an unknown kind of collective";
}

}  // namespace

uint64_t fnv1a(const void* bytes, size_t size) {
  uint64_t h = 14695981039346656037ull;
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

LayoutHash& LayoutHash::add(int64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash_ = (hash_ ^ static_cast<unsigned char>(static_cast<uint64_t>(value) >> (8 * i))) * kFnvPrime;
  }
  return *this;
}

LayoutHash& LayoutHash::add(const std::string& text) {
  add(static_cast<int64_t>(text.size()));  // "ab" + "c" must not hash as "a" + "bc"
  for (unsigned char c : text) hash_ = (hash_ ^ c) * kFnvPrime;
  return *this;
}

Header headerOf(const Identity& identity, uint64_t sequence, int rank, uint64_t inlineBytes,
                uint64_t inlineCapacity) {
  Header h;
  h.kind = static_cast<uint16_t>(identity.kind);
  h.rank = static_cast<uint32_t>(rank);
  h.numTensors = static_cast<uint32_t>(identity.numTensors);
  h.sequence = sequence;
  h.payloadBytes = static_cast<uint64_t>(identity.payloadBytes);
  h.unitHash = fnv1a(identity.unit.data(), identity.unit.size());
  h.layoutHash = identity.layoutHash;
  h.inlineBytes = inlineBytes;
  h.inlineCapacity = inlineCapacity;
  return h;
}

void encode(const Header& h, void* out) {
  auto* o = static_cast<unsigned char*>(out);
  std::memset(o, 0, kHeaderBytes);
  put(o, 0, h.magic);
  put(o, 4, h.version);
  put(o, 6, h.kind);
  put(o, 8, h.rank);
  put(o, 12, h.numTensors);
  put(o, 16, h.sequence);
  put(o, 24, h.payloadBytes);
  put(o, 32, h.unitHash);
  put(o, 40, h.layoutHash);
  put(o, 48, h.inlineBytes);
  put(o, 56, h.inlineCapacity);
}

Header decode(const void* in) {
  const auto* i = static_cast<const unsigned char*>(in);
  Header h;
  h.magic = get<uint32_t>(i, 0);
  h.version = get<uint16_t>(i, 4);
  h.kind = get<uint16_t>(i, 6);
  h.rank = get<uint32_t>(i, 8);
  h.numTensors = get<uint32_t>(i, 12);
  h.sequence = get<uint64_t>(i, 16);
  h.payloadBytes = get<uint64_t>(i, 24);
  h.unitHash = get<uint64_t>(i, 32);
  h.layoutHash = get<uint64_t>(i, 40);
  h.inlineBytes = get<uint64_t>(i, 48);
  h.inlineCapacity = get<uint64_t>(i, 56);
  return h;
}

bool sameCollective(const Header& a, const Header& b) {
  return a.magic == b.magic && a.version == b.version && a.kind == b.kind &&
         a.numTensors == b.numTensors && a.sequence == b.sequence &&
         a.payloadBytes == b.payloadBytes && a.unitHash == b.unitHash &&
         a.layoutHash == b.layoutHash && a.inlineBytes == b.inlineBytes &&
         a.inlineCapacity == b.inlineCapacity;
}

int firstDivergentRank(const std::vector<Header>& headers) {
  for (size_t r = 1; r < headers.size(); ++r) {
    if (!sameCollective(headers[0], headers[r])) return static_cast<int>(r);
  }
  return -1;
}

int64_t EnvelopeSizer::nextEnvelopeBytes() const {
  uint64_t capacity = 0;
  if (hasPrevious_) {
    auto it = after_.find(previous_);
    if (it != after_.end()) capacity = std::max(it->second.last, it->second.before);
  }
  const uint64_t bytes = (kHeaderBytes + capacity + 15) / 16 * 16;
  return std::min<int64_t>(kMaxBytes, std::max<int64_t>(kMinBytes, static_cast<int64_t>(bytes)));
}

uint64_t EnvelopeSizer::capacityFor(int64_t payloadBytes) {
  return payloadBytes > 0 && payloadBytes <= kMaxBytes - static_cast<int64_t>(kHeaderBytes)
             ? static_cast<uint64_t>(payloadBytes)
             : 0;
}

uint64_t EnvelopeSizer::keyOf(const Header& h) {
  // What the collective is, not its number, sender or how it travelled this time.
  const uint64_t fields[] = {h.kind, h.numTensors, h.payloadBytes, h.unitHash, h.layoutHash,
                             h.inlineCapacity};
  return fnv1a(fields, sizeof(fields));
}

void EnvelopeSizer::agreed(const Header& h) {
  if (hasPrevious_) {
    Seen& seen = after_[previous_];
    seen.before = seen.last;
    seen.last = h.inlineCapacity;
  }
  previous_ = keyOf(h);
  hasPrevious_ = true;
}

void EnvelopeSizer::reset() {
  hasPrevious_ = false;
  previous_ = 0;
  after_.clear();
}

std::string formatBytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  // One decimal below 10 ("1.5 MiB"), none above ("69 KiB"); no trailing ".0".
  if (v < 10.0 && static_cast<int64_t>(v * 10.0 + 0.5) % 10 != 0) {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, units[u]);
  }
  return buf;
}

std::string describe(const Identity& id, uint64_t sequence) {
  std::ostringstream os;
  const char* noun = id.kind == Kind::kGather ? "parameter" : "tensor";
  switch (id.kind) {
    case Kind::kGather:
      os << "gathers " << (id.unit.find(", ") != std::string::npos ? "units" : "unit") << " '"
         << id.unit << "'";
      break;
    case Kind::kAgreement:
      os << kindVerb(static_cast<uint16_t>(id.kind));
      break;
    case Kind::kBroadcast:
      os << "broadcasts " << id.unit;
      break;
    case Kind::kGradients:
      os << "reduces the gradients of " << id.unit;
      break;
  }
  os << " (#" << sequence;
  if (id.kind != Kind::kAgreement) {
    os << ": " << id.numTensors << " " << noun << (id.numTensors == 1 ? "" : "s") << ", "
       << formatBytes(id.payloadBytes) << " per rank";
    if (!id.dtypes.empty()) os << ", " << id.dtypes;
  }
  os << ")";
  return os.str();
}

std::string describe(const Header& h) {
  std::ostringstream os;
  if (h.magic != kMagic || h.version != kVersion) {
    os << "sends a header this runtime cannot read (format " << h.magic << "/" << h.version
       << "; a libfsdp_runtime of another version?)";
    return os.str();
  }
  char hash[24];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(h.unitHash));
  os << kindVerb(h.kind);
  if (static_cast<Kind>(h.kind) != Kind::kAgreement) os << " something with name hash " << hash;
  os << " (#" << h.sequence;
  if (static_cast<Kind>(h.kind) != Kind::kAgreement) {
    os << ": " << h.numTensors << " tensors, " << formatBytes(static_cast<int64_t>(h.payloadBytes))
       << " per rank";
  }
  os << "; it did not say more in time)";
  return os.str();
}

std::string divergenceMessage(int rankA, const std::string& whatA, int rankB,
                              const std::string& whatB) {
  std::ostringstream os;
  os << "ranks issue different collectives: rank " << rankA << " " << whatA << " while rank "
     << rankB << " " << whatB
     << "; every rank must issue the same collectives in the same order (a branch or loop whose "
        "collectives depend on each rank's data needs the rank-uniform-control-flow pass; every "
        "rank must call the same entry methods: README, \"Ranks that take different paths\")";
  return os.str();
}

}  // namespace fingerprint
}  // namespace runtime
}  // namespace fsdp_opt
