#include "codec/codec.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>
#include <limits>

namespace runstore {

Status Compress(Codec codec, int level, std::string_view input, std::string* out) {
  switch (codec) {
    case Codec::kNone:
      out->assign(input);
      return Status::OK();
    case Codec::kLz4: {
      if (input.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
        return Status::InvalidArgument("lz4 cannot compress " + std::to_string(input.size()) +
                                       " bytes in one block (limit " +
                                       std::to_string(LZ4_MAX_INPUT_SIZE) + "); use zstd");
      }
      int bound = LZ4_compressBound(static_cast<int>(input.size()));
      out->resize(static_cast<size_t>(bound));
      int n =
          LZ4_compress_default(input.data(), out->data(), static_cast<int>(input.size()), bound);
      if (n <= 0) return Status::IOError("lz4 compression failed");
      out->resize(static_cast<size_t>(n));
      return Status::OK();
    }
    case Codec::kZstd: {
      size_t bound = ZSTD_compressBound(input.size());
      out->resize(bound);
      size_t n = ZSTD_compress(out->data(), bound, input.data(), input.size(), level);
      if (ZSTD_isError(n)) {
        return Status::IOError(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
      }
      out->resize(n);
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown codec " + std::to_string(static_cast<int>(codec)));
}

Compressor::~Compressor() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zstd_ctx_)); }

Status Compressor::Compress(Codec codec, int level, std::string_view input, std::string* out) {
  if (codec != Codec::kZstd) return runstore::Compress(codec, level, input, out);
  if (zstd_ctx_ == nullptr) {
    zstd_ctx_ = ZSTD_createCCtx();
    if (zstd_ctx_ == nullptr) return Status::IOError("zstd: cannot create a compression context");
  }
  out->resize(ZSTD_compressBound(input.size()));
  size_t n = ZSTD_compressCCtx(static_cast<ZSTD_CCtx*>(zstd_ctx_), out->data(), out->size(),
                               input.data(), input.size(), level);
  if (ZSTD_isError(n)) {
    return Status::IOError(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  }
  out->resize(n);
  return Status::OK();
}

uint64_t MaxRawSize(Codec codec, uint64_t stored_size) {
  // Saturating: a bound past 2^64 bounds nothing a file can hold.
  auto times = [](uint64_t n, uint64_t k, uint64_t plus) {
    return n > (UINT64_MAX - plus) / k ? UINT64_MAX : n * k + plus;
  };
  switch (codec) {
    case Codec::kNone:
      return stored_size;
    case Codec::kLz4:
      return times(stored_size, 255, 64);
    case Codec::kZstd:
      return times(stored_size, 32768, 0);
  }
  return 0;
}

Status CheckDeclaredRawSize(Codec codec, std::string_view input, uint64_t raw_size) {
  if (raw_size > MaxRawSize(codec, input.size())) {
    return Status::Corruption(std::string(CodecName(codec)) + " payload of " +
                              std::to_string(input.size()) + " bytes cannot hold the " +
                              std::to_string(raw_size) + " raw bytes its header declares");
  }
  if (codec != Codec::kZstd) return Status::OK();
  // One frame, covering the whole input, that declares its content size:
  // what ZSTD_compress writes. Reading the frame's size walks its block
  // headers only, not the content.
  const size_t frame = ZSTD_findFrameCompressedSize(input.data(), input.size());
  if (ZSTD_isError(frame)) {
    return Status::Corruption(std::string("zstd payload is not a valid frame: ") +
                              ZSTD_getErrorName(frame));
  }
  if (frame != input.size()) {
    return Status::Corruption("zstd frame ends at byte " + std::to_string(frame) + " of its " +
                              std::to_string(input.size()) + "-byte payload");
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(input.data(), input.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return Status::Corruption("zstd frame does not declare its content size");
  }
  if (declared != raw_size) {
    return Status::Corruption("zstd frame declares " + std::to_string(declared) +
                              " raw bytes, the block header " + std::to_string(raw_size));
  }
  return Status::OK();
}

Status Decompress(Codec codec, std::string_view input, char* out, size_t raw_size) {
  switch (codec) {
    case Codec::kNone:
      if (input.size() != raw_size) {
        return Status::Corruption("stored size " + std::to_string(input.size()) +
                                  " differs from raw size " + std::to_string(raw_size));
      }
      std::memcpy(out, input.data(), raw_size);
      return Status::OK();
    case Codec::kLz4: {
      if (input.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
          raw_size > static_cast<size_t>(std::numeric_limits<int>::max())) {
        return Status::Corruption("lz4 block too large");
      }
      int n = LZ4_decompress_safe(input.data(), out, static_cast<int>(input.size()),
                                  static_cast<int>(raw_size));
      if (n < 0 || static_cast<size_t>(n) != raw_size) {
        return Status::Corruption("lz4 payload does not decode to " + std::to_string(raw_size) +
                                  " bytes");
      }
      return Status::OK();
    }
    case Codec::kZstd: {
      size_t n = ZSTD_decompress(out, raw_size, input.data(), input.size());
      if (ZSTD_isError(n)) {
        return Status::Corruption(std::string("zstd payload does not decode: ") +
                                  ZSTD_getErrorName(n));
      }
      if (n != raw_size) {
        return Status::Corruption("zstd payload decodes to " + std::to_string(n) +
                                  " bytes, expected " + std::to_string(raw_size));
      }
      return Status::OK();
    }
  }
  return Status::Corruption("unknown codec " + std::to_string(static_cast<int>(codec)));
}

}  // namespace runstore
