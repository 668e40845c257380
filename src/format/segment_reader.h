// Reading a segment's index: from the footer when sealed, otherwise by
// recovery, which walks the frames and stops at the last valid commit
// (docs/format.md "Recovery").
#ifndef RUNSTORE_FORMAT_SEGMENT_READER_H_
#define RUNSTORE_FORMAT_SEGMENT_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/block.h"
#include "format/format.h"
#include "format/run_index.h"
#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore::format {

struct CommitInfo {
  uint64_t sequence = 0;
  int64_t time_ns = 0;
  uint64_t end_offset = 0;       // just past the commit record
  bool unsynced_before = false;  // CommitRecord::unsynced_before (false in a footer)
};

struct BlockInfo {
  uint64_t frame_offset = 0;
  uint64_t payload_offset = 0;
  uint32_t commit_index = 0;  // into SegmentIndex::commits
  uint16_t header_len = 0;
  BlockHeader header;
};

struct SegmentIndex {
  SegmentHeader header;
  bool sealed = false;
  uint64_t committed_end = 0;  // end of the last valid commit record
  uint64_t file_size = 0;      // when the index was read
  std::vector<CommitInfo> commits;
  std::vector<BlockInfo> blocks;
  // From the footer of a sealed segment of version 4 and later; null for an
  // unsealed segment (readers rebuild it from the blocks) or an older one.
  std::shared_ptr<const RunIndex> run_index;
  // The footer's other known sections, by tag, as stored (their layers
  // decode them): kFooterSectionReplaces, kFooterSectionReplacedEarlier,
  // kFooterSectionAdopted.
  std::map<uint32_t, std::string> footer_sections;
};

// Loads the index of the segment in `file`; `name` is used in messages.
// Sealed: reads trailer and footer (falling back to recovery if they are
// damaged). Unsealed: recovers. Corruption if committed data is damaged in a
// way that recovery cannot attribute to a torn tail; NotSupported for a newer
// version.
// `names`, if given: the table the blocks' series names are interned in,
// shared with other segments loaded through it (a store of many segments
// then holds each name once per table, not once per segment).
Status LoadSegmentIndex(const RandomAccessFile& file, const std::string& name, SegmentIndex* index,
                        NameTable* names = nullptr);

// Whether the file ends with a valid trailer, read from its last 32 bytes
// alone. A hint, not the answer: a crash while the seal was being synced can
// leave the trailer on disk and the footer torn, and such a segment reads as
// unsealed. Decide with ReadsAsSealed.
bool HasValidTrailer(const RandomAccessFile& file);

// Whether LoadSegmentIndex reads the segment as sealed: the rule every
// decision that depends on a seal uses (a restarted writer naming its sealed
// predecessor, a sync publishing a staged segment whole), so that none of
// them takes for sealed a segment that readers take for a crashed tail.
// Reads only the trailer when there is none, the footer when it is intact.
bool ReadsAsSealed(const RandomAccessFile& file, const std::string& name);

// Continues recovery of an unsealed segment from index->committed_end, adding
// commits made since (and noticing if it was sealed meanwhile). Corruption if
// the file is now shorter than its committed bytes.
Status RefreshSegmentIndex(const RandomAccessFile& file, const std::string& name,
                           SegmentIndex* index);

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_SEGMENT_READER_H_
