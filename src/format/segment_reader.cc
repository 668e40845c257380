#include "format/segment_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "format/block.h"
#include "format/block_reader.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {
namespace {

// Reads exactly n bytes at offset into *buf; *complete is false if the file
// ends first (not an error: recovery treats it as a torn tail).
Status ReadAt(const RandomAccessFile& file, uint64_t offset, size_t n, std::string* buf,
              std::string_view* out, bool* complete) {
  buf->resize(n);
  RUNSTORE_RETURN_IF_ERROR(file.Read(offset, n, buf->data(), out));
  *complete = out->size() == n;
  return Status::OK();
}

struct FrameAt {
  bool valid = false;
  FramePrefix prefix{};
  std::string header;
};

// Reads and checks the frame header at pos; frame.valid is false when the
// bytes there are not a complete, checksummed frame header.
Status ReadFrame(const RandomAccessFile& file, uint64_t pos, uint64_t file_size, FrameAt* frame) {
  frame->valid = false;
  if (!RangeWithin(pos, kFramePrefixSize + 8, file_size)) return Status::OK();
  std::string buf;
  std::string_view got;
  bool complete;
  RUNSTORE_RETURN_IF_ERROR(ReadAt(file, pos, 8, &buf, &got, &complete));
  if (!complete) return Status::OK();
  uint16_t len = PeekHeaderLength(got);
  if (len == 0 || !RangeWithin(pos, len, file_size)) return Status::OK();
  RUNSTORE_RETURN_IF_ERROR(ReadAt(file, pos, len, &buf, &got, &complete));
  if (!complete) return Status::OK();
  if (!CheckFrameHeader(got, &frame->prefix).ok()) return Status::OK();
  frame->header.assign(got);
  frame->valid = true;
  return Status::OK();
}

bool AllZero(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
}

// What lies past a damaged frame at `from`.
struct LaterRecords {
  bool any_commit = false;  // a valid commit record
  // A valid record written only after the bytes at `from` were synced: a
  // footer, or a commit record without unsynced_before whose frames begin
  // past `from`. Empty if none.
  std::string proof;
};

Status FindLaterRecords(const RandomAccessFile& file, uint64_t from, uint64_t file_size,
                        LaterRecords* later) {
  *later = LaterRecords();
  constexpr size_t kChunk = 1 << 20;
  std::string buf;
  std::string_view got;
  bool complete;
  for (uint64_t base = AlignUp(from + 1, kFrameAlign); base < file_size; base += kChunk) {
    // The holes of a sparse file hold no record: a file cut or extended by
    // a huge hole (truncate -s 256G) is scanned in the time its data takes.
    const uint64_t data = file.NextData(base);
    if (data >= file_size) break;
    if (data > base) base = data / kFrameAlign * kFrameAlign;
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, file_size - base));
    RUNSTORE_RETURN_IF_ERROR(ReadAt(file, base, n, &buf, &got, &complete));
    for (size_t off = 0; off + 8 <= got.size(); off += kFrameAlign) {
      if (DecodeFixed<uint32_t>(got.data() + off) != kFrameMagic ||
          (got[off + 4] != static_cast<char>(FrameKind::kCommit) &&
           got[off + 4] != static_cast<char>(FrameKind::kFooter))) {
        continue;
      }
      FrameAt frame;
      RUNSTORE_RETURN_IF_ERROR(ReadFrame(file, base + off, file_size, &frame));
      if (!frame.valid) continue;
      const uint64_t at = base + off;
      CommitRecord c;
      if (frame.prefix.kind == FrameKind::kCommit && DecodeCommitRecord(frame.header, &c).ok()) {
        later->any_commit = true;
        if (!c.unsynced_before && c.first_frame_offset > from && later->proof.empty()) {
          later->proof = "commit " + std::to_string(c.sequence) + " at offset " +
                         std::to_string(at) + ", written after the bytes before it were synced";
        }
      }
      // A valid footer is written only after every commit before it was
      // synced: whatever damage precedes it is not a torn tail.
      FooterHeader f;
      if (frame.prefix.kind == FrameKind::kFooter && DecodeFooterHeader(frame.header, &f).ok() &&
          f.committed_end == at && later->proof.empty()) {
        later->proof = "a footer at offset " + std::to_string(at);
      }
    }
  }
  return Status::OK();
}

