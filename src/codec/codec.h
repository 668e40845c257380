// Block payload compression: none, lz4 or zstd, chosen per series.
#ifndef RUNSTORE_CODEC_CODEC_H_
#define RUNSTORE_CODEC_CODEC_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore {

// Compresses `input` into *out (replacing its contents). `level` is used by
// zstd only. Fails only on allocation or library errors.
Status Compress(Codec codec, int level, std::string_view input, std::string* out);

// Compresses like Compress, reusing one zstd context across calls (a context
// is ~1 MiB of tables; making one per block churns the allocator). One thread
// at a time.
class Compressor {
 public:
  Compressor() = default;
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  Status Compress(Codec codec, int level, std::string_view input, std::string* out);

 private:
  void* zstd_ctx_ = nullptr;  // ZSTD_CCtx*
};

// The most `codec` can expand `stored_size` bytes to. A header that declares
// a larger raw size lies, and a reader refuses it before allocating it:
// lz4's block format expands at most 255-fold (a length byte per 255 bytes of
// a match), zstd at most 32768-fold (a 4-byte RLE block per 128 KiB); none,
// not at all.
uint64_t MaxRawSize(Codec codec, uint64_t stored_size);

// Checks what `input`'s own framing says of its raw size, where the codec
// has one (zstd's frame headers declare their content size, and runstore's
// writers always write it): Corruption unless it is exactly `raw_size`. For
// lz4 and none, which declare nothing, only MaxRawSize is checked.
Status CheckDeclaredRawSize(Codec codec, std::string_view input, uint64_t raw_size);

// Decompresses `input` into exactly `raw_size` bytes at `out`. Corruption if
// the input does not decode to exactly raw_size bytes.
Status Decompress(Codec codec, std::string_view input, char* out, size_t raw_size);

}  // namespace runstore

#endif  // RUNSTORE_CODEC_CODEC_H_
