// Block payloads (docs/format.md "Block payload", "Value chunks"): the input
// is a block frame header followed by a raw payload (fuzz_util.h
// SplitBlockInput). The header is decoded as DecodeBlockHeader sees it; the
// payload is checked (CheckPayload, which fails unless the checksums happen
// to hold) and decoded whatever the check said (DecodeBlock: decompression
// and BlockView::Parse, which trusts no byte of the payload), and every
// record of a block that decodes is read through the view.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/block_reader.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runstore;
  constexpr char kFile[] = "segments/f-00000001.rss";
  std::string header;
  std::string_view payload_in;
  if (!fuzzing::SplitBlockInput(std::string_view(reinterpret_cast<const char*>(data), size),
                                &header, &payload_in)) {
    return 0;
  }
  format::BlockInfo b;
  b.frame_offset = format::kSegmentHeaderSize;
  b.header_len = static_cast<uint16_t>(header.size());
  b.payload_offset = format::PayloadOffset(b.frame_offset, b.header_len);
  if (!format::DecodeBlockHeader(header, &b.header).ok()) return 0;
  auto payload = std::make_shared<const fuzzing::ExactBytes>(payload_in);
  const Status checked = format::CheckPayload(payload->view(), b, kFile);
  if (!checked.ok()) {
    RUNSTORE_FUZZ_CHECK(
        checked.code() == StatusCode::kCorruption && checked.message().starts_with(kFile),
        checked.ToString());
  }
  format::DecodedBlock out;
  const Status decoded = format::DecodeBlock(payload->view(), payload, nullptr, b, kFile, &out);
  if (!decoded.ok()) {
    RUNSTORE_FUZZ_CHECK(
        decoded.code() == StatusCode::kCorruption && decoded.message().starts_with(kFile),
        decoded.ToString());
    return 0;
  }
  fuzzing::TouchBlock(b.header, out.view, out.bytes);
  return 0;
}
