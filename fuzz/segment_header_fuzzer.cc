// Segment headers (docs/format.md "Segment header"): format::DecodeSegmentHeader
// on any bytes, and the same bytes as a file name in segments/
// (ParseSegmentFileName). A header that decodes must encode and decode to the
// same fields; a name that parses must survive SegmentFileName and parse to
// the same writer id and sequence.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/format.h"
#include "fuzz_util.h"

namespace runstore::format {
namespace {

constexpr char kFile[] = "segments/f-00000001.rss";

void CheckHeader(std::string_view in) {
  SegmentHeader h;
  const Status s = DecodeSegmentHeader(in, kFile, &h);
  if (!s.ok()) {
    RUNSTORE_FUZZ_CHECK(
        s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported, s.ToString());
    RUNSTORE_FUZZ_CHECK(s.message().starts_with(kFile), s.ToString());
    return;
  }
  RUNSTORE_FUZZ_CHECK(h.version >= 1 && h.version <= kSegmentFormatVersion,
                      std::to_string(h.version));
  RUNSTORE_FUZZ_CHECK(!h.writer_id.empty() && h.writer_id.size() <= kMaxWriterIdLength, "");
  const std::string again = EncodeSegmentHeader(h);
  RUNSTORE_FUZZ_CHECK(again.size() == kSegmentHeaderSize, "");
  SegmentHeader h2;
  const Status s2 = DecodeSegmentHeader(again, kFile, &h2);
  RUNSTORE_FUZZ_CHECK(s2.ok(), s2.ToString());
  RUNSTORE_FUZZ_CHECK(h2.version == h.version && h2.created_ns == h.created_ns &&
                          h2.sequence == h.sequence && h2.writer_id == h.writer_id,
                      "segment header round trip");
}

void CheckFileName(std::string_view in) {
  std::string writer_id;
  uint64_t seq = 0;
  if (!ParseSegmentFileName(in, &writer_id, &seq)) return;
  RUNSTORE_FUZZ_CHECK(!writer_id.empty(), "");
  const std::string name = SegmentFileName(writer_id, seq);
  std::string writer_id2;
  uint64_t seq2 = 0;
  RUNSTORE_FUZZ_CHECK(ParseSegmentFileName(name, &writer_id2, &seq2), name);
  RUNSTORE_FUZZ_CHECK(writer_id2 == writer_id && seq2 == seq, name);
}

}  // namespace
}  // namespace runstore::format

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const runstore::fuzzing::ExactBytes in(
      std::string_view(reinterpret_cast<const char*>(data), size));
  runstore::format::CheckHeader(in.view());
  runstore::format::CheckFileName(in.view());
  return 0;
}
