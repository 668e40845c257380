// The footer section of a compacted segment that names the segments it
// replaces (docs/format.md "Replaces section", tag kFooterSectionReplaces).
// Encoding and decoding only; what readers do with it is
// docs/design.md#compaction (src/store/compact/compacted.cc).
#ifndef RUNSTORE_FORMAT_REPLACES_H_
#define RUNSTORE_FORMAT_REPLACES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/format.h"
#include "runstore/status.h"

namespace runstore::format {

// A segment, identified so that a later file that reuses its name (a writer
// that starts over with the same id and number) is a different segment.
struct SegmentId {
  std::string writer_id;
  uint64_t sequence = 0;
  int64_t created_ns = 0;  // from its segment header
  friend auto operator<=>(const SegmentId&, const SegmentId&) = default;
};

struct Replaces {
  // The compaction's output is parts 1..part_count of its writer id; every
  // part carries the same section, and the replacement holds only when all
  // parts are there.
  uint32_t part_count = 0;
  std::vector<SegmentId> segments;  // sorted, no duplicates
};

// Upper bound on part_count a reader accepts.
inline constexpr uint32_t kMaxCompactionParts = 1u << 20;

// An unsealed segment a compaction adopted (docs/design.md#adoption): its
// commits up to `committed_end` are in the compacted segment.
struct AdoptedSegment {
  SegmentId id;
  uint64_t committed_end = 0;
  friend auto operator<=>(const AdoptedSegment&, const AdoptedSegment&) = default;
};

std::string EncodeReplaces(const Replaces& r);
// Corruption naming `file` (the segment whose footer holds the bytes) for
// anything that is not a well-formed section: lengths past the end, a bad
// writer id, unsorted or duplicate entries, trailing bytes. Never allocates
// more than the bytes can hold. `tag` is the section's (the replaced-earlier
// section has the same encoding), for the message.
Status DecodeReplaces(std::string_view bytes, std::string_view file, Replaces* r,
                      uint32_t tag = kFooterSectionReplaces);

// The adopted section (tag kFooterSectionAdopted, docs/format.md "Adopted
// section"): entries sorted by id, no two of one id. Decoding refuses what
// DecodeReplaces refuses, with the same bound on allocation.
std::string EncodeAdopted(const std::vector<AdoptedSegment>& adopted);
Status DecodeAdopted(std::string_view bytes, std::string_view file,
                     std::vector<AdoptedSegment>* adopted);

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_REPLACES_H_
