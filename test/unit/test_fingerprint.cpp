// Unit tests of the collective fingerprint format (runtime/fingerprint.h): what a header holds,
// that it survives encoding, what counts as "the same collective", which two ranks the error
// names, and the texts the error is made of.
#include "../../runtime/fingerprint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace fp = fsdp_opt::runtime::fingerprint;

namespace {

fp::Identity gatherOf(const std::string& unit, int64_t bytes = 70656) {
  fp::Identity id;
  id.kind = fp::Kind::kGather;
  id.unit = unit;
  id.payloadBytes = bytes;
  id.numTensors = 2;
  id.layoutHash = fp::LayoutHash().add("packed").add(100).add(704).add("float32").value();
  id.dtypes = "float32";
  return id;
}

fp::Identity identityOf(fp::Kind kind, const std::string& unit, int64_t bytes, int64_t tensors,
                        const std::string& dtypes = "") {
  fp::Identity id;
  id.kind = kind;
  id.unit = unit;
  id.payloadBytes = bytes;
  id.numTensors = tensors;
  id.dtypes = dtypes;
  return id;
}

}  // namespace

TEST(Fingerprint, HeaderRoundTripsThroughItsBytes) {
  fp::Header h = fp::headerOf(gatherOf("blocks.3"), 12, 1, 0);
  unsigned char bytes[fp::kHeaderBytes];
  std::memset(bytes, 0xAB, sizeof(bytes));
  fp::encode(h, bytes);
  const fp::Header back = fp::decode(bytes);
  EXPECT_TRUE(fp::sameCollective(h, back));
  EXPECT_EQ(back.magic, fp::kMagic);
  EXPECT_EQ(back.version, fp::kVersion);
  EXPECT_EQ(back.rank, 1u);
  EXPECT_EQ(back.sequence, 12u);
  EXPECT_EQ(back.payloadBytes, 70656u);
  EXPECT_EQ(back.numTensors, 2u);
  EXPECT_EQ(back.kind, static_cast<uint16_t>(fp::Kind::kGather));
  EXPECT_EQ(back.unitHash, fp::fnv1a("blocks.3", 8));
  EXPECT_EQ(back.inlineCapacity, 0u);
  EXPECT_EQ(fp::decode(bytes).inlineCapacity, 0u);
  fp::Header withCapacity = fp::headerOf(gatherOf("blocks.3"), 12, 1, 0, 70656);
  fp::encode(withCapacity, bytes);
  EXPECT_EQ(fp::decode(bytes).inlineCapacity, 70656u);
  EXPECT_FALSE(fp::sameCollective(h, withCapacity)) << "the capacity sizes later envelopes: compared";
}

TEST(Fingerprint, FieldsSitAtTheirDocumentedOffsets) {
  // The offsets are the wire format between ranks, documented in fingerprint.h.
  fp::Header h = fp::headerOf(gatherOf("a", 0x1122), 0x0102030405060708ull, 7, 0);
  unsigned char b[fp::kHeaderBytes];
  fp::encode(h, b);
  uint32_t magic;
  uint64_t sequence, payload;
  uint32_t rank;
  std::memcpy(&magic, b + 0, 4);
  std::memcpy(&rank, b + 8, 4);
  std::memcpy(&sequence, b + 16, 8);
  std::memcpy(&payload, b + 24, 8);
  EXPECT_EQ(magic, fp::kMagic);
  EXPECT_EQ(rank, 7u);
  EXPECT_EQ(sequence, 0x0102030405060708ull);
  EXPECT_EQ(payload, 0x1122u);
  EXPECT_EQ(std::memcmp(b, "FSFP", 4), 0) << "the magic reads FSFP on a little-endian host";
}

TEST(Fingerprint, TheSenderRankIsNotPartOfTheComparison) {
  EXPECT_TRUE(fp::sameCollective(fp::headerOf(gatherOf("a"), 3, 0, 0),
                                 fp::headerOf(gatherOf("a"), 3, 5, 0)));
}

TEST(Fingerprint, EveryOtherFieldTellsCollectivesApart) {
  const fp::Header base = fp::headerOf(gatherOf("a"), 3, 0, 0);
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(gatherOf("b"), 3, 1, 0))) << "unit";
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(gatherOf("a"), 4, 1, 0))) << "sequence";
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(gatherOf("a", 70657), 3, 1, 0))) << "bytes";
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(gatherOf("a"), 3, 1, 70656))) << "inline";
  fp::Identity otherLayout = gatherOf("a");
  otherLayout.layoutHash = fp::LayoutHash().add("packed").add(100).add(704).add("int32").value();
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(otherLayout, 3, 1, 0))) << "dtype";
  fp::Identity agreement = gatherOf("a");
  agreement.kind = fp::Kind::kAgreement;
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(agreement, 3, 1, 0))) << "kind";
  fp::Identity fewer = gatherOf("a");
  fewer.numTensors = 1;
  EXPECT_FALSE(fp::sameCollective(base, fp::headerOf(fewer, 3, 1, 0))) << "tensors";
  fp::Header corrupt = base;
  corrupt.magic ^= 1;
  EXPECT_FALSE(fp::sameCollective(base, corrupt)) << "magic";
}

