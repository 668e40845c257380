// read_pages.h: a pass over a mapped region that drops the pages it has read,
// a piece at a time (MappedRegion::ReleasePages), so that reading more bytes
// than should stay resident holds a bounded number of them. The bytes stay
// valid: a page touched again comes back from the page cache. Used where a
// whole file is read through its mapping: verify's pass over a segment, the
// catalog's checksum and entries.
#ifndef RUNSTORE_ENV_READ_PAGES_H_
#define RUNSTORE_ENV_READ_PAGES_H_

#include <algorithm>
#include <cstdint>

#include "runstore/env.h"

namespace runstore {

class ReadPages {
 public:
  // Over [begin, begin + size) of `map` (null: nothing is dropped, as for
  // bytes read into memory), dropping what was read each time `piece` more
  // bytes have been.
  ReadPages(const MappedRegion* map, const char* begin, uint64_t size, uint64_t piece)
      : map_(map), begin_(begin), size_(size), piece_(piece) {}

  // Everything before `end` (an offset from begin) has been read.
  void ReadUpTo(uint64_t end) {
    if (end >= released_ + piece_) Drop(end);
  }
  // The pass is over: what it read and did not drop yet is dropped.
  void Finish() { Drop(size_); }

 private:
  void Drop(uint64_t end) {
    end = std::min(end, size_);
    if (map_ == nullptr || end <= released_) return;
    map_->ReleasePages(begin_ + released_, end - released_);
    released_ = end;
  }

  const MappedRegion* const map_;
  const char* const begin_;
  const uint64_t size_;
  const uint64_t piece_;
  uint64_t released_ = 0;
};

}  // namespace runstore

#endif  // RUNSTORE_ENV_READ_PAGES_H_
