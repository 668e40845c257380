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

// Decompresses `input` into exactly `raw_size` bytes at `out`. Corruption if
// the input does not decode to exactly raw_size bytes.
Status Decompress(Codec codec, std::string_view input, char* out, size_t raw_size);

}  // namespace runstore

#endif  // RUNSTORE_CODEC_CODEC_H_
