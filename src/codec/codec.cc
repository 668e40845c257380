#include "codec/codec.h"

#include <lz4.h>
#include <sys/mman.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

namespace {

// Walks an lz4 block (lz4's block format: sequences of a token, literals,
// a 2-byte offset and a match) without producing its output: the sum of its
// literal and match lengths must be `raw_size`, and every match must start
// inside what the sequences before it produced.
Status CheckLz4Sizes(std::string_view input, uint64_t raw_size) {
  const auto* p = reinterpret_cast<const unsigned char*>(input.data());
  const auto* const end = p + input.size();
  uint64_t produced = 0;
  auto bad = [&](const char* what) {
    return Status::Corruption(
        std::string("lz4 block: ") + what + " at byte " +
        std::to_string(p - reinterpret_cast<const unsigned char*>(input.data())));
  };
  // A length of 15 in the token goes on in bytes of 255 and a last one below.
  auto length = [&](uint64_t n, uint64_t* out) {
    if (n == 15) {
      unsigned char b;
      do {
        if (p == end) return false;
        b = *p++;
        n += b;
        if (n > raw_size) return false;
      } while (b == 255);
    }
    *out = n;
    return true;
  };
  if (input.empty()) return bad("empty block");
  while (true) {
    if (p == end) return bad("sequence expected");
    const unsigned char token = *p++;
    uint64_t literals;
    if (!length(token >> 4, &literals) || literals > static_cast<uint64_t>(end - p)) {
      return bad("literals run past the block");
    }
    p += literals;
    produced += literals;
    if (produced > raw_size) return bad("output longer than the raw size");
    if (p == end) break;  // the last sequence has literals only
    if (end - p < 2) return bad("match offset truncated");
    const uint64_t offset = p[0] | (uint64_t{p[1]} << 8);
    p += 2;
    if (offset == 0 || offset > produced) return bad("match refers before the output");
    uint64_t match;
    if (!length(token & 15, &match)) return bad("match length runs past the block");
    // lz4's end-of-block rules, which its decoder enforces: a match starts
    // at least 12 bytes before the end, and the last 5 bytes are literals.
    if (produced + 12 > raw_size) return bad("match starts too close to the end");
    produced += match + 4;
    if (produced + 5 > raw_size) return bad("match ends in the last 5 bytes");
  }
  if (produced != raw_size) {
    return Status::Corruption("lz4 block decodes to " + std::to_string(produced) +
                              " bytes, the block header says " + std::to_string(raw_size));
  }
  return Status::OK();
}

}  // namespace

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
  if (codec == Codec::kLz4) return CheckLz4Sizes(input, raw_size);
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

namespace {

// Payloads up to this size are decoded in one call into memory of their raw
// size; larger zstd ones as a stream into memory that grows with the output.
constexpr uint64_t kOneShotBytes = uint64_t{16} << 20;

std::shared_ptr<char> AlignedAlloc(uint64_t n) {
  if (n > (uint64_t{1} << 62)) return nullptr;
  const uint64_t size = std::max<uint64_t>(64, (n + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { std::free(q); });
}

Status NoMemory(uint64_t n) {
  return Status::ResourceExhausted(
      "cannot allocate " + std::to_string(n) + " bytes to decompress a block (out of memory)",
      ENOMEM);
}

// Anonymous memory (page-aligned, so 64-byte aligned) that can grow without
// copying (mremap).
class GrowingBuffer {
 public:
  ~GrowingBuffer() {
    if (data_ != nullptr) ::munmap(data_, capacity_);
  }
  bool Reserve(uint64_t n) {
    if (n <= capacity_) return true;
    void* p = data_ == nullptr
                  ? ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : ::mremap(data_, capacity_, n, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return false;
    data_ = static_cast<char*>(p);
    capacity_ = n;
    return true;
  }
  char* data() const { return data_; }
  // Hands the memory to a shared_ptr that unmaps it.
  std::shared_ptr<char> Release() {
    const size_t n = capacity_;
    char* p = data_;
    data_ = nullptr;
    capacity_ = 0;
    return std::shared_ptr<char>(p, [n](char* q) { ::munmap(q, n); });
  }

 private:
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
};

Result<std::shared_ptr<char>> ZstdStream(std::string_view input, uint64_t raw_size) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) return NoMemory(raw_size);
  GrowingBuffer out;
  uint64_t capacity = kOneShotBytes;
  if (!out.Reserve(capacity)) return NoMemory(capacity);
  ZSTD_inBuffer in{input.data(), input.size(), 0};
  ZSTD_outBuffer o{out.data(), capacity, 0};
  auto fail = [](size_t r) {
    return Status::Corruption(std::string("zstd payload does not decode: ") + ZSTD_getErrorName(r));
  };
  const Status truncated = Status::Corruption("zstd payload ends before its frame");
  const Status too_long = Status::Corruption("zstd payload decodes to more than " +
                                             std::to_string(raw_size) + " bytes");
  while (true) {
    size_t r = ZSTD_decompressStream(ctx.get(), &o, &in);
    if (ZSTD_isError(r)) return fail(r);
    if (r == 0) break;  // the frame is complete
    if (o.pos < o.size) {
      if (in.pos == in.size) return truncated;
      continue;
    }
    if (o.size < raw_size) {
      capacity = std::min<uint64_t>(raw_size, 2 * capacity);
      if (!out.Reserve(capacity)) return NoMemory(capacity);
      o.dst = out.data();
      o.size = capacity;
      continue;
    }
    // Full at the declared size: the frame must end without another byte.
    char extra;
    ZSTD_outBuffer x{&extra, 1, 0};
    do {
      r = ZSTD_decompressStream(ctx.get(), &x, &in);
      if (ZSTD_isError(r)) return fail(r);
      if (x.pos != 0) return too_long;
      if (r != 0 && in.pos == in.size) return truncated;
    } while (r != 0);
    break;
  }
  if (o.pos != raw_size || in.pos != in.size) {
    return Status::Corruption("zstd payload decodes to " + std::to_string(o.pos) +
                              " bytes, expected " + std::to_string(raw_size));
  }
  return out.Release();
}

}  // namespace

Result<std::shared_ptr<char>> DecompressAligned(Codec codec, std::string_view input,
                                                uint64_t raw_size) {
  RUNSTORE_RETURN_IF_ERROR(CheckDeclaredRawSize(codec, input, raw_size));
  if (codec == Codec::kZstd && raw_size > kOneShotBytes) return ZstdStream(input, raw_size);
  auto buf = AlignedAlloc(raw_size);
  if (!buf) return NoMemory(raw_size);
  RUNSTORE_RETURN_IF_ERROR(Decompress(codec, input, buf.get(), raw_size));
  return buf;
}

}  // namespace runstore
