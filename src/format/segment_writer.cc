#include "format/segment_writer.h"

#include <algorithm>
#include <cassert>
#include <functional>

#include "codec/codec.h"
#include "env/path.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {
namespace {
const char kZeros[kFrameAlign] = {};

// "<path>: <what>: <the error>": `what` said after the path, which an env's
// error already starts with (and which is added when it does not).
Status About(const Status& s, const std::string& path, const std::string& what) {
  std::string_view m = s.message();
  if (!m.starts_with(path)) return s.WithContext(path + ": " + what);
  m.remove_prefix(path.size());
  while (!m.empty() && (m.front() == ':' || m.front() == ' ')) m.remove_prefix(1);
  return Status(s.code(), path + ": " + what + ": " + std::string(m), s.sys_errno());
}
}  // namespace

SegmentWriter::SegmentWriter(std::unique_ptr<WritableFile> file, std::string path)
    : file_(std::move(file)), path_(std::move(path)) {}

Result<std::unique_ptr<SegmentWriter>> SegmentWriter::Create(Env* env, const std::string& path,
                                                             const SegmentHeader& header) {
  RUNSTORE_ASSIGN_OR_RETURN(auto file, env->NewWritableFile(path, /*exclusive=*/true));
  std::unique_ptr<SegmentWriter> w(new SegmentWriter(std::move(file), path));
  std::string h = EncodeSegmentHeader(header);
  RUNSTORE_RETURN_IF_ERROR(w->file_->Append(h));
  // The header is durable before the name is (EnsureSegment syncs the
  // directory next), so a power cut never leaves a durable name in front of a
  // torn header, which readers would take for a foreign file.
  RUNSTORE_RETURN_IF_ERROR(w->file_->Sync());
  w->offset_ = h.size();
  w->commit_start_ = w->offset_;
  w->synced_end_.store(w->offset_);
  return w;
}

Status SegmentWriter::WriteFrame(std::string_view header,
                                 const std::vector<std::string_view>& payload,
                                 uint64_t payload_len) {
  std::vector<std::string_view> pieces;
  pieces.reserve(payload.size() + 3);
  pieces.push_back(header);
  uint64_t header_pad = AlignUp(header.size(), kFrameAlign) - header.size();
  if (header_pad) pieces.emplace_back(kZeros, header_pad);
  for (auto p : payload) pieces.push_back(p);
  uint64_t payload_pad = AlignUp(payload_len, kFrameAlign) - payload_len;
  if (payload_pad) pieces.emplace_back(kZeros, payload_pad);
  Status s = file_->Append(pieces);
  if (!s.ok()) return s.WithContext(path_);
  offset_ += header.size() + header_pad + payload_len + payload_pad;
  return Status::OK();
}

