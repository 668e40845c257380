// Reading one block's payload (docs/format.md "Block frame", "Value chunks"):
// checking the stored bytes against their checksums, then decoding them
// (decompressing, and parsing the columns) into a BlockView. The writer's
// side of the same steps is SegmentWriter::AddBlock.
//
// Every size a block's header declares is checked before anything of that
// size is allocated: the raw size against what its codec can expand the
// stored bytes to (CheckDeclaredSizes, when the header is read) and against
// the codec's own frame header (DecodeBlock), so that a hostile file cannot
// make a reader allocate more than its bytes can really hold.
#ifndef RUNSTORE_FORMAT_BLOCK_READER_H_
#define RUNSTORE_FORMAT_BLOCK_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/block.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore::format {

// Checks the stored payload of a block against its checksum (and, for a block
// with value chunks, every chunk against its own). Corruption naming the file
// and offset otherwise.
Status CheckPayload(std::string_view stored, const BlockInfo& block, const std::string& name);

// The same check, reading the payload from `file` in cache-sized pieces after
// asking for all of it at once (RandomAccessFile::WillNeed). For large blocks
// that are handed out as views of a mapping: the file system reads exactly the
// block in large requests, and hashing it maps none of its pages, so a caller
// who then touches a tenth of an array has only that tenth resident.
// `stored` is the mapped payload, of which only the key columns and chunk
// checksums of a block with value chunks are read.
Status CheckPayloadByReading(const RandomAccessFile& file, std::string_view stored,
                             const BlockInfo& block, const std::string& name);

// For a block with value chunks (docs/format.md "Value chunks"): parses its
// payload `stored` into *view, which reads only its keys and chunk table, and
// checks everything but the value data; then CheckValueChunks checks chunks
// [first, last) of the value data.
Status CheckPayloadOutsideValue(std::string_view stored, const BlockInfo& block,
                                const std::string& name, BlockView* view);
Status CheckValueChunks(std::string_view stored, const BlockView& view, uint64_t first,
                        uint64_t last, const BlockInfo& block, const std::string& name);

// A block's raw payload, parsed. The view's pointers stay valid while `owner`
// (or a copy of it) lives.
struct DecodedBlock {
  std::shared_ptr<const void> owner;            // keeps `bytes` alive
  std::shared_ptr<const MappedRegion> mapping;  // set when `bytes` are a view of it
  std::string_view bytes;                       // the raw payload
  BlockView view;
};

// Decodes the stored payload of `block` (whose checksum the caller checked):
// an uncompressed one is parsed where it lies, a view of `mapping` (which
// holds `stored`; null when the bytes are not mapped, and then `owner` must
// keep them alive); a compressed one is decompressed into memory of its own,
// once its codec's frame agrees with the raw size of the header. Corruption
// naming `name` and the payload's offset when the bytes do not decode or
// parse; ResourceExhausted (ENOMEM) when memory for a valid payload cannot be had.
Status DecodeBlock(std::string_view stored, std::shared_ptr<const void> owner,
                   std::shared_ptr<const MappedRegion> mapping, const BlockInfo& block,
                   const std::string& name, DecodedBlock* out);

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_BLOCK_READER_H_
