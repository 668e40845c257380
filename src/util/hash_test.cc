#include "util/hash.h"

#include <string>

#include "testing/test_util.h"

namespace runstore {
namespace {

// The dispatched checksum must equal the reference XXH3-64 (seed 0) that
// docs/format.md specifies, for every size class XXH3 handles differently.
TEST(HashTest, ChecksumIsReferenceXxh3AtEverySize) {
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 2654435761u >> 24);
  for (size_t n : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 4096, 65537, 1 << 20}) {
    EXPECT_EQ(Checksum(data.data(), n), XXH3_64bits(data.data(), n)) << "size " << n;
    ChecksumStream s;
    s.Update(data.data(), n / 3);
    s.Update(data.data() + n / 3, n - n / 3);
    EXPECT_EQ(s.Digest(), XXH3_64bits(data.data(), n)) << "streamed, size " << n;
  }
  EXPECT_EQ(Checksum("", 0), 0x2D06800538D394C2ull);  // XXH3-64 of the empty input
}

}  // namespace
}  // namespace runstore
