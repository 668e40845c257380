// The checksum of every structure in a segment: XXH3-64 with seed 0
// (docs/format.md). On x86-64 the library's runtime dispatch picks the widest
// vector unit the CPU has (AVX2 / AVX-512); the value is the same everywhere.
#ifndef RUNSTORE_UTIL_HASH_H_
#define RUNSTORE_UTIL_HASH_H_

#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t is embedded by value below
#endif
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace runstore {

uint64_t Checksum(const void* data, size_t n);
inline uint64_t Checksum(std::string_view s) { return Checksum(s.data(), s.size()); }

// The checksum of the concatenation of several pieces.
class ChecksumStream {
 public:
  ChecksumStream();
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  XXH3_state_t state_;
};

}  // namespace runstore

#endif  // RUNSTORE_UTIL_HASH_H_
