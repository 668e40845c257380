#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace runstore {

uint64_t Checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

}  // namespace runstore
