// Strings from a store in text and JSON output (text.h): every code point a
// terminal acts on is escaped and nothing else is, invalid UTF-8 never reaches
// the output raw, and JSON stays the same value.
#include "runstore/text.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "testing/test_util.h"

namespace runstore::text {
namespace {

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// The code point of the valid UTF-8 sequence at s[i] (its length in *n), or
// -1: decoded by re-encoding, independently of text.cc.
int64_t Decode(const std::string& s, size_t i, size_t* n) {
  const auto c = static_cast<unsigned char>(s[i]);
  *n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
  if (i + *n > s.size() || (c >= 0x80 && c < 0xC0) || c >= 0xF8) return -1;
  uint32_t cp = *n == 1 ? c : *n == 2 ? c & 0x1F : *n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < *n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || Utf8(cp) != s.substr(i, *n)) return -1;
  return cp;
}

// Whether `s` is valid UTF-8 holding no unsafe code point (but line feeds,
// with `newlines`): what may reach a terminal.
bool SafeForTerminal(const std::string& s, bool newlines = false) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const int64_t cp = Decode(s, i, &n);
    if (cp < 0 || (IsUnsafeCodePoint(static_cast<uint32_t>(cp)) && !(newlines && cp == '\n'))) {
      return false;
    }
  }
  return true;
}

// `s` with each byte that does not start a valid sequence replaced by U+FFFD.
std::string Replaced(const std::string& s) {
  std::string out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    if (Decode(s, i, &n) < 0) {
      out += "\uFFFD";
      n = 1;
    } else {
      out += s.substr(i, n);
    }
  }
  return out;
}

TEST(TextTest, PrintableEscapesEveryUnsafeCodePointAndNothingElse) {
  int escaped = 0;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // not in UTF-8
    const std::string s = "a" + Utf8(cp) + "b";
    const std::string shown = Printable(s);
    ASSERT_TRUE(SafeForTerminal(shown)) << std::hex << cp;
    if (!IsUnsafeCodePoint(cp)) {
      ASSERT_EQ(shown, s) << std::hex << cp;
      continue;
    }
    ++escaped;
    char want[16];
    if (cp == '\t' || cp == '\n' || cp == '\r') {
      std::snprintf(want, sizeof(want), "a\\%cb", cp == '\t' ? 't' : cp == '\n' ? 'n' : 'r');
    } else if (cp < 0x100) {
      std::snprintf(want, sizeof(want), "a\\x%02xb", cp);
    } else {
      std::snprintf(want, sizeof(want), "a\\u%04xb", cp);
    }
    ASSERT_EQ(shown, want) << std::hex << cp;
  }
  // 32 C0, DEL and 32 C1, 1 + 2 + 5 + 4 bidi, 2 separators.
  EXPECT_EQ(escaped, 32 + 1 + 32 + 12 + 2);
  EXPECT_EQ(Printable("\x1b]52;c;cHduZWQ=\x07"), "\\x1b]52;c;cHduZWQ=\\x07");
  EXPECT_EQ(Printable("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(Printable("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");
  EXPECT_EQ(Printable("\u202e"
                      "exe.txt"),
            "\\u202eexe.txt");
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(Printable("C:\\Windows é 中 😀"), "C:\\Windows é 中 😀");
}

TEST(TextTest, PrintableShowsEachByteOfInvalidUtf8AsHex) {
  EXPECT_EQ(Printable("a\xff"
                      "b"),
            "a\\xffb");
  EXPECT_EQ(Printable("\xc0\x9b"
                      "2J"),
            "\\xc0\\x9b2J");                                         // an overlong CSI
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(Printable("\xe2\x80"), "\\xe2\\x80");                    // cut
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(Printable("\x9b"), "\\x9b");                             // a stray continuation byte
}

TEST(TextTest, JsonStringsAreExactJsonWithNoUnsafeCodePointRaw) {
  // Every code point up to U+2FFF (all the unsafe ones), one in 61 beyond.
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += cp < 0x3000 ? 1 : 61) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = "\"" + Utf8(cp) + "\\";
    std::string json;
    AppendJsonString(&json, s);
    ASSERT_TRUE(SafeForTerminal(json)) << std::hex << cp;
    ASSERT_EQ(nlohmann::json::parse(json).get<std::string>(), s) << std::hex << cp;
    // A document nlohmann wrote, made safe, is the same value.
    const std::string doc = nlohmann::json({{"k", s}}).dump(2, ' ', false);
    const std::string safe = JsonPrintable(doc);
    ASSERT_TRUE(SafeForTerminal(safe, /*newlines=*/true)) << std::hex << cp;
    ASSERT_EQ(nlohmann::json::parse(safe)["k"].get<std::string>(), s) << std::hex << cp;
  }
  std::string json;
  AppendJsonString(&json, "a\xff\u2028\x7f\t");
  EXPECT_EQ(json, "\"a\\ufffd\\u2028\\u007f\\t\"");
}

// Random strings of ASCII, unsafe code points, other characters and stray
// bytes: Printable's output is always safe and is the input when the input
// was; JSON reads back as the input with U+FFFD for each invalid byte.
TEST(TextTest, RandomStringsNeverReachTheOutputRaw) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const uint32_t kPool[] = {'a',    'Z',    ' ',    '\\',   '"',    0x1b,   0x07,
                            0x0d,   0x00,   0x7f,   0x85,   0x9b,   0xe9,   0x4e2d,
                            0x202e, 0x2066, 0x2028, 0x200d, 0xfeff, 0x1f600};
  int cases = 0;
  for (; cases < 20000; ++cases) {
    std::string s;
    const size_t n = rng() % 12;
    for (size_t k = 0; k < n; ++k) {
      if (rng() % 8 == 0) {
        s.push_back(static_cast<char>(0x80 + rng() % 0x80));  // a stray byte
      } else {
        s += Utf8(kPool[rng() % std::size(kPool)]);
      }
    }
    const std::string shown = Printable(s);
    ASSERT_TRUE(SafeForTerminal(shown)) << "seed " << seed << " case " << cases;
    if (SafeForTerminal(s)) {
      ASSERT_EQ(shown, s) << "seed " << seed;
    }
    std::string json;
    AppendJsonString(&json, s);
    ASSERT_TRUE(SafeForTerminal(json)) << "seed " << seed << " case " << cases;
    ASSERT_EQ(nlohmann::json::parse(json).get<std::string>(), Replaced(s)) << "seed " << seed;
  }
  std::printf("%d random strings (seed %llu)\n", cases, static_cast<unsigned long long>(seed));
}

}  // namespace
}  // namespace runstore::text
