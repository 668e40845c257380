#include "format/format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "codec/codec.h"
#include "util/coding.h"
#include "util/hash.h"
#include "util/shape.h"
#include "util/utf8.h"

namespace runstore::format {
namespace {

void PutPrefix(std::string* dst, FrameKind kind, uint16_t header_len, uint64_t payload_len,
               uint64_t payload_checksum) {
  PutFixed<uint32_t>(dst, kFrameMagic);
  PutFixed<uint8_t>(dst, static_cast<uint8_t>(kind));
  PutFixed<uint8_t>(dst, 0);
  PutFixed<uint16_t>(dst, header_len);
  PutFixed<uint64_t>(dst, payload_len);
  PutFixed<uint64_t>(dst, payload_checksum);
}

// Pads to a multiple of 8 minus the checksum, patches header_len and appends
// the checksum of everything before it.
void FinishHeader(std::string* h) {
  h->resize(AlignUp(h->size(), 8), '\0');
  uint16_t len = static_cast<uint16_t>(h->size() + 8);
  EncodeFixed<uint16_t>(h->data() + 6, len);
  PutFixed<uint64_t>(h, Checksum(*h));
}

void PutKey(std::string* dst, const Key& k) {
  if (k.run.is_int()) {
    PutFixed<uint8_t>(dst, 0);
    PutFixed<int64_t>(dst, k.run.int_value());
  } else {
    PutFixed<uint8_t>(dst, 1);
    PutString16(dst, k.run.string_value());
  }
  PutFixed<int64_t>(dst, k.step);
}

bool GetKey(Decoder* d, Key* k) {
  uint8_t kind;
  if (!d->Get(&kind)) return false;
  if (kind == 0) {
    int64_t i;
    if (!d->Get(&i)) return false;
    k->run = StoredRun(i);
  } else if (kind == 1) {
    std::string_view s;
    if (!d->GetString16(&s) || s.size() > kMaxRunIdLength || !IsValidUtf8(s)) return false;
    k->run = StoredRun(s);
  } else {
    return false;
  }
  return d->Get(&k->step);
}

}  // namespace

std::string SegmentFileName(std::string_view writer_id, uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%08llu.rss", static_cast<unsigned long long>(seq));
  return std::string(writer_id) + buf;
}

bool ParseSegmentFileName(std::string_view name, std::string* writer_id, uint64_t* seq) {
  constexpr std::string_view kExt = ".rss";
  if (name.size() < kExt.size() + 10 || !name.ends_with(kExt)) return false;
  std::string_view stem = name.substr(0, name.size() - kExt.size());
  size_t dash = stem.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || stem.size() - dash - 1 < 8) return false;
  uint64_t v = 0;
  for (char c : stem.substr(dash + 1)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *writer_id = std::string(stem.substr(0, dash));
  *seq = v;
  return true;
}

std::string EncodeSegmentHeader(const SegmentHeader& h) {
  std::string s(kSegmentHeaderSize, '\0');
  std::memcpy(s.data(), kSegmentMagic, 8);
  EncodeFixed<uint32_t>(s.data() + 8, h.version);
  EncodeFixed<uint32_t>(s.data() + 12, static_cast<uint32_t>(kSegmentHeaderSize));
  EncodeFixed<int64_t>(s.data() + 16, h.created_ns);
  EncodeFixed<uint64_t>(s.data() + 24, h.sequence);
  EncodeFixed<uint16_t>(s.data() + 32, static_cast<uint16_t>(h.writer_id.size()));
  std::memcpy(s.data() + 40, h.writer_id.data(), std::min(h.writer_id.size(), kMaxWriterIdLength));
  EncodeFixed<uint64_t>(s.data() + 104, h.sealed_predecessor);
  EncodeFixed<uint64_t>(s.data() + 120, Checksum(s.data(), 120));
  return s;
}

std::string AtOffset(std::string_view file, uint64_t offset) {
  return std::string(file) + ": offset " + std::to_string(offset) + ": ";
}

std::string EncodeStoreMarker(uint32_t version) {
  return "runstore store\nformat_version " + std::to_string(version) + "\n";
}

Status DecodeStoreMarker(std::string_view contents, std::string_view file, uint32_t* version) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(std::string(file) + ": " + what);
  };
  constexpr std::string_view kFirst = "runstore store\n";
  constexpr std::string_view kKey = "format_version ";
  if (!contents.starts_with(kFirst)) return corrupt("not a runstore marker file");
  std::string_view line = contents.substr(kFirst.size());
  line = line.substr(0, line.find('\n'));
  if (!line.starts_with(kKey))
    return corrupt("not a runstore marker file (no format_version line)");
  const std::string_view digits = line.substr(kKey.size());
  uint64_t v = 0;
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::string shown;  // printable, whatever the file holds
    for (char c : digits.substr(0, 32)) {
      if (c >= 0x20 && c < 0x7f) {
        shown += c;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
        shown += buf;
      }
    }
    return corrupt("unreadable format version '" + shown + "'");
  }
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  if (v == 0) return corrupt("unreadable format version 0");
  if (v > kSegmentFormatVersion) {
    return Status::NotSupported(std::string(file) + ": store format version " + std::to_string(v) +
                                " is newer than this build of runstore, which reads " +
                                ReadableVersions() + "; upgrade runstore");
  }
  *version = static_cast<uint32_t>(v);
  return Status::OK();
}

