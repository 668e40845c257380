// Which segments readers leave out because a compacted segment replaces them
// (docs/design.md#compaction, "What readers do"), shared by Store::Refresh,
// the compactor and writers choosing their next segment number.
#ifndef RUNSTORE_STORE_COMPACT_COMPACTED_H_
#define RUNSTORE_STORE_COMPACT_COMPACTED_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "format/replaces.h"
#include "runstore/env.h"
#include "runstore/status.h"
#include "store/read/snapshot.h"

namespace runstore::compact {

// Writer ids of compactions start with this (the rest is a random token);
// only their segments are read by NextSequencePastReplaced.
inline constexpr std::string_view kCompactWriterPrefix = "compact.";

// One compaction's output: the segments of one writer id that carry a
// replaces section.
struct CompactionGroup {
  std::string writer_id;
  format::Replaces replaces;  // as the first part found says
  // The unsealed segments it adopted, with the committed length merged of
  // each (docs/design.md#adoption); also named in `replaces`.
  std::vector<format::AdoptedSegment> adopted;
  std::vector<std::string> parts;  // file names present
  bool complete = false;           // parts 1..part_count, all alike
  // An adopted segment now holds commits past what the compaction merged
  // (its writer was alive): the group does not stand.
  bool voided = false;
  bool accepted = false;  // complete, not voided and not a loser
};

struct CompactedResolution {
  std::vector<CompactionGroup> groups;  // sorted by writer id
  // File names (in segments/) that readers leave out: segments an accepted
  // group replaces, and every part of a group that is incomplete or lost.
  std::set<std::string> ignored;
  // Of those, the segments an accepted group replaces: garbage.
  std::set<std::string> replaced;
  // Segments left out as damaged (a replaces section that does not decode).
  std::set<std::string> damaged;
};

// The identity of a loaded segment, as a replaces section names it.
format::SegmentId IdOf(const read::LoadedSegment& seg);

// Applies the rule to the loaded segments, by file name. A segment whose
// replaces section does not decode is passed to `damage` (its Corruption
// names the file): an error from it is returned; otherwise the segment is
// left out as damaged (and its group is incomplete).
Status ResolveCompacted(
    const std::map<std::string, std::shared_ptr<const read::LoadedSegment>>& segs,
    const std::function<Status(const std::string& name, Status)>& damage, CompactedResolution* out);

// Calls `fn` with every segment that a readable compacted segment among
// `children` (names in `segments_dir`) names as replaced: in its replaces
// section, or in its replaced-earlier one (segments its compacted inputs had
// replaced, gone when it was made).
Status ForEachReplaced(Env* env, const std::string& segments_dir,
                       const std::vector<std::string>& children,
                       const std::function<void(const format::SegmentId&)>& fn);

// The smallest sequence number for `writer_id` above every number that a
// compacted segment in `segments_dir` names for it (1 if none), so that a
// writer never reuses the number of a segment compaction removed.
Result<uint64_t> NextSequencePastReplaced(Env* env, const std::string& segments_dir,
                                          const std::vector<std::string>& children,
                                          const std::string& writer_id);

}  // namespace runstore::compact

#endif  // RUNSTORE_STORE_COMPACT_COMPACTED_H_
