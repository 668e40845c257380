#include "util/hash.h"

#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE 1
#include <xxh_x86dispatch.h>
#define RUNSTORE_XXH3(data, n) XXH3_64bits_dispatch(data, n)
#define RUNSTORE_XXH3_UPDATE(state, data, n) XXH3_64bits_update_dispatch(state, data, n)
#else
#define RUNSTORE_XXH3(data, n) XXH3_64bits(data, n)
#define RUNSTORE_XXH3_UPDATE(state, data, n) XXH3_64bits_update(state, data, n)
#endif

namespace runstore {

uint64_t Checksum(const void* data, size_t n) { return RUNSTORE_XXH3(data, n); }

ChecksumStream::ChecksumStream() { XXH3_64bits_reset(&state_); }

void ChecksumStream::Update(const void* data, size_t n) { RUNSTORE_XXH3_UPDATE(&state_, data, n); }

uint64_t ChecksumStream::Digest() const { return XXH3_64bits_digest(&state_); }

}  // namespace runstore
