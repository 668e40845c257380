// The claim record a staging writer writes into the placeholder that claims
// a segment number in the store (docs/format.md "Placeholders and claims";
// docs/design.md#staging). Encoding and decoding only.
//
// A placeholder is shorter than a segment header, so every reader takes it
// for an empty segment (docs/format.md "Recovery"). Its record tells a
// compactor that a segment of that number may exist in some node's staging,
// committed but not yet published, and that none of its commits is ordered
// before `not_before_ns`; and it tells a sync which writer (by its lease
// token) claimed it.
#ifndef RUNSTORE_FORMAT_CLAIM_H_
#define RUNSTORE_FORMAT_CLAIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace runstore::format {

inline constexpr char kClaimMagic[8] = {'R', 'S', 'C', 'L', 'A', 'I', 'M', '1'};
inline constexpr size_t kClaimSize = 40;
static_assert(kClaimSize < 128, "a placeholder must read as an empty segment");

struct SegmentClaim {
  // Every commit of the segment staged under this number has a time_ns
  // greater than this (the claiming writer's clock when it claimed).
  int64_t not_before_ns = 0;
  // The owner token of the claiming writer: 16 lowercase hex digits, the
  // name of its lease in its staging directory.
  std::string owner_token;
};

// The record for the placeholder file `file_name` (its base name, which the
// record's checksum covers, so that a record copied under another name is
// not taken for that name's claim).
std::string EncodeClaim(const SegmentClaim& claim, std::string_view file_name);

// The claim in `bytes` (a placeholder's contents), or nullopt for anything
// else: an empty file (a placeholder whose record was never written: no
// segment was staged under it), another size, a wrong magic or checksum.
std::optional<SegmentClaim> DecodeClaim(std::string_view bytes, std::string_view file_name);

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_CLAIM_H_