// Where the walk of recovery stopped.
struct WalkEnd {
  uint64_t pos = 0;         // the first frame not accepted
  bool saw_footer = false;  // it is a footer (rule 5)
};

// Rules 1-5 of docs/format.md "Recovery": walks the frames from
// index->committed_end, collecting blocks as pending and accepting each
// commit record whose sequence, time, extent, frame count and digest are
// those it must have. Stops at the first frame that is not complete and
// checksummed, at a commit that does not fit, or at a footer.
Status WalkFrames(const RandomAccessFile& file, const std::string& name, uint64_t file_size,
                  SegmentIndex* index, WalkEnd* end) {
  uint64_t pos = index->committed_end;
  std::vector<BlockInfo> pending;
  std::vector<uint64_t> digests;
  // New blocks share the names of the last commit's (a writer logs the same
  // series commit after commit), and one another's.
  NameTable names;
  for (auto it = index->blocks.rbegin();
       it != index->blocks.rend() && it->commit_index + 1 == index->commits.size(); ++it) {
    names.Share(it->header.name);
  }
  while (true) {
    FrameAt frame;
    RUNSTORE_RETURN_IF_ERROR(ReadFrame(file, pos, file_size, &frame));
    if (!frame.valid) break;
    const uint64_t payload_off = PayloadOffset(pos, frame.prefix.header_len);
    if (!RangeWithin(payload_off, frame.prefix.payload_len, file_size)) break;
    // The padding counts (docs/format.md "Recovery", rule 2): a commit
    // accepted short of it would put committed_end past the end of the file,
    // and the store maps [0, committed_end). No overflow: the payload ends
    // inside the file, and aligning adds less than 64.
    const uint64_t next = NextFrameOffset(payload_off, frame.prefix.payload_len);
    if (next > file_size) break;
    if (frame.prefix.kind == FrameKind::kBlock) {
      BlockInfo b;
      b.frame_offset = pos;
      b.payload_offset = payload_off;
      b.header_len = frame.prefix.header_len;
      // A header whose checksum holds but whose fields do not is no torn
      // write (that would fail the checksum): a writer wrote it so.
      if (Status d = DecodeBlockHeader(frame.header, &b.header, &names); !d.ok()) {
        return d.WithContext(AtOffset(name, pos));
      }
      pending.push_back(std::move(b));
      digests.push_back(StoredHeaderChecksum(frame.header));
    } else if (frame.prefix.kind == FrameKind::kCommit) {
      CommitRecord c;
      if (Status d = DecodeCommitRecord(frame.header, &c); !d.ok()) {
        return d.WithContext(AtOffset(name, pos));
      }
      const uint64_t last_seq = index->commits.empty() ? 0 : index->commits.back().sequence;
      const int64_t last_time = index->commits.empty() ? INT64_MIN : index->commits.back().time_ns;
      if (c.sequence != last_seq + 1 || c.first_frame_offset != index->committed_end ||
          c.frame_count != pending.size() || c.time_ns <= last_time ||
          c.frames_digest != Checksum(digests.data(), digests.size() * 8)) {
        break;
      }
      const uint32_t ci = static_cast<uint32_t>(index->commits.size());
      for (auto& b : pending) {
        b.commit_index = ci;
        index->blocks.push_back(std::move(b));
      }
      pending.clear();
      digests.clear();
      index->commits.push_back(CommitInfo{c.sequence, c.time_ns, next, c.unsynced_before});
      index->committed_end = next;
    } else {
      end->saw_footer = true;
      break;
    }
    pos = next;
  }
  end->pos = pos;
  return Status::OK();
}