std::string ReadableVersions() { return "versions 1 to " + std::to_string(kSegmentFormatVersion); }

Status DecodeSegmentHeader(std::string_view b, std::string_view file, SegmentHeader* h) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(std::string(file) + ": offset 0: " + what);
  };
  if (b.size() < kSegmentHeaderSize) {
    return corrupt("file of " + std::to_string(b.size()) + " bytes is shorter than the " +
                   std::to_string(kSegmentHeaderSize) + "-byte segment header");
  }
  if (std::memcmp(b.data(), kSegmentMagic, 8) != 0) {
    return corrupt("not a runstore segment (bad magic)");
  }
  h->version = DecodeFixed<uint32_t>(b.data() + 8);
  uint64_t stored = DecodeFixed<uint64_t>(b.data() + 120);
  if (stored != Checksum(b.data(), 120)) return corrupt("segment header checksum mismatch");
  if (h->version == 0 || h->version > kSegmentFormatVersion) {
    return Status::NotSupported(std::string(file) + ": segment format version " +
                                std::to_string(h->version) +
                                " is not supported; this build reads " + ReadableVersions());
  }
  if (DecodeFixed<uint32_t>(b.data() + 12) != kSegmentHeaderSize) {
    return corrupt("unexpected segment header size");
  }
  h->created_ns = DecodeFixed<int64_t>(b.data() + 16);
  h->sequence = DecodeFixed<uint64_t>(b.data() + 24);
  uint16_t id_len = DecodeFixed<uint16_t>(b.data() + 32);
  if (id_len == 0 || id_len > kMaxWriterIdLength) return corrupt("bad writer id length");
  h->writer_id.assign(b.data() + 40, id_len);
  for (char c : h->writer_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return corrupt("writer id holds a byte other than [A-Za-z0-9._-]");
    }
  }
  h->sealed_predecessor = DecodeFixed<uint64_t>(b.data() + 104);
  if (h->sealed_predecessor >= h->sequence) {
    return corrupt("sealed predecessor " + std::to_string(h->sealed_predecessor) +
                   " is not before the segment's own sequence " + std::to_string(h->sequence));
  }
  return Status::OK();
}

std::string EncodeBlockHeader(const BlockHeader& h) {
  std::string s;
  s.reserve(128 + h.name.size());
  PutPrefix(&s, FrameKind::kBlock, 0, h.payload_len, h.payload_checksum);
  PutFixed<uint64_t>(&s, h.raw_len);
  PutFixed<uint32_t>(&s, h.count);
  PutFixed<uint8_t>(&s, static_cast<uint8_t>(h.dtype));
  PutFixed<uint8_t>(&s, static_cast<uint8_t>(h.codec));
  PutFixed<uint8_t>(&s, h.variable_shape ? 1 : 0);
  PutFixed<uint8_t>(&s, static_cast<uint8_t>(h.run_encoding));
  PutFixed<uint8_t>(&s, h.flags);
  PutFixed<uint8_t>(&s, static_cast<uint8_t>(h.dims.size()));
  PutFixed<uint16_t>(&s, static_cast<uint16_t>(h.name.size()));
  PutFixed<uint8_t>(&s, h.chunk_shift);
  s.append(3, '\0');  // reserved
  PutFixed<int64_t>(&s, h.min_step);
  PutFixed<int64_t>(&s, h.max_step);
  for (int64_t d : h.dims) PutFixed<int64_t>(&s, d);
  s.append(h.name);
  PutKey(&s, h.min_key);
  PutKey(&s, h.max_key);
  FinishHeader(&s);
  return s;
}

