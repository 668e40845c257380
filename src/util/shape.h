// The byte size of a value's shape, checked the same way by the writer (on
// append) and the reader (on parse), so that whatever one accepts the other
// reads back.
#ifndef RUNSTORE_UTIL_SHAPE_H_
#define RUNSTORE_UTIL_SHAPE_H_

#include <cstdint>
#include <span>

#include "runstore/types.h"

namespace runstore {

// The bytes of a value of `shape` whose elements take `itemsize` bytes, in
// *bytes. False if a dimension is negative, or if the product of its nonzero
// dimensions times `itemsize` exceeds kMaxValueBytes: numpy refuses such an
// array even when another dimension is zero, so the limit counts every
// dimension but the zeros. A shape with a zero dimension holds 0 bytes.
inline bool ShapeBytes(std::span<const int64_t> shape, uint64_t itemsize, uint64_t* bytes) {
  uint64_t nonzero = itemsize;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) {
      empty = true;
      continue;
    }
    const uint64_t u = static_cast<uint64_t>(d);
    if (u > kMaxValueBytes || nonzero > kMaxValueBytes / u) return false;
    nonzero *= u;
  }
  if (nonzero > kMaxValueBytes) return false;
  *bytes = empty ? 0 : nonzero;
  return true;
}

}  // namespace runstore

#endif  // RUNSTORE_UTIL_SHAPE_H_
