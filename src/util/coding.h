// Little-endian fixed-width encoding, as every integer in docs/format.md is.
#ifndef RUNSTORE_UTIL_CODING_H_
#define RUNSTORE_UTIL_CODING_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace runstore {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "runstore's format is little-endian; big-endian hosts need byte swaps here");

template <typename T>
inline void EncodeFixed(char* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}
template <typename T>
inline T DecodeFixed(const char* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}
template <typename T>
inline void PutFixed(std::string* dst, T v) {
  dst->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
// PutFixed of each value, in one append.
template <typename T>
inline void PutFixedArray(std::string* dst, std::span<const T> v) {
  if (!v.empty()) dst->append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

inline constexpr uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// The bounds checks of lengths and offsets read from a file. Every check of
// a range that came from disk goes through these: a hostile length near 2^64
// must not wrap past the limit (offset + len overflowing is how a footer
// entry once passed a naive `offset + len > size`).
//
// True when [offset, offset + len) lies inside [0, limit).
inline constexpr bool RangeWithin(uint64_t offset, uint64_t len, uint64_t limit) {
  return offset <= limit && len <= limit - offset;
}
// *out = n * size and true when that is at most `limit`; false (and *out
// unspecified) when it is larger or would overflow.
inline constexpr bool MulWithin(uint64_t n, uint64_t size, uint64_t limit, uint64_t* out) {
  if (size != 0 && n > limit / size) return false;
  *out = n * size;
  return *out <= limit;
}
// AlignUp that reports overflow instead of wrapping: false when the aligned
// value would exceed `limit`.
inline constexpr bool AlignUpWithin(uint64_t n, uint64_t a, uint64_t limit, uint64_t* out) {
  if (n > limit) return false;
  const uint64_t r = n % a;
  if (r != 0 && a - r > limit - n) return false;
  *out = r == 0 ? n : n + (a - r);
  return true;
}

// Appends a u16 length and the bytes.
inline void PutString16(std::string* dst, std::string_view s) {
  PutFixed<uint16_t>(dst, static_cast<uint16_t>(s.size()));
  dst->append(s);
}

// A bounds-checked cursor over bytes read from a file: every Get fails rather
// than reading past the end, so a hostile length cannot make a read overrun.
class Decoder {
 public:
  Decoder(std::string_view data) : p_(data.data()), end_(data.data() + data.size()) {}  // NOLINT
  template <typename T>
  bool Get(T* v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool GetBytes(size_t n, std::string_view* v) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    *v = std::string_view(p_, n);
    p_ += n;
    return true;
  }
  bool GetString16(std::string_view* v) {
    uint16_t n;
    return Get(&n) && GetBytes(n, v);
  }
  bool Skip(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace runstore

#endif  // RUNSTORE_UTIL_CODING_H_
