#include "util/utf8.h"

#include <string>
#include <utility>
#include <vector>

#include "testing/test_util.h"

namespace runstore {
namespace {

// Every sequence, valid or not, at every offset of an ASCII string of every
// length up to 24: the eight-bytes-at-a-time ASCII path must hand each
// multi-byte sequence to the decoder wherever it starts.
TEST(Utf8Test, EverySequenceIsJudgedAtEveryOffsetOfAsciiText) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"\xc3\xa9", true},               // é
      {"\xe2\x82\xac", true},           // €
      {"\xf0\x9f\x98\x80", true},       // U+1F600
      {"\xf4\x8f\xbf\xbf", true},       // U+10FFFF
      {"\x80", false},                  // a continuation byte alone
      {"\xc0\x80", false},              // overlong NUL
      {"\xe0\x80\x80", false},          // overlong
      {"\xed\xa0\x80", false},          // a surrogate
      {"\xf4\x90\x80\x80", false},      // past U+10FFFF
      {"\xf8\x88\x80\x80\x80", false},  // five bytes
      {"\xc3", false},                  // cut short
      {"\xe2\x82", false},              // cut short
      {"\xff", false},
  };
  for (const auto& [seq, valid] : cases) {
    for (size_t len = 0; len <= 24; ++len) {
      for (size_t at = 0; at <= len; ++at) {
        const std::string s = std::string(at, 'a') + seq + std::string(len - at, 'b');
        EXPECT_EQ(IsValidUtf8(s), valid)
            << "sequence of " << seq.size() << " bytes at " << at << " in " << s.size();
      }
    }
  }
  for (size_t len = 0; len <= 40; ++len) EXPECT_TRUE(IsValidUtf8(std::string(len, 'x')));
}

}  // namespace
}  // namespace runstore
