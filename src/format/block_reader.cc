#include "format/block_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <new>

#include "codec/codec.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {
namespace {

Status PayloadMismatch(const BlockInfo& block, const std::string& name) {
  return Status::Corruption(AtOffset(name, block.payload_offset) +
                            "block payload checksum mismatch (series '" + block.header.name.str() +
                            "', " + std::to_string(block.header.count) + " records)");
}

Status PayloadTruncated(const BlockInfo& block, const std::string& name) {
  return Status::Corruption(AtOffset(name, block.payload_offset) + "block payload truncated");
}

Status ChunkMismatch(const BlockInfo& block, const ValueChunks& c, uint64_t i,
                     const std::string& name) {
  return Status::Corruption(AtOffset(name, block.payload_offset + c.data_offset + c.begin(i)) +
                            "value chunk " + std::to_string(i) + " of " + std::to_string(c.count) +
                            " checksum mismatch (series '" + block.header.name.str() + "')");
}

}  // namespace

Status CheckPayloadOutsideValue(std::string_view stored, const BlockInfo& block,
                                const std::string& name, BlockView* view) {
  if (stored.size() != block.header.payload_len) return PayloadTruncated(block, name);
  Status s = view->Parse(block.header, stored);
  if (!s.ok()) return s.WithContext(AtOffset(name, block.payload_offset));
  const ValueChunks& c = *view->value_chunks();
  ChecksumStream hash;
  hash.Update(stored.data(), c.data_offset);
  const uint64_t after = c.data_offset + c.data_len;
  hash.Update(stored.data() + after, stored.size() - after);
  if (hash.Digest() != block.header.payload_checksum) return PayloadMismatch(block, name);
  return Status::OK();
}

Status CheckValueChunks(std::string_view stored, const BlockView& view, uint64_t first,
                        uint64_t last, const BlockInfo& block, const std::string& name) {
  const ValueChunks& c = *view.value_chunks();
  const char* data = stored.data() + c.data_offset;
  for (uint64_t i = first; i < last; ++i) {
    if (Checksum(data + c.begin(i), c.end(i) - c.begin(i)) != c.expected(i)) {
      return ChunkMismatch(block, c, i, name);
    }
  }
  return Status::OK();
}

Status CheckPayload(std::string_view stored, const BlockInfo& block, const std::string& name) {
  if (stored.size() != block.header.payload_len) return PayloadTruncated(block, name);
  if (block.header.flags & kBlockValueChunks) {
    BlockView view;
    RUNSTORE_RETURN_IF_ERROR(CheckPayloadOutsideValue(stored, block, name, &view));
    return CheckValueChunks(stored, view, 0, view.value_chunks()->count, block, name);
  }
  if (Checksum(stored) != block.header.payload_checksum) return PayloadMismatch(block, name);
  return Status::OK();
}

Status CheckPayloadByReading(const RandomAccessFile& file, std::string_view stored,
                             const BlockInfo& block, const std::string& name) {
  // A quarter of this machine class's per-core L2: the hash reads each piece
  // right after the copy wrote it.
  constexpr size_t kPiece = size_t{256} << 10;
  thread_local std::unique_ptr<char[]> scratch(new char[kPiece]);
  // The whole payload is asked for first: parsing a block with value chunks
  // touches its keys and chunk table through the mapping, which, cold, would
  // make the kernel read around them into the neighbouring blocks. Then what
  // is read here is the whole payload, or the value data of a block with
  // value chunks (the rest, a few pages, is hashed where it lies).
  file.WillNeed(block.payload_offset, block.header.payload_len);
  BlockView view;
  const ValueChunks* chunks = nullptr;
  uint64_t begin = 0, len = block.header.payload_len;
  if (block.header.flags & kBlockValueChunks) {
    RUNSTORE_RETURN_IF_ERROR(CheckPayloadOutsideValue(stored, block, name, &view));
    chunks = view.value_chunks();
    begin = chunks->data_offset;
    len = chunks->data_len;
  }
  ChecksumStream hash;
  uint64_t chunk = 0;  // with value chunks: the chunk being hashed
  for (uint64_t done = 0; done < len;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, len - done));
    std::string_view got;
    RUNSTORE_RETURN_IF_ERROR(
        file.Read(block.payload_offset + begin + done, n, scratch.get(), &got));
    if (got.size() != n) return PayloadTruncated(block, name);
    if (!chunks) {
      hash.Update(got.data(), got.size());
      done += n;
      continue;
    }
    for (const char* q = got.data(); q < got.data() + n;) {
      const size_t take = std::min<uint64_t>(got.data() + n - q, chunks->end(chunk) - done);
      // A chunk wholly in this piece (always, for chunks that divide it) is
      // hashed at once; one that spans pieces, as they come.
      const bool whole = take == chunks->end(chunk) - chunks->begin(chunk);
      if (!whole) hash.Update(q, take);
      q += take;
      done += take;
      if (done == chunks->end(chunk)) {
        if ((whole ? Checksum(q - take, take) : hash.Digest()) != chunks->expected(chunk)) {
          return ChunkMismatch(block, *chunks, chunk, name);
        }
        if (!whole) hash = ChecksumStream();
        ++chunk;
      }
    }
  }
  if (!chunks && hash.Digest() != block.header.payload_checksum)
    return PayloadMismatch(block, name);
  return Status::OK();
}

Status DecodeBlock(std::string_view stored, std::shared_ptr<const void> owner,
                   std::shared_ptr<const MappedRegion> mapping, const BlockInfo& block,
                   const std::string& name, DecodedBlock* out) {
  const BlockHeader& h = block.header;
  *out = DecodedBlock();
  if (stored.size() != h.payload_len) return PayloadTruncated(block, name);
  if (h.codec == Codec::kNone) {
    out->owner = mapping ? std::shared_ptr<const void>(mapping) : std::move(owner);
    out->mapping = std::move(mapping);
    out->bytes = stored;
  } else {
    // The codec's own framing must agree with the header before the raw size
    // is allocated (DecompressAligned): a frame that claims less or more is
    // refused, and one that claims what its bytes cannot hold was refused
    // with the header.
    auto decoded = DecompressAligned(h.codec, stored, h.raw_len);
    if (!decoded.ok()) {
      return decoded.status().WithContext(AtOffset(name, block.payload_offset) + "the " +
                                          std::string(CodecName(h.codec)) + " block of series '" +
                                          h.name.str() + "'");
    }
    std::shared_ptr<char> buf = std::move(decoded).value();
    out->bytes = std::string_view(buf.get(), h.raw_len);
    out->owner = std::move(buf);
  }
  Status s = out->view.Parse(h, out->bytes);
  if (!s.ok()) return s.WithContext(AtOffset(name, block.payload_offset));
  return Status::OK();
}

}  // namespace runstore::format
