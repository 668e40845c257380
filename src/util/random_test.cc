#include "util/random.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace runstore {
namespace {

TEST(RandomTest, TokensAreSixteenHexDigitsAndNeverRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string t = RandomHex16();
    ASSERT_EQ(t.size(), 16u) << t;
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    ASSERT_TRUE(seen.insert(t).second) << "repeated: " << t;
  }
}

TEST(RandomTest, ThreadsDrawingAtOnceGetDistinctValues) {
  constexpr int kThreads = 8, kEach = 2000;
  std::vector<std::vector<uint64_t>> drawn(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&drawn, t] {
      for (int i = 0; i < kEach; ++i) drawn[t].push_back(RandomU64());
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& d : drawn) all.insert(d.begin(), d.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
}

TEST(RandomTest, EveryBitVaries) {
  uint64_t ones = 0, zeros = 0;
  for (int i = 0; i < 256; ++i) {
    const uint64_t v = RandomU64();
    ones |= v;
    zeros |= ~v;
  }
  EXPECT_EQ(ones, ~uint64_t{0});
  EXPECT_EQ(zeros, ~uint64_t{0});
}

}  // namespace
}  // namespace runstore