Status DecodeBlockHeader(std::string_view header, BlockHeader* h, NameTable* names) {
  Decoder d(header.substr(0, header.size() - 8));
  d.Skip(8);
  uint8_t dtype, codec, shape_kind, run_enc, rank;
  uint16_t name_len;
  uint8_t reserved[3];
  if (!d.Get(&h->payload_len) || !d.Get(&h->payload_checksum) || !d.Get(&h->raw_len) ||
      !d.Get(&h->count) || !d.Get(&dtype) || !d.Get(&codec) || !d.Get(&shape_kind) ||
      !d.Get(&run_enc) || !d.Get(&h->flags) || !d.Get(&rank) || !d.Get(&name_len) ||
      !d.Get(&h->chunk_shift) || !d.Get(&reserved[0]) || !d.Get(&reserved[1]) ||
      !d.Get(&reserved[2]) || !d.Get(&h->min_step) || !d.Get(&h->max_step)) {
    return Status::Corruption("block header truncated");
  }
  if (!IsValidDType(dtype))
    return Status::Corruption("block header: invalid dtype " + std::to_string(dtype));
  if (codec > 2) return Status::Corruption("block header: invalid codec " + std::to_string(codec));
  if (shape_kind > 1) return Status::Corruption("block header: invalid shape kind");
  if (run_enc > 2) return Status::Corruption("block header: invalid run encoding");
  if ((h->flags & ~kBlockKnownFlags) != 0 ||
      ((h->flags & kBlockRunSequences) && run_enc != static_cast<uint8_t>(RunEncoding::kInt))) {
    return Status::Corruption("block header: invalid flags " + std::to_string(h->flags));
  }
  if (rank > kMaxRank)
    return Status::Corruption("block header: rank " + std::to_string(rank) + " exceeds 32");
  if (h->count == 0) return Status::Corruption("block header: zero records");
  h->dtype = static_cast<DType>(dtype);
  h->codec = static_cast<Codec>(codec);
  h->variable_shape = shape_kind == 1;
  h->run_encoding = static_cast<RunEncoding>(run_enc);
  h->dims.resize(rank);
  for (auto& dim : h->dims) {
    if (!d.Get(&dim) || dim < 0) return Status::Corruption("block header: bad dimension");
  }
  if (uint64_t bytes; !IsVarLength(h->dtype) && !ShapeBytes(h->dims, DTypeSize(h->dtype), &bytes)) {
    return Status::Corruption("block header: record shape holds more than 2^48 bytes");
  }
  std::string_view name;
  if (name_len == 0 || name_len > kMaxNameLength || !d.GetBytes(name_len, &name)) {
    return Status::Corruption("block header: bad series name length");
  }
  if (!ValidateSeriesName(name, /*allow_reserved=*/true).ok()) {
    return Status::Corruption("block header: series name is not valid UTF-8 or holds a NUL");
  }
  h->name = names != nullptr ? names->Intern(name) : SeriesName(std::string(name));
  if (!GetKey(&d, &h->min_key) || !GetKey(&d, &h->max_key)) {
    return Status::Corruption("block header: bad key range");
  }
  if (h->flags & kBlockValueChunks) {
    if (h->count != 1 || IsVarLength(h->dtype) || h->codec != Codec::kNone ||
        h->chunk_shift < kMinChunkShift || h->chunk_shift > kMaxChunkShift) {
      return Status::Corruption(
          "block header: value chunks need one uncompressed numeric record and a chunk shift "
          "of 12..30 (count " +
          std::to_string(h->count) + ", chunk shift " + std::to_string(h->chunk_shift) + ")");
    }
  } else if (h->chunk_shift != 0) {
    return Status::Corruption("block header: chunk shift " + std::to_string(h->chunk_shift) +
                              " without value chunks");
  }
  if (h->codec == Codec::kNone && h->raw_len != h->payload_len) {
    return Status::Corruption("block header: uncompressed block with raw size " +
                              std::to_string(h->raw_len) + " != stored size " +
                              std::to_string(h->payload_len));
  }
  // Declared sizes are checked against what the stored bytes can hold before
  // anyone allocates them (docs/format.md "Block frame"): the raw size
  // against the codec's largest expansion, the record count against the raw
  // size (every record takes at least one byte of it).
  if (h->raw_len > MaxRawSize(h->codec, h->payload_len)) {
    return Status::Corruption("block header: " + std::string(CodecName(h->codec)) + " payload of " +
                              std::to_string(h->payload_len) + " bytes cannot hold a raw size of " +
                              std::to_string(h->raw_len));
  }
  if (h->count > h->raw_len) {
    return Status::Corruption("block header: " + std::to_string(h->count) +
                              " records cannot fit in a raw payload of " +
                              std::to_string(h->raw_len) + " bytes");
  }
  return Status::OK();
}

std::string EncodeCommitRecord(const CommitRecord& c) {
  std::string s;
  PutPrefix(&s, FrameKind::kCommit, 0, 0, 0);
  PutFixed<uint64_t>(&s, c.sequence);
  PutFixed<int64_t>(&s, c.time_ns);
  PutFixed<uint64_t>(&s, c.first_frame_offset);
  PutFixed<uint32_t>(&s, c.frame_count);
  PutFixed<uint32_t>(&s, c.unsynced_before ? kCommitUnsyncedBefore : 0);
  PutFixed<uint64_t>(&s, c.frames_digest);
  FinishHeader(&s);
  return s;
}