// Rule 6: the commits whose payloads may be torn though their records are
// intact (the newest one, from `first_new_commit` on, whose record proves
// the bytes before its frames synced, and the flushes after it) have their
// payloads checked in order; the first that fails is dropped with every
// commit after it, and the walk's end moves back to the last one kept.
Status CheckCommitsInFlight(const RandomAccessFile& file, const std::string& name,
                            size_t first_new_commit, SegmentIndex* index, WalkEnd* end) {
  size_t check_from = first_new_commit;
  for (size_t c = index->commits.size(); c-- > first_new_commit;) {
    if (!index->commits[c].unsynced_before) {
      check_from = c;
      break;
    }
  }
  if (index->commits.size() <= check_from) return Status::OK();
  size_t first_block = index->blocks.size();
  while (first_block > 0 && index->blocks[first_block - 1].commit_index >= check_from) {
    --first_block;
  }
  std::string buf;
  size_t torn_block = index->blocks.size();
  for (size_t i = first_block; i < index->blocks.size(); ++i) {
    const BlockInfo& b = index->blocks[i];
    std::string_view got;
    bool complete;
    RUNSTORE_RETURN_IF_ERROR(
        ReadAt(file, b.payload_offset, b.header.payload_len, &buf, &got, &complete));
    if (!complete || !CheckPayload(got, b, name).ok()) {
      torn_block = i;
      break;
    }
  }
  if (torn_block == index->blocks.size()) return Status::OK();
  if (end->saw_footer) {
    return Status::Corruption(
        AtOffset(name, index->blocks[torn_block].payload_offset) + "payload of commit " +
        std::to_string(index->commits[index->blocks[torn_block].commit_index].sequence) +
        " is damaged, but a valid footer follows");
  }
  const uint32_t torn_commit = index->blocks[torn_block].commit_index;
  while (!index->blocks.empty() && index->blocks.back().commit_index >= torn_commit) {
    index->blocks.pop_back();
  }
  index->commits.resize(torn_commit);
  index->committed_end =
      index->commits.empty() ? kSegmentHeaderSize : index->commits.back().end_offset;
  end->pos = index->committed_end;
  return Status::OK();
}

// Rule 7: a damaged frame is a torn tail only if nothing after it proves it
// synced (a commit record that says everything before its frames was
// synced when it was written, or a footer); otherwise committed data is
// damaged.
Status CheckNothingProvesTheTailSynced(const RandomAccessFile& file, const std::string& name,
                                       uint64_t file_size, const SegmentIndex& index,
                                       const WalkEnd& end) {
  if (end.saw_footer || end.pos >= file_size) return Status::OK();
  LaterRecords later;
  RUNSTORE_RETURN_IF_ERROR(FindLaterRecords(file, end.pos, file_size, &later));
  if (later.proof.empty()) return Status::OK();
  const uint64_t last_seq = index.commits.empty() ? 0 : index.commits.back().sequence;
  return Status::Corruption(AtOffset(name, end.pos) + "damaged frame after commit " +
                            std::to_string(last_seq) + ", but " + later.proof + " follows");
}

// Recovery of a segment that was never sealed (docs/format.md "Recovery"),
// from index->committed_end on: the walk, the check of the commits in
// flight, and the search for a proof that the tail was synced.
Status Recover(const RandomAccessFile& file, const std::string& name, uint64_t file_size,
               SegmentIndex* index) {
  const size_t first_new_commit = index->commits.size();
  WalkEnd end;
  RUNSTORE_RETURN_IF_ERROR(WalkFrames(file, name, file_size, index, &end));
  RUNSTORE_RETURN_IF_ERROR(CheckCommitsInFlight(file, name, first_new_commit, index, &end));
  RUNSTORE_RETURN_IF_ERROR(CheckNothingProvesTheTailSynced(file, name, file_size, *index, end));
  index->sealed = false;
  return Status::OK();
}

// The sections after a version 4 footer's block entries (docs/format.md
// "Footer sections"), into *index; false with *error for bytes that are not
// sections of known tags.
bool DecodeFooterSections(Decoder* d, uint64_t blocks, SegmentIndex* index, std::string* error) {
  while (d->remaining() > 0) {
    uint32_t tag, flags;
    uint64_t len;
    std::string_view bytes, pad;
    if (!d->Get(&tag) || !d->Get(&flags) || !d->Get(&len) || len > d->remaining() ||
        !d->GetBytes(len, &bytes) || !d->GetBytes(AlignUp(len, 8) - len, &pad) || !AllZero(pad)) {
      *error = "section header or padding is damaged";
      return false;
    }
    if ((flags & ~kFooterSectionOptional) != 0) {
      *error = "section " + std::to_string(tag) + " has unknown flags " + std::to_string(flags);
      return false;
    }
    if (tag == kFooterSectionRunIndex || tag == kFooterSectionSharedRunIndex) {
      if (index->run_index) {
        *error = "two run indexes";
        return false;
      }
      auto ri = std::make_shared<RunIndex>();
      if (!(tag == kFooterSectionRunIndex ? DecodeRunIndex(bytes, blocks, ri.get(), error)
                                          : DecodeSharedRunIndex(bytes, blocks, ri.get(), error))) {
        return false;
      }
      index->run_index = std::move(ri);
    } else if (tag == kFooterSectionReplaces || tag == kFooterSectionReplacedEarlier ||
               tag == kFooterSectionAdopted) {
      if (!index->footer_sections.emplace(tag, std::string(bytes)).second) {
        *error = "section " + std::to_string(tag) + " appears twice";
        return false;
      }
    } else if (!(flags & kFooterSectionOptional)) {
      *error =
          "unknown section tag " + std::to_string(tag) + " (not marked as one a reader may ignore)";
      return false;
    }
  }
  return true;
}

