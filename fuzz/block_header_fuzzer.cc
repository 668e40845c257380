// Block frame headers (docs/format.md "Frames", "Block frame"):
// PeekHeaderLength and CheckFrameHeader on the frame's first bytes, then
// DecodeBlockHeader whatever the checksum says (it is called on checked
// headers only, but its field checks are what stands between a header a
// hostile writer checksummed and every allocation a reader makes for the
// block). A header that decodes keeps the bounds DecodeBlockHeader promises,
// and encodes (EncodeBlockHeader) into a frame header that checks and
// decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "format/format.h"
#include "fuzz_util.h"

namespace runstore::format {
namespace {

bool SameFields(const BlockHeader& a, const BlockHeader& b) {
  return a.payload_len == b.payload_len && a.payload_checksum == b.payload_checksum &&
         a.raw_len == b.raw_len && a.count == b.count && a.dtype == b.dtype && a.codec == b.codec &&
         a.variable_shape == b.variable_shape && a.run_encoding == b.run_encoding &&
         a.flags == b.flags && a.chunk_shift == b.chunk_shift && a.dims == b.dims &&
         a.name == b.name && a.min_step == b.min_step && a.max_step == b.max_step &&
         a.min_key == b.min_key && a.max_key == b.max_key;
}

void Run(std::string_view in) {
  const uint16_t len = PeekHeaderLength(in.substr(0, 8));
  if (len == 0 || len > in.size()) return;
  RUNSTORE_FUZZ_CHECK(len >= kFramePrefixSize + 8 && len <= kMaxFrameHeaderSize && len % 8 == 0,
                      std::to_string(len));
  const fuzzing::ExactBytes header(in.substr(0, len));
  FramePrefix prefix;
  if (CheckFrameHeader(header.view(), &prefix).ok()) {
    RUNSTORE_FUZZ_CHECK(prefix.header_len == len, "");
    RUNSTORE_FUZZ_CHECK(static_cast<char>(prefix.kind) == in[4], "");
  }
  BlockHeader h;
  if (!DecodeBlockHeader(header.view(), &h).ok()) return;
  RUNSTORE_FUZZ_CHECK(h.count >= 1 && h.count <= h.raw_len, std::to_string(h.count));
  RUNSTORE_FUZZ_CHECK(h.raw_len <= MaxRawSize(h.codec, h.payload_len), std::to_string(h.raw_len));
  RUNSTORE_FUZZ_CHECK(h.codec != Codec::kNone || h.raw_len == h.payload_len, "");
  RUNSTORE_FUZZ_CHECK(!h.name.empty() && h.name.size() <= kMaxNameLength, "");
  RUNSTORE_FUZZ_CHECK(h.dims.size() <= static_cast<size_t>(kMaxRank), "");
  for (int64_t d : h.dims) RUNSTORE_FUZZ_CHECK(d >= 0, std::to_string(d));

  const std::string again = EncodeBlockHeader(h);
  RUNSTORE_FUZZ_CHECK(again.size() % 8 == 0 && again.size() <= kMaxFrameHeaderSize,
                      std::to_string(again.size()));
  RUNSTORE_FUZZ_CHECK(PeekHeaderLength(again) == again.size(), "");
  FramePrefix prefix2;
  const Status checked = CheckFrameHeader(again, &prefix2);
  RUNSTORE_FUZZ_CHECK(checked.ok(), checked.ToString());
  RUNSTORE_FUZZ_CHECK(prefix2.kind == FrameKind::kBlock && prefix2.payload_len == h.payload_len &&
                          prefix2.payload_checksum == h.payload_checksum,
                      "");
  BlockHeader h2;
  const Status decoded = DecodeBlockHeader(again, &h2);
  RUNSTORE_FUZZ_CHECK(decoded.ok(), decoded.ToString());
  RUNSTORE_FUZZ_CHECK(SameFields(h, h2), "block header round trip");
}

}  // namespace
}  // namespace runstore::format

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::format::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