Status DecodeCommitRecord(std::string_view header, CommitRecord* c) {
  if (header.size() != kCommitHeaderSize) return Status::Corruption("commit record has wrong size");
  const char* p = header.data();
  c->sequence = DecodeFixed<uint64_t>(p + 24);
  c->time_ns = DecodeFixed<int64_t>(p + 32);
  c->first_frame_offset = DecodeFixed<uint64_t>(p + 40);
  c->frame_count = DecodeFixed<uint32_t>(p + 48);
  const uint32_t flags = DecodeFixed<uint32_t>(p + 52);
  if ((flags & ~kCommitUnsyncedBefore) != 0) {
    return Status::Corruption("commit record has unknown flags " + std::to_string(flags));
  }
  c->unsynced_before = (flags & kCommitUnsyncedBefore) != 0;
  c->frames_digest = DecodeFixed<uint64_t>(p + 56);
  return Status::OK();
}

std::string EncodeFooterHeader(const FooterHeader& f) {
  std::string s;
  PutPrefix(&s, FrameKind::kFooter, 0, f.payload_len, f.payload_checksum);
  PutFixed<uint64_t>(&s, f.commit_count);
  PutFixed<uint64_t>(&s, f.block_count);
  PutFixed<uint64_t>(&s, f.committed_end);
  FinishHeader(&s);
  return s;
}

void AppendFooterSectionHeader(std::string* dst, uint32_t tag, uint32_t flags, uint64_t length) {
  PutFixed<uint32_t>(dst, tag);
  PutFixed<uint32_t>(dst, flags);
  PutFixed<uint64_t>(dst, length);
}

std::string EncodeFooterSection(uint32_t tag, uint32_t flags, std::string_view bytes) {
  std::string s;
  AppendFooterSectionHeader(&s, tag, flags, bytes.size());
  s.append(bytes);
  s.resize(AlignUp(s.size(), 8), '\0');
  return s;
}

Status DecodeFooterHeader(std::string_view header, FooterHeader* f) {
  if (header.size() != kFooterHeaderSize) return Status::Corruption("footer header has wrong size");
  const char* p = header.data();
  f->payload_len = DecodeFixed<uint64_t>(p + 8);
  f->payload_checksum = DecodeFixed<uint64_t>(p + 16);
  f->commit_count = DecodeFixed<uint64_t>(p + 24);
  f->block_count = DecodeFixed<uint64_t>(p + 32);
  f->committed_end = DecodeFixed<uint64_t>(p + 40);
  return Status::OK();
}

std::string EncodeTrailer(const Trailer& t) {
  std::string s(kTrailerSize, '\0');
  EncodeFixed<uint64_t>(s.data(), t.footer_offset);
  EncodeFixed<uint32_t>(s.data() + 8, t.version);
  std::memcpy(s.data() + 16, kTrailerMagic, 8);
  EncodeFixed<uint64_t>(s.data() + 24, Checksum(s.data(), 24));
  return s;
}

bool DecodeTrailer(std::string_view b, Trailer* t) {
  if (b.size() != kTrailerSize) return false;
  if (std::memcmp(b.data() + 16, kTrailerMagic, 8) != 0) return false;
  if (DecodeFixed<uint64_t>(b.data() + 24) != Checksum(b.data(), 24)) return false;
  t->footer_offset = DecodeFixed<uint64_t>(b.data());
  t->version = DecodeFixed<uint32_t>(b.data() + 8);
  return true;
}

uint16_t PeekHeaderLength(std::string_view first8) {
  if (first8.size() < 8) return 0;
  if (DecodeFixed<uint32_t>(first8.data()) != kFrameMagic) return 0;
  uint8_t kind = static_cast<uint8_t>(first8[4]);
  if (kind < 1 || kind > 3) return 0;
  uint16_t len = DecodeFixed<uint16_t>(first8.data() + 6);
  if (len < kFramePrefixSize + 8 || len > kMaxFrameHeaderSize || len % 8 != 0) return 0;
  return len;
}

uint64_t StoredHeaderChecksum(std::string_view header) {
  return DecodeFixed<uint64_t>(header.data() + header.size() - 8);
}

Status CheckFrameHeader(std::string_view header, FramePrefix* prefix) {
  uint16_t len = PeekHeaderLength(header);
  if (len == 0 || len != header.size())
    return Status::Corruption("bad frame magic or header length");
  if (StoredHeaderChecksum(header) != Checksum(header.data(), header.size() - 8)) {
    return Status::Corruption("frame header checksum mismatch");
  }
  prefix->kind = static_cast<FrameKind>(header[4]);
  prefix->header_len = len;
  prefix->payload_len = DecodeFixed<uint64_t>(header.data() + 8);
  prefix->payload_checksum = DecodeFixed<uint64_t>(header.data() + 16);
  return Status::OK();
}

}  // namespace runstore::format
