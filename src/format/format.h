// Constants and structures of the segment format, version 4. The byte-level
// specification is docs/format.md; the names here are the document's names.
#ifndef RUNSTORE_FORMAT_FORMAT_H_
#define RUNSTORE_FORMAT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/key.h"
#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore::format {

// docs/format.md "Segment header". The first byte is non-ASCII and the magic
// holds CR LF and ^Z, so a file mangled by text-mode transfer is recognised,
// as in PNG.
inline constexpr char kSegmentMagic[8] = {'\x89', 'R', 'U', 'N', 'S', '\r', '\n', '\x1a'};
inline constexpr size_t kSegmentHeaderSize = 128;
inline constexpr size_t kMaxWriterIdLength = 64;

// docs/format.md "Frames". Every frame starts at a multiple of kFrameAlign, and
// so does its payload: an array payload is aligned for SIMD loads and numpy.
inline constexpr uint64_t kFrameAlign = 64;
inline constexpr uint32_t kFrameMagic = 0x31465352;  // "RSF1" in file order
inline constexpr size_t kFramePrefixSize = 24;
inline constexpr size_t kMaxFrameHeaderSize = 4096;

enum class FrameKind : uint8_t { kBlock = 1, kCommit = 2, kFooter = 3 };

// docs/format.md "Trailer": the last 32 bytes of a sealed segment.
inline constexpr size_t kTrailerSize = 32;
inline constexpr char kTrailerMagic[8] = {'R', 'S', 'S', 'E', 'A', 'L', 'E', 'D'};

inline constexpr size_t kCommitHeaderSize = 72;
inline constexpr size_t kFooterHeaderSize = 56;

// The file name of segment `seq` of writer `writer_id`: "<writer_id>-<seq>.rss",
// seq zero-padded to 8 digits so that names sort in writing order.
std::string SegmentFileName(std::string_view writer_id, uint64_t seq);
// Parses a SegmentFileName; false for any other name.
bool ParseSegmentFileName(std::string_view name, std::string* writer_id, uint64_t* seq);

// "segments/x-00000001.rss: offset 4096: ", the prefix of every message about
// bytes of a file.
std::string AtOffset(std::string_view file, uint64_t offset);

// docs/format.md "The store directory": the RUNSTORE marker, two lines of
// text, "runstore store" and "format_version N".
std::string EncodeStoreMarker(uint32_t version);
// Parses a marker's contents into *version. Corruption (naming `file`) for
// anything that is not a marker; NotSupported for a version newer than this
// build's, saying which it reads. Lines after the version are ignored.
Status DecodeStoreMarker(std::string_view contents, std::string_view file, uint32_t* version);

// The segment format version written; segments of versions 1..this are read.
inline constexpr uint32_t kSegmentFormatVersion = 4;
// "versions 1 to 4", for NotSupported messages.
std::string ReadableVersions();

// Run encodings of a block's run column.
enum class RunEncoding : uint8_t { kInt = 0, kString = 1, kMixed = 2 };
// Block flags.
inline constexpr uint8_t kBlockKeysAscending = 1;  // (run, step) strictly ascending
// The run column (integer runs only) or the step column is stored as
// sequences: u64 count, then per sequence u64 end (exclusive record index),
// i64 first, i64 difference; record i of the sequence that starts at record
// s has first + (i - s) * difference (64-bit wrapping). Format version 2.
inline constexpr uint8_t kBlockRunSequences = 2;
inline constexpr uint8_t kBlockStepSequences = 4;
inline constexpr size_t kSequenceBytes = 24;
// The value data of the block's one numeric record is checksummed in chunks
// of 2^chunk_shift bytes, whose checksums follow the value column, so that a
// reader can check only the chunks it reads (docs/format.md "Value chunks").
// Format version 3.
inline constexpr uint8_t kBlockValueChunks = 8;
inline constexpr uint8_t kBlockKnownFlags = 15;
inline constexpr uint8_t kMinChunkShift = 12;  // 4 KiB
inline constexpr uint8_t kMaxChunkShift = 30;  // 1 GiB
// What writers use: 4 KiB, a page: a reader of a sample of an array reads and
// checks little more than the pages it touches, for a table of 8 bytes per
// 4 KiB (0.2%).
inline constexpr uint8_t kValueChunkShift = 12;

struct SegmentHeader {
  uint32_t version = 0;
  int64_t created_ns = 0;
  uint64_t sequence = 0;
  std::string writer_id;
  // The sequence of the segment of the same writer id that this writer
  // sealed before it created this one; 0 if none (its first segment, or one
  // whose predecessor it did not see sealed). A reader that finds that
  // segment without its seal knows it was damaged, not left open by a crash
  // (docs/format.md "Segment header").
  uint64_t sealed_predecessor = 0;
};
std::string EncodeSegmentHeader(const SegmentHeader& h);
// `file` names the segment in error messages.
Status DecodeSegmentHeader(std::string_view bytes, std::string_view file, SegmentHeader* h);