// Reads the footer the trailer names into *index. *checksummed is set once
// the footer's header and payload checksums hold: a footer that fails after
// that was written so (a torn write fails a checksum), and is no torn seal.
Status LoadFooter(const RandomAccessFile& file, const std::string& name, uint64_t file_size,
                  const Trailer& t, SegmentIndex* index, bool* checksummed,
                  NameTable* shared_names = nullptr) {
  *checksummed = false;
  auto bad = [&](uint64_t off, const std::string& what) {
    return Status::Corruption(AtOffset(name, off) + what);
  };
  if (t.version == 0 || t.version > kSegmentFormatVersion) {
    return Status::NotSupported(name + ": segment format version " + std::to_string(t.version) +
                                " is not supported; this build reads " + ReadableVersions());
  }
  if (t.footer_offset < kSegmentHeaderSize || t.footer_offset % kFrameAlign != 0 ||
      t.footer_offset >= file_size) {
    return bad(file_size - kTrailerSize, "trailer names footer offset " +
                                             std::to_string(t.footer_offset) + " outside the file");
  }
  FrameAt frame;
  RUNSTORE_RETURN_IF_ERROR(ReadFrame(file, t.footer_offset, file_size, &frame));
  FooterHeader f;
  if (!frame.valid || frame.prefix.kind != FrameKind::kFooter ||
      !DecodeFooterHeader(frame.header, &f).ok()) {
    return bad(t.footer_offset, "footer header is damaged");
  }
  const uint64_t payload_off = PayloadOffset(t.footer_offset, frame.prefix.header_len);
  if (!RangeWithin(payload_off, f.payload_len, file_size - kTrailerSize) ||
      NextFrameOffset(payload_off, f.payload_len) + kTrailerSize != file_size ||
      f.committed_end != t.footer_offset) {
    return bad(t.footer_offset, "footer size does not match the file size");
  }
  std::string buf;
  std::string_view payload;
  bool complete;
  RUNSTORE_RETURN_IF_ERROR(ReadAt(file, payload_off, f.payload_len, &buf, &payload, &complete));
  if (!complete || Checksum(payload) != f.payload_checksum) {
    return bad(payload_off, "footer index checksum mismatch");
  }
  *checksummed = true;
  Decoder d(payload);
  if (f.commit_count > payload.size() / 24)
    return bad(payload_off, "footer commit count too large");
  index->commits.clear();
  index->blocks.clear();
  index->commits.reserve(f.commit_count);
  // Commits follow one another, each ending with its record; every block
  // lies inside the extent of its commit, after the blocks before it. So no
  // entry can name bytes outside the committed part of the file, or bytes of
  // another frame.
  constexpr uint64_t kCommitFrameBytes = AlignUp(kCommitHeaderSize, kFrameAlign);
  uint64_t prev_end = kSegmentHeaderSize;
  for (uint64_t i = 0; i < f.commit_count; ++i) {
    CommitInfo c;
    d.Get(&c.sequence);
    d.Get(&c.time_ns);
    d.Get(&c.end_offset);
    if (c.sequence != i + 1 || c.end_offset % kFrameAlign != 0 ||
        !RangeWithin(prev_end, kCommitFrameBytes, c.end_offset) || c.end_offset > f.committed_end ||
        (i > 0 && c.time_ns <= index->commits.back().time_ns)) {
      return bad(payload_off, "footer commit table is inconsistent");
    }
    prev_end = c.end_offset;
    index->commits.push_back(c);
  }
  if (prev_end != f.committed_end) {
    return bad(payload_off, "footer commit table does not end at the footer");
  }
  if (f.block_count > payload.size() / 16) return bad(payload_off, "footer block count too large");
  index->blocks.reserve(f.block_count);
  NameTable own_names;
  NameTable& names = shared_names != nullptr ? *shared_names : own_names;
  uint64_t prev_frame_end = kSegmentHeaderSize;
  for (uint64_t i = 0; i < f.block_count; ++i) {
    BlockInfo b;
    uint32_t header_len;
    std::string_view header;
    FramePrefix prefix;
    if (!d.Get(&b.frame_offset) || !d.Get(&header_len) || !d.Get(&b.commit_index) ||
        !d.GetBytes(header_len, &header) || !CheckFrameHeader(header, &prefix).ok() ||
        prefix.kind != FrameKind::kBlock || !DecodeBlockHeader(header, &b.header, &names).ok()) {
      return bad(payload_off, "footer block entry " + std::to_string(i) + " is damaged");
    }
    b.header_len = prefix.header_len;
    const bool in_commit =
        b.commit_index < index->commits.size() &&
        (index->blocks.empty() || b.commit_index >= index->blocks.back().commit_index);
    const uint64_t lo = !in_commit || b.commit_index == 0
                            ? kSegmentHeaderSize
                            : index->commits[b.commit_index - 1].end_offset;
    const uint64_t hi =
        in_commit ? index->commits[b.commit_index].end_offset - kCommitFrameBytes : 0;
    if (!in_commit || b.frame_offset % kFrameAlign != 0 ||
        b.frame_offset < std::max(lo, prev_frame_end) ||
        !RangeWithin(b.frame_offset, AlignUp(b.header_len, kFrameAlign), hi)) {
      return bad(payload_off,
                 "footer block entry " + std::to_string(i) + " points outside its commit");
    }
    b.payload_offset = PayloadOffset(b.frame_offset, prefix.header_len);
    if (!RangeWithin(b.payload_offset, b.header.payload_len, hi)) {
      return bad(payload_off,
                 "footer block entry " + std::to_string(i) + " points outside its commit");
    }
    prev_frame_end = NextFrameOffset(b.payload_offset, b.header.payload_len);
    index->blocks.push_back(std::move(b));
  }
  if (t.version < kFirstVersionWithSections) {
    if (d.remaining() != 0) return bad(payload_off, "trailing bytes in the footer index");
  } else {
    index->run_index.reset();
    index->footer_sections.clear();
    std::string error;
    if (!DecodeFooterSections(&d, f.block_count, index, &error)) {
      return bad(payload_off, "footer section: " + error);
    }
  }
  index->sealed = true;
  index->committed_end = f.committed_end;
  return Status::OK();
}

}  // namespace

