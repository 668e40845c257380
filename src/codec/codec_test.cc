#include "codec/codec.h"

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