Status SegmentWriter::AddBlock(BlockHeader* h, const std::vector<std::string_view>& raw,
                               std::span<const uint64_t> run_hashes, int zstd_level,
                               bool header_last, uint8_t chunk_shift) {
  assert(std::adjacent_find(run_hashes.begin(), run_hashes.end(), std::greater_equal<>()) ==
         run_hashes.end());
  const uint64_t frame_offset = offset_;
  std::vector<std::string_view> stored = raw;
  if (h->codec != Codec::kNone) {
    // Scratch buffers are reused from block to block (their size is bounded
    // by the block size).
    joined_.clear();
    for (auto p : raw) joined_.append(p);
    RUNSTORE_RETURN_IF_ERROR(compressor_.Compress(h->codec, zstd_level, joined_, &scratch_));
    if (scratch_.size() >= joined_.size()) {
      h->codec = Codec::kNone;  // incompressible: store raw so that reads are zero-copy
    } else {
      stored.assign(1, scratch_);
    }
  }
  uint64_t len = 0;
  for (auto p : stored) len += p.size();
  // Value chunks (docs/format.md "Value chunks"): the value data, the last
  // raw piece, is followed by padding and a checksum per chunk.
  const bool chunked = chunk_shift != 0 && h->codec == Codec::kNone && !raw.empty();
  std::string_view data;
  uint64_t table_offset = 0;
  if (chunked) {
    data = raw.back();
    h->flags |= kBlockValueChunks;
    h->chunk_shift = chunk_shift;
    const uint64_t count = (data.size() + (uint64_t{1} << chunk_shift) - 1) >> chunk_shift;
    table_offset = AlignUp(len, kFrameAlign);
    chunk_table_.assign(8 * count, '\0');
    stored.emplace_back(kZeros, table_offset - len);
    stored.emplace_back(chunk_table_);
    len = table_offset + chunk_table_.size();
    h->raw_len = len;
  }
  h->payload_len = len;
  if (header_last) {
    // The frame goes to the file behind a zeroed header of the same length
    // (payload_checksum is fixed-width), so the disk starts on it while the
    // payload is hashed; the header (and a chunk table) is written in place
    // below.
    h->payload_checksum = 0;
    RUNSTORE_RETURN_IF_ERROR(
        WriteFrame(std::string(EncodeBlockHeader(*h).size(), '\0'), stored, len));
  }
  ChecksumStream checksum;
  if (chunked) {
    for (uint64_t i = 0, at = 0; at < data.size(); ++i, at += uint64_t{1} << chunk_shift) {
      const size_t n = std::min<uint64_t>(data.size() - at, uint64_t{1} << chunk_shift);
      EncodeFixed<uint64_t>(chunk_table_.data() + 8 * i, Checksum(data.data() + at, n));
    }
    // Everything but the value data.
    for (size_t i = 0; i < stored.size(); ++i) {
      if (i != raw.size() - 1) checksum.Update(stored[i].data(), stored[i].size());
    }
  } else {
    for (auto p : stored) checksum.Update(p.data(), p.size());
  }
  h->payload_checksum = checksum.Digest();
  std::string header = EncodeBlockHeader(*h);
  if (header_last) {
    const uint64_t payload_offset =
        PayloadOffset(frame_offset, static_cast<uint16_t>(header.size()));
    Status s = chunked ? file_->WriteAt(payload_offset + table_offset, chunk_table_) : Status::OK();
    if (s.ok()) s = file_->WriteAt(frame_offset, header);
    if (!s.ok()) return s.WithContext(path_);
  } else {
    RUNSTORE_RETURN_IF_ERROR(WriteFrame(header, stored, len));
  }
  pending_digests_.push_back(StoredHeaderChecksum(header));
  // Footer entry: frame offset, header length, header bytes (docs/format.md "Footer").
  std::string entry;
  PutFixed<uint64_t>(&entry, frame_offset);
  PutFixed<uint32_t>(&entry, static_cast<uint32_t>(header.size()));
  PutFixed<uint32_t>(&entry, 0);
  entry.append(header);
  pending_entries_.push_back(std::move(entry));
  pending_hashes_.insert(pending_hashes_.end(), run_hashes.begin(), run_hashes.end());
  pending_hash_ends_.push_back(pending_hashes_.size());
  return Status::OK();
}

Status SegmentWriter::Commit(int64_t time_ns, bool sync) {
  CommitRecord c;
  c.sequence = commit_seq_ + 1;
  c.time_ns = time_ns;
  c.first_frame_offset = commit_start_;
  c.frame_count = static_cast<uint32_t>(pending_digests_.size());
  c.unsynced_before = synced_end_.load() < commit_start_;
  c.frames_digest = Checksum(pending_digests_.data(), pending_digests_.size() * 8);
  std::string rec = EncodeCommitRecord(c);
  RUNSTORE_RETURN_IF_ERROR(WriteFrame(rec, {}, 0));
  // The record is written after the blocks it covers and the sync comes last:
  // recovery trusts a commit record only once every payload it covers
  // verifies, back to the newest record that proves what precedes it synced,
  // so a reordering of page writes by the disk cannot expose a torn block
  // (docs/format.md "Recovery").
  if (sync) RUNSTORE_RETURN_IF_ERROR(SyncFile("fdatasync of commit " + std::to_string(c.sequence)));
  commit_seq_ = c.sequence;
  commit_start_ = offset_;
  const uint32_t commit_index = static_cast<uint32_t>(commit_seq_ - 1);
  for (auto& e : pending_entries_) {
    EncodeFixed<uint32_t>(e.data() + 12, commit_index);
    index_.append(e);
    ++block_count_;
  }
  pending_entries_.clear();
  pending_digests_.clear();
  for (size_t i = 0, lo = 0; i < pending_hash_ends_.size(); lo = pending_hash_ends_[i++]) {
    run_index_.Add(std::span(pending_hashes_).subspan(lo, pending_hash_ends_[i] - lo));
  }
  pending_hash_ends_.clear();
  pending_hashes_.clear();
  PutFixed<uint64_t>(&commits_, c.sequence);
  PutFixed<int64_t>(&commits_, c.time_ns);
  PutFixed<uint64_t>(&commits_, offset_);
  return Status::OK();
}