Status LoadSegmentIndex(const RandomAccessFile& file, const std::string& name, SegmentIndex* index,
                        NameTable* names) {
  *index = SegmentIndex();
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  index->file_size = size;
  std::string buf;
  std::string_view got;
  bool complete;
  RUNSTORE_RETURN_IF_ERROR(
      ReadAt(file, 0, std::min<uint64_t>(size, kSegmentHeaderSize), &buf, &got, &complete));
  Status hs = DecodeSegmentHeader(got, name, &index->header);
  if (hs.code() == StatusCode::kNotSupported) return hs;
  index->committed_end = kSegmentHeaderSize;
  if (!hs.ok()) {
    // A writer that crashed right after creating the file leaves a short or
    // zero-filled header and nothing committed. Anything else is damage: a
    // header that is neither, or one in front of a commit record, a footer
    // or a trailer (a sealed segment whose header was zeroed must not read
    // as an empty one).
    const bool empty_header = size < kSegmentHeaderSize || AllZero(got);
    if (!empty_header &&
        std::memcmp(got.data(), kSegmentMagic, std::min<size_t>(got.size(), 8)) != 0) {
      return Status::Corruption(AtOffset(name, 0) + "not a runstore segment (bad magic)");
    }
    if (size > kSegmentHeaderSize) {
      LaterRecords later;
      RUNSTORE_RETURN_IF_ERROR(FindLaterRecords(file, 0, size, &later));
      if (!later.proof.empty()) {
        return Status::Corruption(AtOffset(name, 0) + "segment header is damaged, but " +
                                  later.proof + " follows");
      }
      if (later.any_commit) {
        return Status::Corruption(AtOffset(name, 0) +
                                  "segment header is damaged, but commit records follow");
      }
      if (HasValidTrailer(file)) {
        return Status::Corruption(AtOffset(name, 0) +
                                  "segment header is damaged, but the segment is sealed");
      }
    }
    // Nothing after the header was ever committed: the segment is empty,
    // whatever its header holds.
    index->file_size = size;
    // Nothing is committed; committed_end must not name bytes the file lacks
    // (the store maps [0, committed_end)).
    index->committed_end = std::min<uint64_t>(size, kSegmentHeaderSize);
    return Status::OK();
  }
  if (size >= kSegmentHeaderSize + kTrailerSize) {
    RUNSTORE_RETURN_IF_ERROR(
        ReadAt(file, size - kTrailerSize, kTrailerSize, &buf, &got, &complete));
    Trailer t;
    if (complete && DecodeTrailer(got, &t)) {
      bool checksummed;
      Status s = LoadFooter(file, name, size, t, index, &checksummed, names);
      if (s.ok() || s.code() != StatusCode::kCorruption || checksummed) return s;
      // A damaged footer: every frame before it was committed and synced
      // before the footer was written, so recovery must read up to the
      // footer; stopping earlier means committed data is damaged.
      index->commits.clear();
      index->blocks.clear();
      index->committed_end = kSegmentHeaderSize;
      RUNSTORE_RETURN_IF_ERROR(Recover(file, name, size, index));
      if (index->committed_end != t.footer_offset) {
        return Status::Corruption(AtOffset(name, index->committed_end) +
                                  "sealed segment (footer at offset " +
                                  std::to_string(t.footer_offset) +
                                  ") is damaged here, before its footer; " + s.message());
      }
      // Every commit is intact. The footer and trailer are written and synced
      // together, so a crash before that sync returned can leave the trailer
      // on disk and the footer torn: the seal is an unsynced tail, and the
      // segment reads as one whose writer crashed before sealing it.
      index->sealed = false;
      return Status::OK();
    }
  }
  return Recover(file, name, size, index);
}

