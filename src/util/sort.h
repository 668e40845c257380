// Sorting 64-bit keys: a least-significant-digit radix sort, for the run
// hashes of every block a writer seals (tens of thousands of uniformly spread
// values a block, where std::sort's comparisons were a fifth of log_many's
// time with string run ids).
#ifndef RUNSTORE_UTIL_SORT_H_
#define RUNSTORE_UTIL_SORT_H_

#include <cstdint>
#include <vector>

namespace runstore {

// Sorts `v` ascending. Byte by byte from the lowest, skipping the bytes that
// every value shares; std::sort below a few hundred values. Uses a scratch
// buffer as large as `v`.
void SortUint64(std::vector<uint64_t>* v);

// SortUint64, then drops repeats.
void SortDistinctUint64(std::vector<uint64_t>* v);

}  // namespace runstore

#endif  // RUNSTORE_UTIL_SORT_H_