TEST(Fingerprint, LayoutHashSeparatesItsParts) {
  // "ab" + "c" and "a" + "bc" are different layouts; so are the same rows in another order.
  EXPECT_NE(fp::LayoutHash().add("ab").add("c").value(), fp::LayoutHash().add("a").add("bc").value());
  EXPECT_NE(fp::LayoutHash().add(1).add(2).value(), fp::LayoutHash().add(2).add(1).value());
  EXPECT_EQ(fp::LayoutHash().add(1).add("x").value(), fp::LayoutHash().add(1).add("x").value());
}

TEST(Fingerprint, FirstDivergentRankIsTheLowestThatDiffersFromRankZero) {
  std::vector<fp::Header> all;
  for (int r = 0; r < 4; ++r) all.push_back(fp::headerOf(gatherOf("a"), 9, r, 0));
  EXPECT_EQ(fp::firstDivergentRank(all), -1);
  all[3] = fp::headerOf(gatherOf("b"), 9, 3, 0);
  EXPECT_EQ(fp::firstDivergentRank(all), 3);
  all[2] = fp::headerOf(gatherOf("c"), 9, 2, 0);
  EXPECT_EQ(fp::firstDivergentRank(all), 2);
  // Rank 0 alone differs: every other rank is "first divergent" from it; the lowest is named.
  std::vector<fp::Header> lone(3, fp::headerOf(gatherOf("a"), 9, 0, 0));
  lone[0] = fp::headerOf(gatherOf("z"), 9, 0, 0);
  EXPECT_EQ(fp::firstDivergentRank(lone), 1);
}

namespace {

// What a rank feeds its sizer after an envelope of `id` whose headers all matched.
void agree(fp::EnvelopeSizer& s, const fp::Identity& id, uint64_t sequence) {
  s.agreed(fp::headerOf(id, sequence, 0, 0, fp::EnvelopeSizer::capacityFor(id.payloadBytes)));
}

}  // namespace

TEST(EnvelopeSizer, StartsAtTheSmallestEnvelope) {
  fp::EnvelopeSizer s;
  EXPECT_EQ(s.nextEnvelopeBytes(), 512);
  agree(s, gatherOf("a", 100000), 1);
  EXPECT_EQ(s.nextEnvelopeBytes(), 512) << "nothing has followed 'a' yet";
}

TEST(EnvelopeSizer, SizesForWhatFollowedTheSameCollectiveBefore) {
  // generate's steady state: a root gather then an agreement, call after call.
  fp::EnvelopeSizer s;
  const fp::Identity root = gatherOf(".", 136448);
  const fp::Identity flag = identityOf(fp::Kind::kAgreement, "fsdp::rank_any", 8, 1);
  uint64_t seq = 0;
  agree(s, root, ++seq);
  agree(s, flag, ++seq);
  agree(s, root, ++seq);  // learnt: after the agreement comes the root's 136448 bytes
  EXPECT_EQ(s.nextEnvelopeBytes(), 512) << "after the root came the 8-byte flag";
  agree(s, flag, ++seq);
  EXPECT_EQ(s.nextEnvelopeBytes(), 136448 + 64) << "header + the root's payload, a multiple of 16";
}

TEST(EnvelopeSizer, TakesTheLargerOfTheLastTwoFollowers) {
  // After an agreement comes either the first block (inside a decoding loop) or, once the loop
  // ended, the next call's root: both fit.
  fp::EnvelopeSizer s;
  const fp::Identity flag = identityOf(fp::Kind::kAgreement, "fsdp::rank_any", 8, 1);
  uint64_t seq = 0;
  agree(s, flag, ++seq);
  agree(s, gatherOf("blocks.0", 1000), ++seq);
  agree(s, flag, ++seq);
  agree(s, gatherOf(".", 3000), ++seq);
  agree(s, flag, ++seq);
  EXPECT_EQ(s.nextEnvelopeBytes(), 3072);
  agree(s, gatherOf("blocks.0", 1000), ++seq);
  agree(s, flag, ++seq);
  EXPECT_EQ(s.nextEnvelopeBytes(), 3072) << "the root is still one of the last two";
  agree(s, gatherOf("blocks.0", 1000), ++seq);
  agree(s, flag, ++seq);
  EXPECT_EQ(s.nextEnvelopeBytes(), 1072) << "the root is three followers ago now";
}

