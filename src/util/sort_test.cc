#include "util/sort.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "testing/test_util.h"

namespace runstore {
namespace {

// Against std::sort: every size class (the small sizes std::sort takes, the
// radix passes), uniform values, values that share high or low bytes (whose
// passes are skipped), repeats, and values already sorted or reversed.
TEST(SortTest, SortsAsStdSortDoesWhateverTheValuesShare) {
  const uint64_t seed = 20261206;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint64_t>> cases;
  for (size_t n : {0, 1, 2, 255, 256, 257, 1000, 40000}) {
    std::vector<uint64_t> uniform(n), low(n), high(n), repeats(n), sorted(n);
    for (size_t i = 0; i < n; ++i) {
      uniform[i] = rng();
      low[i] = rng() & 0xffff;           // six high bytes shared
      high[i] = (rng() << 48) | 0x1234;  // six low bytes shared
      repeats[i] = rng() % 7 * 0x0101010101010101ull;
      sorted[i] = i * 0x9e3779b97f4a7c15ull >> 3;  // ascending
    }
    std::vector<uint64_t> reversed(sorted.rbegin(), sorted.rend());
    for (auto* c : {&uniform, &low, &high, &repeats, &sorted, &reversed}) cases.push_back(*c);
  }
  for (const auto& c : cases) {
    std::vector<uint64_t> want = c, got = c, distinct = c;
    std::sort(want.begin(), want.end());
    SortUint64(&got);
    ASSERT_EQ(got, want) << "seed " << seed << ", " << c.size() << " values";
    SortDistinctUint64(&distinct);
    want.erase(std::unique(want.begin(), want.end()), want.end());
    ASSERT_EQ(distinct, want) << "seed " << seed << ", " << c.size() << " values";
  }
}

}  // namespace
}  // namespace runstore