// A segment synced into a file that no name reaches any more is durable
// nowhere: someone removed it while it was written (a compaction or a sync
// told that its writer had crashed, docs/design.md#adoption), and what the
// caller would report durable no reader could ever read. The writer stops.
Status SegmentWriter::CheckNotRemoved(const std::string& what) const {
  if (!file_->Removed()) return Status::OK();
  return Status::IOError(path_ + ": " + what +
                         ": the segment file was removed while it was being written (by a "
                         "compaction or sync told that its writer had crashed); what was written "
                         "since is in no file, and this writer stops");
}

Status SegmentWriter::SyncFile(const std::string& what) {
  Status s = file_->Sync();
  if (!s.ok()) return About(s, path_, what);
  RUNSTORE_RETURN_IF_ERROR(CheckNotRemoved(what));
  synced_end_.store(offset_);
  return Status::OK();
}

Status SegmentWriter::SyncPrefix(uint64_t length) {
  const std::string what = "fdatasync of the first " + std::to_string(length) + " bytes";
  Status s = file_->SyncPrefix(length);
  if (!s.ok()) return About(s, path_, what);
  RUNSTORE_RETURN_IF_ERROR(CheckNotRemoved(what));
  RaiseSynced(&synced_end_, length);
  return Status::OK();
}

Status SegmentWriter::Sync() {
  if (!has_unsynced()) return Status::OK();
  return SyncFile("fdatasync after commit " + std::to_string(commit_seq_));
}

void SegmentWriter::AddFooterSection(uint32_t tag, uint32_t flags, std::string_view bytes) {
  sections_.append(EncodeFooterSection(tag, flags, bytes));
}

Status SegmentWriter::Seal() {
  if (has_uncommitted())
    return Status::FailedPrecondition(path_ + ": seal with uncommitted blocks");
  // A valid footer tells recovery that every commit before it is durable.
  RUNSTORE_RETURN_IF_ERROR(Sync());
  FooterHeader f;
  f.commit_count = commit_seq_;
  f.block_count = block_count_;
  f.committed_end = offset_;
  // Version 4: the run index, its blocks of the same runs sharing a list,
  // then the sections added (docs/format.md "Footer sections"). Built in one
  // buffer, copied once: at 100,000 hashed run ids the run index is about a
  // MiB per distinct list of them (one per log_many, not one per series).
  const RunIndex& run_index = run_index_.index();
  assert(run_index.block_count() == block_count_);
  const uint64_t run_index_len = SharedRunIndexSize(run_index);
  std::string payload;
  payload.reserve(commits_.size() + index_.size() + kFooterSectionHeaderSize + run_index_len +
                  sections_.size());
  payload += commits_;
  payload += index_;
  AppendFooterSectionHeader(&payload, kFooterSectionSharedRunIndex, kFooterSectionOptional,
                            run_index_len);
  AppendSharedRunIndex(run_index, &payload);
  payload += sections_;  // the run index is a multiple of 8 bytes: no padding
  f.payload_len = payload.size();
  f.payload_checksum = Checksum(payload);
  const uint64_t footer_offset = offset_;
  RUNSTORE_RETURN_IF_ERROR(WriteFrame(EncodeFooterHeader(f), {payload}, payload.size()));
  Trailer t{footer_offset, kSegmentFormatVersion};
  Status s = file_->Append(EncodeTrailer(t));
  if (!s.ok()) return s.WithContext(path_);
  offset_ += kTrailerSize;
  RUNSTORE_RETURN_IF_ERROR(SyncFile("fdatasync of footer"));
  s = file_->Close();
  if (!s.ok()) return s.WithContext(path_);
  return Status::OK();
}

}  // namespace runstore::format
