// Block payloads with their checksums made right: the input of
// block_payload_fuzzer (a block frame header followed by a payload), whose
// payload checksum, value chunk table and header checksum the harness
// recomputes as a writer would. So the block passes every checksum and
// reaches what lies behind them: CheckPayload must accept it (a block with
// value chunks only if its layout parses, since the layout says where the
// chunks are), and DecodeBlock and every record read as in block_payload.
// The block is then committed alone in a segment of a store, which is opened
// and read in full through the public API (fuzz_util.h ReadSnapshot), so
// that a checksummed but hostile block meets recovery, key resolution,
// scans, lazy reads and verification.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/block_reader.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "fuzz_util.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore {
namespace {

constexpr char kStore[] = "/s";
constexpr char kFile[] = "segments/f-00000001.rss";

std::string Pad(std::string s) {
  s.resize(AlignUp(s.size(), format::kFrameAlign), '\0');
  return s;
}

// The block committed alone in an unsealed segment, as a writer leaves it
// after its first commit.
std::string OneBlockSegment(const std::string& header, std::string_view payload) {
  format::SegmentHeader sh;
  sh.version = format::kSegmentFormatVersion;
  sh.created_ns = 1;
  sh.sequence = 1;
  sh.writer_id = "f";
  std::string seg = format::EncodeSegmentHeader(sh);
  seg += Pad(header);
  seg += Pad(std::string(payload));
  format::CommitRecord c;
  c.sequence = 1;
  c.time_ns = 2;
  c.first_frame_offset = format::kSegmentHeaderSize;
  c.frame_count = 1;
  const uint64_t digest = format::StoredHeaderChecksum(header);
  c.frames_digest = Checksum(&digest, sizeof(digest));
  seg += Pad(format::EncodeCommitRecord(c));
  return seg;
}

void Run(std::string_view in) {
  std::string header;
  std::string_view payload_in;
  if (!fuzzing::SplitBlockInput(in, &header, &payload_in)) return;
  format::BlockHeader unchecked;
  if (!format::DecodeBlockHeader(header, &unchecked).ok()) return;
  auto payload = std::make_shared<fuzzing::ExactBytes>(payload_in);
  const uint64_t checksum =
      fuzzing::FixPayloadChecksums(unchecked, payload->mutable_data(), payload->size());
  EncodeFixed<uint64_t>(header.data() + 16, checksum);
  fuzzing::FixHeaderChecksum(header.data(), header.size());

  format::FramePrefix prefix;
  const Status frame = format::CheckFrameHeader(header, &prefix);
  RUNSTORE_FUZZ_CHECK(frame.ok(), frame.ToString());
  format::BlockInfo b;
  b.frame_offset = format::kSegmentHeaderSize;
  b.header_len = prefix.header_len;
  b.payload_offset = format::PayloadOffset(b.frame_offset, b.header_len);
  RUNSTORE_FUZZ_CHECK(format::DecodeBlockHeader(header, &b.header).ok(), "");

  const Status checked = format::CheckPayload(payload->view(), b, kFile);
  if (b.header.flags & format::kBlockValueChunks) {
    format::BlockView v;
    const bool parses = v.Parse(b.header, payload->view()).ok();
    RUNSTORE_FUZZ_CHECK(checked.ok() == parses, checked.ToString());
  } else {
    RUNSTORE_FUZZ_CHECK(checked.ok(), checked.ToString());
  }
  format::DecodedBlock out;
  if (format::DecodeBlock(payload->view(), payload, nullptr, b, kFile, &out).ok()) {
    fuzzing::TouchBlock(b.header, out.view, out.bytes);
  }

  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::MakeStoreDir(env.get(), kStore,
                        format::EncodeStoreMarker(format::kSegmentFormatVersion));
  fuzzing::PutFile(env.get(), std::string(kStore) + "/" + kFile,
                   OneBlockSegment(header, payload->view()));
  if (auto store = fuzzing::OpenReadOnly(env.get(), kStore)) {
    fuzzing::ReadSnapshot(*store->GetSnapshot());
  }
}

}  // namespace
}  // namespace runstore

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
