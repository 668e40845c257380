// Writes one segment file: header, block frames, commit records, and on
// sealing the footer index and trailer (docs/format.md). Not thread-safe: the
// writer's background thread is its only user, except for SyncPrefix.
#ifndef RUNSTORE_FORMAT_SEGMENT_WRITER_H_
#define RUNSTORE_FORMAT_SEGMENT_WRITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "format/format.h"
#include "format/run_index.h"
#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore::format {

class SegmentWriter {
 public:
  // Creates the file exclusively (AlreadyExists if it is there) and writes the
  // header. The header is durable with the first commit.
  static Result<std::unique_ptr<SegmentWriter>> Create(Env* env, const std::string& path,
                                                       const SegmentHeader& header);

  // Writes a block frame. `header` has every field but payload_len and
  // payload_checksum, which are computed here; `raw` is the uncompressed
  // payload as pieces. Compresses with header->codec (falling back to none
  // when that does not shrink the payload). Not durable until Commit.
  //
  // With `header_last` (for large blocks), the frame is written with a zeroed
  // header, the payload hashed, and the header then written in place: the
  // disk starts on the payload at once instead of after all of it has been
  // hashed. Until the header is in place the frame reads as a torn tail
  // (docs/format.md "Segment file").
  //
  // With a `chunk_shift` (a block of one numeric value, whose data is the
  // last piece of `raw`), a block stored uncompressed gets a checksum per
  // 2^chunk_shift bytes of the value data, so that readers can check only
  // what they read (docs/format.md "Value chunks"); 0 for none.
  //
  // `run_hashes` are the distinct RunHash values of the block's runs,
  // ascending (BlockBuilder::RunHashes), for the footer's run index.
  Status AddBlock(BlockHeader* header, const std::vector<std::string_view>& raw,
                  std::span<const uint64_t> run_hashes, int zstd_level, bool header_last = false,
                  uint8_t chunk_shift = 0);

  // Writes a commit record covering every frame since the last one, then,
  // with `sync`, syncs the file. Without it the commit is visible and safe
  // from a crash of the process but not yet durable; its record says so
  // (CommitRecord::unsynced_before on the records after it) until a sync.
  // `time_ns` must be greater than the previous commit's.
  Status Commit(int64_t time_ns, bool sync = true);

  // Syncs the file if anything was written since the last sync.
  Status Sync();

  // Makes the first `length` bytes durable (WritableFile::SyncPrefix): the
  // one call that may run on another thread while this one's user goes on
  // writing past `length`; never concurrently with Seal, nor with another
  // SyncPrefix. Records written afterwards know what it made durable.
  Status SyncPrefix(uint64_t length);

  // Adds a section to the footer Seal writes (docs/format.md "Footer
  // sections"), after the run index, in the order added.
  void AddFooterSection(uint32_t tag, uint32_t flags, std::string_view bytes);

  // Syncs if needed, writes the footer index and trailer and syncs, then
  // closes the file. All blocks must be committed.
  Status Seal();

  uint64_t size() const { return offset_; }
  bool has_uncommitted() const { return !pending_digests_.empty(); }
  bool has_unsynced() const { return synced_end_.load() < offset_; }
  size_t index_bytes() const { return index_.size(); }
  const std::string& path() const { return path_; }

 private:
  SegmentWriter(std::unique_ptr<WritableFile> file, std::string path);
  Status WriteFrame(std::string_view header, const std::vector<std::string_view>& payload,
                    uint64_t payload_len);
  // Syncs the file and moves synced_end_ to its end; `what` names the sync in
  // an error.
  Status SyncFile(const std::string& what);
  // IOError if the file lost its last name since it was created.
  Status CheckNotRemoved(const std::string& what) const;

  std::unique_ptr<WritableFile> file_;
  std::string path_;
  uint64_t offset_ = 0;
  uint64_t commit_start_ = 0;                 // first frame of the open commit
  std::atomic<uint64_t> synced_end_{0};       // bytes before it are synced
  std::vector<uint64_t> pending_digests_;     // header checksums since last commit
  std::vector<std::string> pending_entries_;  // footer entries of those frames
  uint64_t commit_seq_ = 0;
  std::vector<uint64_t> pending_hash_ends_;  // run index of those frames
  std::vector<uint64_t> pending_hashes_;
  std::string index_;          // footer payload: block entries so far
  RunIndexBuilder run_index_;  // footer run index so far
  std::string sections_;       // footer sections added
  std::string commits_;        // footer payload: commit entries so far
  uint64_t block_count_ = 0;
  std::string scratch_;
  std::string chunk_table_;
  std::string joined_;
  Compressor compressor_;
};

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_SEGMENT_WRITER_H_
