// Helpers the files of the snapshot share (snapshot.cc, key_resolution.cc,
// point_lookup.cc, lazy_value.cc, scan.cc, verify.cc): comparing run ids and
// keys, memory for gathered columns, and a record's value.
#ifndef RUNSTORE_STORE_READ_SNAPSHOT_HELPERS_H_
#define RUNSTORE_STORE_READ_SNAPSHOT_HELPERS_H_

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "format/format.h"
#include "store/read/snapshot.h"
#include "util/coding.h"

namespace runstore::read {

// The first position at or after `from` of a value >= h in `sorted` (its
// size if none), searched in steps that double from `from`: a run of
// ascending values looked up one after another, each from where the one
// before was found, costs O(m log(n / m)) for m values in n.
inline size_t GallopTo(std::span<const uint64_t> sorted, size_t from, uint64_t h) {
  size_t step = 1, hi = from;
  while (hi < sorted.size() && sorted[hi] < h) {
    from = hi + 1;
    hi += step;
    step *= 2;
  }
  hi = std::min(hi + 1, sorted.size());
  return static_cast<size_t>(std::lower_bound(sorted.begin() + static_cast<ptrdiff_t>(from),
                                              sorted.begin() + static_cast<ptrdiff_t>(hi), h) -
                             sorted.begin());
}

inline int CompareRunRef(const RunRef& a, const RunId& b) {
  if (a.is_string != b.is_string()) return a.is_string ? 1 : -1;
  if (!a.is_string) return a.i < b.int_value() ? -1 : (a.i > b.int_value() ? 1 : 0);
  int c = a.s.compare(b.string_value());
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
inline int CompareRunRefs(const RunRef& a, const RunRef& b) {
  if (a.is_string != b.is_string) return a.is_string ? 1 : -1;
  if (!a.is_string) return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  int c = a.s.compare(b.s);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
// Compares (run, step) with a stored key.
inline int CompareKey(const RunRef& run, int64_t step, const format::Key& k) {
  if (int c = CompareRunRefs(run, k.run); c != 0) return c;
  return step < k.step ? -1 : (step > k.step ? 1 : 0);
}

// `v` sorted by a least-significant-digit radix sort: six passes of 11 bits
// (a count of 2,048 stays in the first level of cache), each a count and a
// scatter through a buffer as large as `v`.
inline void RadixSort(std::vector<uint64_t>* v) {
  constexpr int kBits = 11;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  std::vector<uint64_t> tmp(v->size());
  std::vector<size_t> count(size_t{1} << kBits);
  for (int shift = 0; shift < 64; shift += kBits) {
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t x : *v) ++count[(x >> shift) & kMask];
    size_t at = 0;
    for (size_t& c : count) at += std::exchange(c, at);
    for (uint64_t x : *v) tmp[count[(x >> shift) & kMask]++] = x;
    v->swap(tmp);
  }
}

// Lists at least this many are sorted by radix rather than merged: the
// series of a store of many small commits or segments are many small blocks,
// and 1,000,000 hashes in 1,000 lists took 48 ms to merge pairwise, in
// 100,000 lists 76 ms; by radix 24-25 ms whatever the lists (64: 34 and 24 ms).
inline constexpr size_t kRadixSortLists = 64;

// Ascending lists (the run-hash lists of blocks) as one ascending vector,
// repeats kept: merged pairwise, in O(n log k) for n values in k lists
// rather than a sort's O(n log n); many lists radix-sorted, in O(n).
inline std::vector<uint64_t> MergeAscending(const std::vector<std::span<const uint64_t>>& lists) {
  std::vector<uint64_t> out;
  std::vector<size_t> bounds = {0};
  for (const auto& l : lists) {
    out.insert(out.end(), l.begin(), l.end());
    bounds.push_back(out.size());
  }
  if (lists.size() >= kRadixSortLists) {
    RadixSort(&out);
    return out;
  }
  while (bounds.size() > 2) {
    std::vector<size_t> next = {0};
    for (size_t i = 0; i + 2 < bounds.size(); i += 2) {
      std::inplace_merge(out.begin() + static_cast<ptrdiff_t>(bounds[i]),
                         out.begin() + static_cast<ptrdiff_t>(bounds[i + 1]),
                         out.begin() + static_cast<ptrdiff_t>(bounds[i + 2]));
      next.push_back(bounds[i + 2]);
    }
    if (bounds.size() % 2 == 0) next.push_back(bounds.back());  // an odd list out: as it is
    bounds = std::move(next);
  }
  return out;
}

// Drops the pages of the segments a pass over many blocks read, every so
// many blocks: a block read faults in the pages around it too, and a pass
// over a store's small blocks (key resolution, listing runs) would otherwise
// keep most of its segments resident. The views it handed out stay valid
// (their pages fault in again).
class PageReleaser {
 public:
  static constexpr size_t kBlocksBetweenReleases = 64;
  PageReleaser() = default;
  PageReleaser(const PageReleaser&) = delete;
  PageReleaser& operator=(const PageReleaser&) = delete;
  ~PageReleaser() { Release(); }
  // Before a block of segment `seg` (alive until the release) is read.
  void WillRead(const LoadedSegment* seg) {
    if (touched_.size() == kBlocksBetweenReleases) Release();
    touched_.push_back(seg);
  }
  void Release() {
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (const LoadedSegment* seg : touched_) seg->ReleasePages();
    touched_.clear();
  }

 private:
  std::vector<const LoadedSegment*> touched_;
};

// Memory aligned for any dtype and for SIMD, shared by whoever needs it.
inline std::shared_ptr<char> AlignedBuffer(size_t n) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, AlignUp(n, 64)));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { std::free(q); });
}

// Bytes of a payload as a Value: a view of the mapping, or kept alive by the
// payload's decompressed buffer.
inline Value PayloadValue(const Payload& p, DType dtype, std::vector<int64_t> shape,
                          const char* data, size_t n) {
  if (p.mapping) return Value(dtype, std::move(shape), data, n, p.mapping);
  return Value(dtype, std::move(shape), data, n, p.owner, false);
}

inline Value MakeRecordValue(const format::BlockHeader& h, const Payload& p, uint32_t row) {
  std::string_view bytes = p.view.value_bytes(row);
  return PayloadValue(p, h.dtype, p.view.value_shape(row), bytes.data(), bytes.size());
}

}  // namespace runstore::read

#endif  // RUNSTORE_STORE_READ_SNAPSHOT_HELPERS_H_