// The decoded header of a block frame (docs/format.md "Block frame").
struct BlockHeader {
  uint64_t payload_len = 0;       // stored bytes
  uint64_t payload_checksum = 0;  // XXH3-64 of the stored bytes
  uint64_t raw_len = 0;           // bytes after decompression
  uint32_t count = 0;
  DType dtype = DType::kFloat64;
  Codec codec = Codec::kNone;
  bool variable_shape = false;
  RunEncoding run_encoding = RunEncoding::kInt;
  uint8_t flags = 0;
  uint8_t chunk_shift = 0;    // with kBlockValueChunks; 0 otherwise
  std::vector<int64_t> dims;  // per-record shape of a fixed-shape block
  SeriesName name;
  int64_t min_step = 0;
  int64_t max_step = 0;
  Key min_key;
  Key max_key;
};

// Encodes the whole frame header (prefix, fields, checksum); its size is a
// multiple of 8 and at most kMaxFrameHeaderSize.
std::string EncodeBlockHeader(const BlockHeader& h);
// Decodes a block frame header whose prefix and checksum were already checked.
// With `names`, the header's name is that table's string for it, shared with
// the other headers decoded through the table.
Status DecodeBlockHeader(std::string_view header, BlockHeader* h, NameTable* names = nullptr);

struct CommitRecord {
  uint64_t sequence = 0;            // 1, 2, ... within the segment
  int64_t time_ns = 0;              // strictly increasing per writer
  uint64_t first_frame_offset = 0;  // where this commit's frames begin
  uint32_t frame_count = 0;
  // Flag bit 0: when the record was written, the file's bytes before
  // first_frame_offset were not all synced yet (a Writer::Flush came before
  // it). Clear: they were, so the record proves them durable.
  bool unsynced_before = false;
  uint64_t frames_digest = 0;  // XXH3 of the frames' header checksums
};
inline constexpr uint32_t kCommitUnsyncedBefore = 1;
std::string EncodeCommitRecord(const CommitRecord& c);
Status DecodeCommitRecord(std::string_view header, CommitRecord* c);

struct FooterHeader {
  uint64_t payload_len = 0;
  uint64_t payload_checksum = 0;
  uint64_t commit_count = 0;
  uint64_t block_count = 0;
  uint64_t committed_end = 0;
};
std::string EncodeFooterHeader(const FooterHeader& f);
Status DecodeFooterHeader(std::string_view header, FooterHeader* f);

// docs/format.md "Footer sections" (version 4): after the footer's block
// entries, sections of `u32 tag, u32 flags, u64 length, bytes, pad to 8`.
inline constexpr uint32_t kFooterSectionRunIndex = 1;  // docs/format.md "Run index"
inline constexpr uint32_t kFooterSectionReplaces = 2;  // segments a compacted one replaces
// Segments its compacted inputs replaced that were gone when it ran (optional:
// readers resolve without it; sync and new writers read it).
inline constexpr uint32_t kFooterSectionReplacedEarlier = 3;
// Unsealed segments a compaction adopted, with the committed length it merged
// of each (optional: readers of an earlier version take the adoption as
// whole, which the caller of the compaction asserted).
inline constexpr uint32_t kFooterSectionAdopted = 4;
// The run index with blocks of the same runs sharing one list (optional:
// readers of an earlier version rebuild the lists from the blocks, as for a
// footer without a run index); what writers write in place of tag 1.
inline constexpr uint32_t kFooterSectionSharedRunIndex = 5;
// Flag bit 0: a reader that does not know the tag may ignore the section
// (it only adds information); without it an unknown tag is refused.
inline constexpr uint32_t kFooterSectionOptional = 1;
inline constexpr size_t kFooterSectionHeaderSize = 16;
// The first version whose footers may hold sections.
inline constexpr uint32_t kFirstVersionWithSections = 4;
std::string EncodeFooterSection(uint32_t tag, uint32_t flags, std::string_view bytes);
// Appends the 16-byte section header alone, for a writer that appends the
// section's `length` bytes (and its padding) itself.
void AppendFooterSectionHeader(std::string* dst, uint32_t tag, uint32_t flags, uint64_t length);

struct Trailer {
  uint64_t footer_offset = 0;
  uint32_t version = 0;
};
std::string EncodeTrailer(const Trailer& t);
// False if the bytes are not a valid trailer (not sealed, or damaged).
bool DecodeTrailer(std::string_view bytes, Trailer* t);

// The common prefix of every frame, decoded and checked.
struct FramePrefix {
  FrameKind kind;
  uint16_t header_len;
  uint64_t payload_len;
  uint64_t payload_checksum;
};
// Checks the magic, kind, header length and header checksum of the frame
// header in `header` (exactly header_len bytes, read after PeekHeaderLength).
Status CheckFrameHeader(std::string_view header, FramePrefix* prefix);
// Reads the header length from the first 8 bytes of a frame; 0 if the magic
// or kind is wrong.
uint16_t PeekHeaderLength(std::string_view first8);
// The checksum stored in the last 8 bytes of a frame header.
uint64_t StoredHeaderChecksum(std::string_view header);

// Where the payload of a frame at `offset` starts and where the next frame does.
inline uint64_t PayloadOffset(uint64_t frame_offset, uint16_t header_len) {
  return frame_offset + ((header_len + kFrameAlign - 1) / kFrameAlign) * kFrameAlign;
}
inline uint64_t NextFrameOffset(uint64_t payload_offset, uint64_t payload_len) {
  return payload_offset + ((payload_len + kFrameAlign - 1) / kFrameAlign) * kFrameAlign;
}

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_FORMAT_H_
