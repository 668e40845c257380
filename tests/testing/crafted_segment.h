// Segment files built byte by byte, for tests that need what no writer
// writes: every checksum is right, and every field says what the test wants
// (a hostile length, a count the bytes cannot hold, a name that is not
// UTF-8). The layout is docs/format.md's; the encoders are the format
// layer's own, so a crafted file differs from a written one only where the
// test changed it.
#ifndef RUNSTORE_TESTS_TESTING_CRAFTED_SEGMENT_H_
#define RUNSTORE_TESTS_TESTING_CRAFTED_SEGMENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/block.h"
#include "format/format.h"
#include "runstore/env.h"
#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore::testing {

// A block frame's header and its stored payload.
struct CraftedBlock {
  format::BlockHeader header;
  std::string payload;
};

// A valid block of the records (runs[i], steps[i], values[i]) of series
// `name`, built by the writer's own BlockBuilder; compressed with `codec`
// when that is not kNone (whatever the ratio).
CraftedBlock ScalarBlock(const std::string& name, const std::vector<RunId>& runs,
                         const std::vector<int64_t>& steps, const std::vector<double>& values,
                         Codec codec = Codec::kNone);
// A valid block of one string record.
CraftedBlock StringBlock(const std::string& name, const RunId& run, int64_t step,
                         const std::string& value);

// One entry of a footer's block table, as the crafter writes it.
struct FooterBlock {
  uint64_t frame_offset = 0;
  uint32_t commit_index = 0;
  format::BlockHeader header;  // re-encoded (with its checksum) when the footer is written
  std::string raw_header;      // used as is instead, when not empty
};

class SegmentCrafter {
 public:
  explicit SegmentCrafter(std::string writer_id = "c", uint64_t seq = 1);

  // The header, written when bytes() is first called; change it before.
  format::SegmentHeader& header() { return header_; }

  // Appends a block frame. payload_len and payload_checksum are computed
  // from the payload unless `keep_lengths` (then the header's are kept).
  // Returns its frame offset.
  uint64_t AddBlock(CraftedBlock block, bool keep_lengths = false);
  // Appends a commit record covering the frames since the last one, with
  // the next sequence and a later time. Returns its frame offset.
  uint64_t AddCommit();
  // Appends the footer and trailer. `edit` may change the commit and block
  // tables first; the footer's checksums are computed after it.
  void Seal(const std::function<void(std::vector<format::CommitRecord>* commits,
                                     std::vector<FooterBlock>* blocks)>& edit = {});

  // The file's bytes so far.
  std::string bytes() const;

 private:
  void AppendFrame(const std::string& header, const std::string& payload);

  format::SegmentHeader header_;
  std::string body_;  // everything after the segment header
  std::vector<uint64_t> pending_digests_;
  std::vector<FooterBlock> pending_blocks_;
  std::vector<FooterBlock> blocks_;
  std::vector<format::CommitRecord> commits_;
  std::vector<uint64_t> commit_ends_;
  uint64_t commit_start_ = format::kSegmentHeaderSize;
  int64_t time_ns_ = 1'000'000'000;
};

// A sealed segment (as a writer of this build wrote it) with the sections of
// its footer replaced by `sections` (encoded, format::EncodeFooterSection),
// the footer's header checksums recomputed; "" leaves none, which is also
// how a footer of a version before sections looks.
std::string WithFooterSections(const std::string& sealed, const std::string& sections);

// Writes a store at `dir` holding the marker and the given segment files
// (file name -> bytes) through `env`.
Status WriteCraftedStore(Env* env, const std::string& dir,
                         const std::vector<std::pair<std::string, std::string>>& segments);

}  // namespace runstore::testing

#endif  // RUNSTORE_TESTS_TESTING_CRAFTED_SEGMENT_H_
