// The checksum of every structure in a segment: XXH3-64 (docs/format.md).
#ifndef RUNSTORE_UTIL_HASH_H_
#define RUNSTORE_UTIL_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace runstore {

uint64_t Checksum(const void* data, size_t n);
inline uint64_t Checksum(std::string_view s) { return Checksum(s.data(), s.size()); }

}  // namespace runstore

#endif  // RUNSTORE_UTIL_HASH_H_
