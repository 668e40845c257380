// Block payload compression: none, lz4 or zstd, chosen per series.
#ifndef RUNSTORE_CODEC_CODEC_H_
#define RUNSTORE_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
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

// Checks what `input` itself says of its raw size, without decompressing
// it: Corruption unless it is exactly `raw_size`. zstd's frame header
// declares its content size (runstore's writers always write it); an lz4
// block's sequences are walked to add up their lengths and check that each
// match refers back into what was already produced. No memory of the raw
// size is needed.
Status CheckDeclaredRawSize(Codec codec, std::string_view input, uint64_t raw_size);

// Decompresses `input` into a new 64-byte-aligned buffer of exactly
// `raw_size` bytes, after CheckDeclaredRawSize. A zstd payload larger than a
// fixed bound is decoded as a stream into memory that grows as the output
// arrives, so that a frame which claims more than it holds fails before
// the memory it claims is taken: what is allocated for a payload that does
// not decode is at most that bound. Corruption if it does not decode to
// exactly raw_size bytes; ResourceExhausted (ENOMEM) if the memory cannot be had.
Result<std::shared_ptr<char>> DecompressAligned(Codec codec, std::string_view input,
                                                uint64_t raw_size);

// Decompresses `input` into exactly `raw_size` bytes at `out`. Corruption if
// the input does not decode to exactly raw_size bytes.
Status Decompress(Codec codec, std::string_view input, char* out, size_t raw_size);

}  // namespace runstore

#endif  // RUNSTORE_CODEC_CODEC_H_