TEST(EnvelopeSizer, StaysWithinItsBoundsAndForgetsOnReset) {
  fp::EnvelopeSizer s;
  const fp::Identity flag = identityOf(fp::Kind::kAgreement, "fsdp::rank_any", 8, 1);
  EXPECT_EQ(fp::EnvelopeSizer::capacityFor(fp::EnvelopeSizer::kMaxBytes), 0u)
      << "a payload that cannot fit in the largest envelope goes on its own";
  EXPECT_EQ(fp::EnvelopeSizer::capacityFor(fp::EnvelopeSizer::kMaxBytes - 64),
            static_cast<uint64_t>(fp::EnvelopeSizer::kMaxBytes - 64));
  agree(s, flag, 1);
  agree(s, gatherOf("big", int64_t(64) << 20), 2);
  agree(s, flag, 3);
  EXPECT_EQ(s.nextEnvelopeBytes(), 512) << "64 MiB has no inline capacity";
  agree(s, gatherOf("a", 5000), 4);
  agree(s, flag, 5);
  EXPECT_EQ(s.nextEnvelopeBytes(), 5072);
  s.reset();
  EXPECT_EQ(s.nextEnvelopeBytes(), 512);
  agree(s, flag, 6);
  EXPECT_EQ(s.nextEnvelopeBytes(), 512) << "reset forgets what followed";
}

TEST(Fingerprint, FormatBytes) {
  EXPECT_EQ(fp::formatBytes(0), "0 bytes");
  EXPECT_EQ(fp::formatBytes(1), "1 byte");
  EXPECT_EQ(fp::formatBytes(1023), "1023 bytes");
  EXPECT_EQ(fp::formatBytes(1024), "1 KiB");
  EXPECT_EQ(fp::formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(fp::formatBytes(70656), "69 KiB");
  EXPECT_EQ(fp::formatBytes(13 * 1024 * 1024 + 1), "13 MiB");
  EXPECT_EQ(fp::formatBytes(int64_t(3) << 30), "3 GiB");
}

TEST(Fingerprint, DescriptionsNameWhatARankDoes) {
  EXPECT_EQ(fp::describe(gatherOf("blocks.3"), 12),
            "gathers unit 'blocks.3' (#12: 2 parameters, 69 KiB per rank, float32)");
  EXPECT_EQ(fp::describe(gatherOf("a, b"), 1),
            "gathers units 'a, b' (#1: 2 parameters, 69 KiB per rank, float32)");
  fp::Identity agreement;
  agreement.kind = fp::Kind::kAgreement;
  agreement.unit = "fsdp::rank_any";
  agreement.payloadBytes = 8;
  EXPECT_EQ(fp::describe(agreement, 5), "agrees whether any rank goes on (fsdp::rank_any) (#5)");
  EXPECT_EQ(fp::describe(identityOf(fp::Kind::kBroadcast, "module states from rank 0", 1 << 20, 1), 2),
            "broadcasts module states from rank 0 (#2: 1 tensor, 1 MiB per rank)");
  EXPECT_EQ(fp::describe(identityOf(fp::Kind::kGradients, "unit 'blocks.1'", 3 << 10, 4, "float32"), 7),
            "reduces the gradients of unit 'blocks.1' (#7: 4 tensors, 3 KiB per rank, float32)");
}

TEST(Fingerprint, AHeaderAloneStillSaysWhatItCan) {
  const std::string text = fp::describe(fp::headerOf(gatherOf("a"), 12, 1, 0));
  EXPECT_NE(text.find("gathers"), std::string::npos) << text;
  EXPECT_NE(text.find("#12"), std::string::npos) << text;
  EXPECT_NE(text.find("69 KiB"), std::string::npos) << text;
  fp::Header foreign = fp::headerOf(gatherOf("a"), 12, 1, 0);
  foreign.version = 99;
  EXPECT_NE(fp::describe(foreign).find("another version"), std::string::npos);
}

TEST(Fingerprint, TheMessageNamesBothSides) {
  const std::string m = fp::divergenceMessage(0, fp::describe(gatherOf("a"), 12), 1,
                                              fp::describe(gatherOf("b"), 12));
  EXPECT_EQ(m.rfind("ranks issue different collectives: rank 0 gathers unit 'a' (#12: 2 parameters, "
                    "69 KiB per rank, float32) while rank 1 gathers unit 'b' (#12: 2 parameters, "
                    "69 KiB per rank, float32); ",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("rank-uniform-control-flow"), std::string::npos);
  EXPECT_NE(m.find("Ranks that take different paths"), std::string::npos);
}