bool HasValidTrailer(const RandomAccessFile& file) {
  auto size = file.Size();
  if (!size.ok() || *size < kSegmentHeaderSize + kTrailerSize) return false;
  std::string buf;
  std::string_view got;
  bool complete = false;
  Trailer t;
  return ReadAt(file, *size - kTrailerSize, kTrailerSize, &buf, &got, &complete).ok() && complete &&
         DecodeTrailer(got, &t);
}

bool ReadsAsSealed(const RandomAccessFile& file, const std::string& name) {
  if (!HasValidTrailer(file)) return false;
  SegmentIndex index;
  return LoadSegmentIndex(file, name, &index).ok() && index.sealed;
}

Status RefreshSegmentIndex(const RandomAccessFile& file, const std::string& name,
                           SegmentIndex* index) {
  if (index->sealed) return Status::OK();
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  if (size == index->file_size) return Status::OK();
  if (index->commits.empty()) return LoadSegmentIndex(file, name, index);
  // Segments only grow (docs/design.md#invariant-4): a file now shorter than
  // what was committed in it has lost committed bytes. Reading on would map
  // or recover past its end.
  if (size < index->committed_end) {
    return Status::Corruption(name + ": the segment shrank to " + std::to_string(size) +
                              " bytes, below its " + std::to_string(index->committed_end) +
                              " committed bytes, since it was last read");
  }
  index->file_size = size;
  // Sealed since: the footer covers everything, read it instead.
  if (size >= kSegmentHeaderSize + kTrailerSize) {
    std::string buf;
    std::string_view got;
    bool complete;
    RUNSTORE_RETURN_IF_ERROR(
        ReadAt(file, size - kTrailerSize, kTrailerSize, &buf, &got, &complete));
    Trailer t;
    if (complete && DecodeTrailer(got, &t)) {
      SegmentIndex sealed = *index;
      bool checksummed;
      Status s = LoadFooter(file, name, size, t, &sealed, &checksummed);
      if (s.ok()) {
        *index = std::move(sealed);
        return Status::OK();
      }
      if (s.code() != StatusCode::kCorruption || checksummed) return s;
      // A damaged footer behind a valid trailer: the rule of a fresh load
      // (recovery must reach the footer), not a torn-tail recovery.
      return LoadSegmentIndex(file, name, index);
    }
  }
  return Recover(file, name, size, index);
}

}  // namespace runstore::format
