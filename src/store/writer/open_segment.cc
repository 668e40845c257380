#include "store/writer/open_segment.h"

#include <algorithm>
#include <utility>

#include "format/format.h"

namespace runstore::writer {

OpenSegment::OpenSegment(Env* env, std::string segments_dir, std::string writer_id, int zstd_level,
                         uint64_t next_seq, uint64_t sealed_predecessor, staging::Shipper* claimer)
    : env_(env),
      segments_dir_(std::move(segments_dir)),
      writer_id_(std::move(writer_id)),
      zstd_level_(zstd_level),
      claimer_(claimer),
      next_seq_(next_seq),
      sealed_predecessor_(sealed_predecessor) {}

Status OpenSegment::Create() {
  format::SegmentHeader h;
  h.version = format::kSegmentFormatVersion;
  h.created_ns = env_->NowNanos();
  h.writer_id = writer_id_;
  h.sealed_predecessor = sealed_predecessor_;
  // Numbers are claimed by creating the file exclusively. Another writer
  // with the same id (a job started twice, a task that Dask or SLURM runs
  // again while the first attempt still lives, on this node or another)
  // may hold the next one: then take the one after, so that neither writer
  // ever fails or touches the other's files (docs/design.md#writer-ids).
  constexpr int kMaxNumbersTaken = 100000;
  for (int taken = 0;; ++taken) {
    h.sequence = next_seq_;
    if (claimer_ != nullptr) {
      // Staging: the number is claimed in the shared store, where every
      // node's writers meet, durably, before the staged file exists; the
      // shipper claims it ahead of need, off this thread.
      RUNSTORE_ASSIGN_OR_RETURN(const staging::Claimed claimed, claimer_->TakeClaim(next_seq_));
      next_seq_ = claimed.seq;
      h.sequence = next_seq_;
      // Every commit in it after the claim's bound, which a compactor
      // relies on to know what it may merge before the segment is
      // published (docs/design.md#compaction-and-staging).
      last_commit_time_ = std::max(last_commit_time_, claimed.not_before_ns);
    }
    const std::string path = segments_dir_ + "/" + format::SegmentFileName(writer_id_, next_seq_);
    auto seg = format::SegmentWriter::Create(env_, path, h);
    if (seg.ok()) {
      segment_ = std::move(seg).value();
      segment_seq_ = next_seq_++;
      break;
    }
    if (seg.status().code() != StatusCode::kAlreadyExists) return seg.status();
    if (taken == kMaxNumbersTaken) {
      return Status::AlreadyExists(path + " exists, as do the " + std::to_string(taken) +
                                   " numbers before it: writer id '" + writer_id_ +
                                   "' is in use by too many writers");
    }
    ++next_seq_;
  }
  // The new name must be durable before any commit in it is acknowledged, or
  // a power cut could lose the whole file.
  return env_->SyncDir(segments_dir_);
}

Status OpenSegment::AddBlock(format::BlockBuilder* builder, bool borrowed, uint64_t* bytes) {
  *bytes = 0;
  if (!segment_) RUNSTORE_RETURN_IF_ERROR(Create());
  const uint64_t before = segment_->size();
  format::BlockHeader h;
  builder->Finish(&h, &pieces_);
  // Integer runs in ascending order are found by the blocks' key ranges; the
  // run index lists them as unlisted (docs/format.md "Run index"), saving 8
  // bytes a run where a sweep's integer ids are stored as a few sequences.
  if (h.run_encoding == format::RunEncoding::kInt && (h.flags & format::kBlockKeysAscending)) {
    run_hashes_.clear();
  } else {
    builder->RunHashes(&run_hashes_);
  }
  // A value of its own (a large value) is large: its header goes last.
  RUNSTORE_RETURN_IF_ERROR(
      segment_->AddBlock(&h, pieces_, run_hashes_, zstd_level_, /*header_last=*/borrowed,
                         borrowed && !IsVarLength(h.dtype) ? format::kValueChunkShift : 0));
  *bytes = segment_->size() - before;
  return Status::OK();
}

Status OpenSegment::Commit(bool sync, int64_t time_ns, uint64_t* sync_length, bool* wrote_record,
                           uint64_t* bytes) {
  *sync_length = 0;
  *wrote_record = false;
  *bytes = 0;
  if (!segment_) return Status::OK();
  // Nothing new since the last commit: a commit still makes earlier flushes
  // durable.
  if (segment_->has_uncommitted()) {
    const int64_t now = std::max(time_ns, last_commit_time_ + 1);
    const uint64_t before = segment_->size();
    RUNSTORE_RETURN_IF_ERROR(segment_->Commit(now, /*sync=*/false));
    last_commit_time_ = now;
    *wrote_record = true;
    *bytes = segment_->size() - before;
  }
  if (sync && segment_->has_unsynced()) *sync_length = segment_->size();
  return Status::OK();
}

bool OpenSegment::WantsRoll(uint64_t segment_bytes, size_t index_bytes) const {
  return segment_ && (segment_->size() >= segment_bytes || segment_->index_bytes() >= index_bytes);
}

std::string OpenSegment::last_sealed_name() const {
  return sealed_predecessor_ == 0 ? std::string()
                                  : format::SegmentFileName(writer_id_, sealed_predecessor_);
}

Status OpenSegment::Seal() {
  if (!segment_) return Status::OK();
  RUNSTORE_RETURN_IF_ERROR(segment_->Seal());  // syncs everything
  segment_.reset();
  sealed_predecessor_ = segment_seq_;
  return Status::OK();
}

}  // namespace runstore::writer
