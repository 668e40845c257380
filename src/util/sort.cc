#include "util/sort.h"

#include <algorithm>
#include <array>
#include <cstddef>

namespace runstore {

void SortUint64(std::vector<uint64_t>* v) {
  const size_t n = v->size();
  if (n < 256) {
    std::sort(v->begin(), v->end());
    return;
  }
  // The counts of every byte position, from one pass over the values.
  std::array<std::array<size_t, 256>, 8> counts{};
  for (const uint64_t x : *v) {
    for (int d = 0; d < 8; ++d) ++counts[d][(x >> (8 * d)) & 0xff];
  }
  std::vector<uint64_t> scratch(n);
  uint64_t* from = v->data();
  uint64_t* to = scratch.data();
  for (int d = 0; d < 8; ++d) {
    std::array<size_t, 256>& c = counts[d];
    if (c[(from[0] >> (8 * d)) & 0xff] == n) continue;  // every value has this byte
    size_t sum = 0;
    for (size_t& k : c) {
      const size_t here = k;
      k = sum;
      sum += here;
    }
    for (size_t i = 0; i < n; ++i) to[c[(from[i] >> (8 * d)) & 0xff]++] = from[i];
    std::swap(from, to);
  }
  if (from != v->data()) v->swap(scratch);
}

void SortDistinctUint64(std::vector<uint64_t>* v) {
  SortUint64(v);
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

}  // namespace runstore
