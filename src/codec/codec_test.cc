#include "codec/codec.h"

#include <cstring>
#include <random>

#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::StatusIs;

std::string Sample(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7) % 13 + (i % 1000 == 0 ? 100 : 0));
  return s;
}

class CodecTest : public ::testing::TestWithParam<Codec> {};

std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// What a payload says of its own size (an lz4 block's walked sequences, a
// zstd frame's header) agrees with what it decodes to, and a header that
// says otherwise is refused without decompressing.
TEST_P(CodecTest, DeclaredRawSizeIsCheckedWithoutDecompressing) {
  Compressor compressor;
  for (const std::string& raw : {Sample(1), Sample(1000), Sample(1 << 20), Random(70000, 7),
                                 std::string(3 << 20, '\0'), std::string(100, 'a')}) {
    std::string packed;
    ASSERT_OK(compressor.Compress(GetParam(), 3, raw, &packed));
    EXPECT_OK(CheckDeclaredRawSize(GetParam(), packed, raw.size()));
    ASSERT_OK_AND_ASSIGN(auto out, DecompressAligned(GetParam(), packed, raw.size()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(out.get()) % 64, 0u);
    EXPECT_EQ(std::string(out.get(), raw.size()), raw);
    if (GetParam() == Codec::kNone) continue;
    for (uint64_t wrong : {raw.size() - 1, raw.size() + 1, uint64_t{raw.size()} * 2}) {
      if (wrong == 0) continue;
      EXPECT_THAT(CheckDeclaredRawSize(GetParam(), packed, wrong),
                  StatusIs(StatusCode::kCorruption));
      EXPECT_THAT(DecompressAligned(GetParam(), packed, wrong), StatusIs(StatusCode::kCorruption));
    }
  }
}

TEST(CodecLimits, RawSizesPastTheCodecsLargestExpansionAreRefused) {
  EXPECT_EQ(MaxRawSize(Codec::kNone, 100), 100u);
  EXPECT_EQ(MaxRawSize(Codec::kLz4, 100), 100u * 255 + 64);
  EXPECT_EQ(MaxRawSize(Codec::kZstd, 131072), uint64_t{4} << 30);
  EXPECT_EQ(MaxRawSize(Codec::kZstd, UINT64_MAX / 2), UINT64_MAX);
  // Real data at the codecs' best: 100 MiB of zeros stays within the bounds.
  const std::string zeros(100 << 20, '\0');
  for (Codec c : {Codec::kLz4, Codec::kZstd}) {
    std::string packed;
    ASSERT_OK(Compress(c, 19, zeros, &packed));
    EXPECT_LE(zeros.size(), MaxRawSize(c, packed.size())) << CodecName(c);
  }
  std::string packed;
  ASSERT_OK(Compress(Codec::kZstd, 3, std::string(1000, 'x'), &packed));
  EXPECT_THAT(CheckDeclaredRawSize(Codec::kZstd, packed, uint64_t{1} << 40),
              StatusIs(StatusCode::kCorruption));
}

// lz4's block format declares nothing; the walk of its sequences refuses a
// match that refers before the output and lengths that run past the block.
TEST(CodecLimits, Lz4SequencesThatCannotDecodeAreRefused) {
  // token: 1 literal, match of 4 at offset 2 (only 1 byte produced so far).
  const std::string back_too_far(
      "\x10"
      "a"
      "\x02\x00"
      "\x00",
      5);
  EXPECT_THAT(CheckDeclaredRawSize(Codec::kLz4, back_too_far, 5),
              StatusIs(StatusCode::kCorruption));
  // token: 15 literals and more, but the block ends.
  const std::string long_literals("\xf0\xff\xff", 3);
  EXPECT_THAT(CheckDeclaredRawSize(Codec::kLz4, long_literals, 300),
              StatusIs(StatusCode::kCorruption));
  // A valid run: 1 literal, a match of 15 + 255 + 4 bytes at offset 1, and
  // the 5 literals lz4 ends every block with.
  const std::string rle(
      "\x1f"
      "a"
      "\x01\x00"
      "\xff\x00"
      "\x50"
      "aaaaa",
      12);
  EXPECT_OK(CheckDeclaredRawSize(Codec::kLz4, rle, 280));
  ASSERT_OK_AND_ASSIGN(auto out, DecompressAligned(Codec::kLz4, rle, 280));
  EXPECT_EQ(std::string(out.get(), 280), std::string(280, 'a'));
  // The same match at the very end breaks lz4's end-of-block rule (the last
  // 5 bytes are literals): refused by the walk, before any allocation.
  const std::string late(
      "\x1f"
      "a"
      "\x01\x00"
      "\xff\x00"
      "\x00",
      7);
  EXPECT_THAT(CheckDeclaredRawSize(Codec::kLz4, late, 275), StatusIs(StatusCode::kCorruption));
}

// A zstd frame whose header claims more than its blocks hold fails as the
// stream runs dry, having taken memory for what was really decoded, not for
// the claim.
TEST(CodecLimits, ZstdFrameThatClaimsMoreThanItHoldsFailsAsAStream) {
  const std::string raw = Sample(40 << 20);  // past the one-call bound
  std::string packed;
  ASSERT_OK(Compress(Codec::kZstd, 3, raw, &packed));
  ASSERT_OK_AND_ASSIGN(auto out, DecompressAligned(Codec::kZstd, packed, raw.size()));
  EXPECT_EQ(std::memcmp(out.get(), raw.data(), raw.size()), 0);
  // The frame header's content size field claims gigabytes: the frame
  // header agrees with the block header, the blocks do not.
  std::string lying = packed;
  const unsigned char fhd = static_cast<unsigned char>(lying[4]);
  ASSERT_EQ(fhd >> 6, 2) << "expected a 4-byte content size field";
  const size_t at = 4 + 1 + ((fhd & 0x20) ? 0 : 1) + ((fhd & 3) == 0 ? 0 : (1 << ((fhd & 3) - 1)));
  // As much as the stored bytes could hold (up to the field's 4 GiB - 1).
  const uint32_t claim =
      static_cast<uint32_t>(std::min<uint64_t>(0xFFFFFFFF, MaxRawSize(Codec::kZstd, lying.size())));
  ASSERT_GT(claim, 10 * raw.size());
  std::memcpy(lying.data() + at, &claim, 4);
  ASSERT_OK(CheckDeclaredRawSize(Codec::kZstd, lying, claim));
  EXPECT_THAT(DecompressAligned(Codec::kZstd, lying, claim), StatusIs(StatusCode::kCorruption));
  // Cut short: the stream ends before the frame.
  EXPECT_THAT(DecompressAligned(Codec::kZstd, packed.substr(0, packed.size() - 10), raw.size()),
              StatusIs(StatusCode::kCorruption));
}

TEST_P(CodecTest, RoundTripsAndRefusesDamage) {
  Compressor compressor;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
    const std::string raw = Sample(n);
    std::string packed;
    ASSERT_OK(compressor.Compress(GetParam(), 3, raw, &packed));
    std::string out(n, 'x');
    ASSERT_OK(Decompress(GetParam(), packed, out.data(), n));
    EXPECT_EQ(out, raw);
    if (GetParam() != Codec::kNone && n >= 1000) {
      EXPECT_LT(packed.size(), raw.size());
      // A wrong expected size is refused, never an overrun.
      std::string small(n - 1, '\0');
      EXPECT_THAT(Decompress(GetParam(), packed, small.data(), n - 1),
                  StatusIs(StatusCode::kCorruption));
      std::string cut = packed.substr(0, packed.size() / 2);
      EXPECT_THAT(Decompress(GetParam(), cut, out.data(), n), StatusIs(StatusCode::kCorruption));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, CodecTest, ::testing::Values(Codec::kNone, Codec::kLz4, Codec::kZstd),
                         [](const auto& info) { return std::string(CodecName(info.param)); });

}  // namespace
}  // namespace runstore
