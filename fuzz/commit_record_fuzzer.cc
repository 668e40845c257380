// Commit records and the other fixed-size records of a segment
// (docs/format.md "Commit record", "Footer frame and trailer"): CheckFrameHeader
// on the frame, DecodeCommitRecord, DecodeFooterHeader and DecodeTrailer on
// any bytes. Whatever decodes must encode back to a record that checks and
// decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/format.h"
#include "fuzz_util.h"

namespace runstore::format {
namespace {

void CheckFrame(std::string_view in) {
  const uint16_t len = PeekHeaderLength(in.substr(0, 8));
  if (len == 0 || len > in.size()) return;
  const fuzzing::ExactBytes header(in.substr(0, len));
  FramePrefix prefix;
  if (CheckFrameHeader(header.view(), &prefix).ok()) {
    RUNSTORE_FUZZ_CHECK(prefix.header_len == len, "");
  }
}

void CheckCommit(std::string_view in) {
  CommitRecord c;
  if (in.size() != kCommitHeaderSize) {
    RUNSTORE_FUZZ_CHECK(!DecodeCommitRecord(in, &c).ok(), std::to_string(in.size()));
    if (in.size() < kCommitHeaderSize) return;
  }
  const fuzzing::ExactBytes record(in.substr(0, kCommitHeaderSize));
  if (!DecodeCommitRecord(record.view(), &c).ok()) return;
  const std::string again = EncodeCommitRecord(c);
  RUNSTORE_FUZZ_CHECK(again.size() == kCommitHeaderSize, "");
  FramePrefix prefix;
  const Status s = CheckFrameHeader(again, &prefix);
  RUNSTORE_FUZZ_CHECK(s.ok() && prefix.kind == FrameKind::kCommit && prefix.payload_len == 0,
                      s.ToString());
  CommitRecord c2;
  RUNSTORE_FUZZ_CHECK(DecodeCommitRecord(again, &c2).ok(), "");
  RUNSTORE_FUZZ_CHECK(
      c2.sequence == c.sequence && c2.time_ns == c.time_ns &&
          c2.first_frame_offset == c.first_frame_offset && c2.frame_count == c.frame_count &&
          c2.unsynced_before == c.unsynced_before && c2.frames_digest == c.frames_digest,
      "commit record round trip");
}

void CheckFooterHeader(std::string_view in) {
  if (in.size() < kFooterHeaderSize) return;
  const fuzzing::ExactBytes header(in.substr(0, kFooterHeaderSize));
  FooterHeader f;
  if (!DecodeFooterHeader(header.view(), &f).ok()) return;
  const std::string again = EncodeFooterHeader(f);
  FramePrefix prefix;
  RUNSTORE_FUZZ_CHECK(again.size() == kFooterHeaderSize && CheckFrameHeader(again, &prefix).ok() &&
                          prefix.kind == FrameKind::kFooter,
                      "");
  FooterHeader f2;
  RUNSTORE_FUZZ_CHECK(DecodeFooterHeader(again, &f2).ok(), "");
  RUNSTORE_FUZZ_CHECK(f2.payload_len == f.payload_len &&
                          f2.payload_checksum == f.payload_checksum &&
                          f2.commit_count == f.commit_count && f2.block_count == f.block_count &&
                          f2.committed_end == f.committed_end,
                      "footer header round trip");
}

void CheckTrailer(std::string_view in) {
  Trailer t;
  if (in.size() != kTrailerSize) {
    RUNSTORE_FUZZ_CHECK(!DecodeTrailer(in, &t), std::to_string(in.size()));
    if (in.size() < kTrailerSize) return;
  }
  // The last 32 bytes, where a trailer is.
  const fuzzing::ExactBytes trailer(in.substr(in.size() - kTrailerSize));
  if (!DecodeTrailer(trailer.view(), &t)) return;
  Trailer t2;
  RUNSTORE_FUZZ_CHECK(DecodeTrailer(EncodeTrailer(t), &t2), "");
  RUNSTORE_FUZZ_CHECK(t2.footer_offset == t.footer_offset && t2.version == t.version,
                      "trailer round trip");
}

}  // namespace
}  // namespace runstore::format

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  runstore::format::CheckFrame(in);
  runstore::format::CheckCommit(in);
  runstore::format::CheckFooterHeader(in);
  runstore::format::CheckTrailer(in);
  return 0;
}
