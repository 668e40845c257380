// A writer's open segment: creating its segment files (numbers claimed with
// O_EXCL, docs/design.md#writer-ids), writing blocks and commit records into
// the open one, and sealing it (docs/design.md#segments).
//
// Owned by the thread that runs the writer's tasks, one at a time (the
// background thread, or a caller that runs a task while it is idle); nothing
// else touches it, except the sync of a prefix of the open file
// (SegmentWriter::SyncPrefix), which GroupCommit schedules.
#ifndef RUNSTORE_STORE_WRITER_OPEN_SEGMENT_H_
#define RUNSTORE_STORE_WRITER_OPEN_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/block.h"
#include "format/segment_writer.h"
#include "runstore/env.h"
#include "runstore/status.h"
#include "store/staging/staging.h"

namespace runstore::writer {

class OpenSegment {
 public:
  // Segments go to `segments_dir` as <writer_id>-<seq>.rss, from number
  // `next_seq` on; the first names `sealed_predecessor` (0: none) in its
  // header. With a `claimer` (node-local staging, docs/design.md#staging),
  // `segments_dir` is the staging directory and each number is one the
  // claimer claimed in the store's segments/ by an empty placeholder.
  OpenSegment(Env* env, std::string segments_dir, std::string writer_id, int zstd_level,
              uint64_t next_seq, uint64_t sealed_predecessor, staging::Shipper* claimer = nullptr);

  // Writes the block of `builder` (creating a segment when none is open);
  // with `borrowed`, a value of its own written from the caller's memory,
  // header last, its data checksummed in chunks. *bytes: what it wrote.
  Status AddBlock(format::BlockBuilder* builder, bool borrowed, uint64_t* bytes);

  // Writes a commit record for the frames written since the last one, if
  // any (*wrote_record, *bytes). For a commit that must be durable (`sync`),
  // *sync_length is the prefix a sync must cover to make it and everything
  // before it durable, 0 if nothing is unsynced. `time_ns` is made later
  // than the previous commit's if it is not.
  Status Commit(bool sync, int64_t time_ns, uint64_t* sync_length, bool* wrote_record,
                uint64_t* bytes);

  // Whether the open segment reached `segment_bytes`, or its index
  // `index_bytes`: it is sealed after the commit that finds it so.
  bool WantsRoll(uint64_t segment_bytes, size_t index_bytes) const;

  // Seals the open segment (every frame must be committed): footer, trailer,
  // sync. No sync of a prefix may run meanwhile.
  Status Seal();

  bool is_open() const { return segment_ != nullptr; }
  // Whether frames were written since the last commit record.
  bool has_uncommitted() const { return segment_ && segment_->has_uncommitted(); }
  // The file name of the segment sealed last (empty: none yet).
  std::string last_sealed_name() const;
  // The open segment's writer, for a sync of its prefix; null if none.
  format::SegmentWriter* segment() const { return segment_.get(); }

 private:
  Status Create();

  Env* const env_;
  const std::string segments_dir_;
  const std::string writer_id_;
  const int zstd_level_;
  staging::Shipper* const claimer_;  // null: numbers are claimed in segments_dir_
  std::unique_ptr<format::SegmentWriter> segment_;
  uint64_t next_seq_;            // the number to try for the next segment
  uint64_t segment_seq_ = 0;     // the number of segment_
  uint64_t sealed_predecessor_;  // the last segment this writer saw sealed
  int64_t last_commit_time_ = 0;
  std::vector<std::string_view> pieces_;  // a block's payload, reused
  std::vector<uint64_t> run_hashes_;      // a block's run index entries, reused
};

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_OPEN_SEGMENT_H_
