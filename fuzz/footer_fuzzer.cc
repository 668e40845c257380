// The footer index of a sealed segment (docs/format.md "Footer frame and
// trailer"), reached behind its checksums. The input is
//
//   u64 commit_count, u64 block_count   the footer header's counts
//   u32 n, then n bytes                 the footer payload: the commit table
//                                       and the block entries
//   the rest                            the segment's frames, from offset 128
//
// and the harness seals it into a segment as a writer would: the segment
// header, the frames, a footer frame at the next multiple of 64 (its
// committed_end), the payload and a trailer, then recomputes every checksum
// (fuzz_util.h FixChecksums: the frames' own, the copies of block headers in
// the footer, the footer's and the trailer's). LoadSegmentIndex must then
// give an index the store can rely on (fuzz_util.h CheckIndex), whose every
// block is read as the store reads it; and the segment is opened in a store
// and read in full through the public API.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/format.h"
#include "format/segment_reader.h"
#include "fuzz_util.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore {
namespace {

constexpr char kStore[] = "/s";
constexpr char kFile[] = "segments/f-00000001.rss";

void PadTo64(std::string* s) { s->resize(AlignUp(s->size(), format::kFrameAlign), '\0'); }

std::string SealedSegment(uint64_t commit_count, uint64_t block_count, std::string_view payload,
                          std::string_view frames) {
  format::SegmentHeader sh;
  sh.version = format::kSegmentFormatVersion;
  sh.created_ns = 1;
  sh.sequence = 1;
  sh.writer_id = "f";
  std::string seg = format::EncodeSegmentHeader(sh);
  seg += frames;
  PadTo64(&seg);
  format::FooterHeader f;
  f.payload_len = payload.size();
  f.payload_checksum = Checksum(payload);
  f.commit_count = commit_count;
  f.block_count = block_count;
  f.committed_end = seg.size();
  seg += format::EncodeFooterHeader(f);
  PadTo64(&seg);
  seg += payload;
  PadTo64(&seg);
  format::Trailer t;
  t.footer_offset = f.committed_end;
  t.version = format::kSegmentFormatVersion;
  seg += format::EncodeTrailer(t);
  return seg;
}

void Run(const uint8_t* data, size_t size) {
  fuzzing::InputReader in(data, size);
  const uint64_t commit_count = in.Get<uint64_t>();
  const uint64_t block_count = in.Get<uint64_t>();
  const std::string_view payload = in.Take(in.Get<uint32_t>());
  std::string seg = SealedSegment(commit_count, block_count, payload, in.Rest());
  fuzzing::FixChecksums(&seg);

  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::MakeStoreDir(env.get(), kStore,
                        format::EncodeStoreMarker(format::kSegmentFormatVersion));
  const std::string path = std::string(kStore) + "/" + kFile;
  fuzzing::PutFile(env.get(), path, seg);
  {
    auto file = env->NewRandomAccessFile(path);
    RUNSTORE_FUZZ_CHECK(file.ok(), file.status().ToString());
    format::SegmentIndex index;
    const Status s = format::LoadSegmentIndex(**file, kFile, &index);
    if (!s.ok()) {
      RUNSTORE_FUZZ_CHECK(s.code() == StatusCode::kCorruption && s.message().starts_with(kFile),
                          s.ToString());
      return;
    }
    fuzzing::CheckIndex(index, seg.size(), kFile);
    fuzzing::ReadBlocks(**file, index, kFile);
  }
  if (auto store = fuzzing::OpenReadOnly(env.get(), kStore)) {
    fuzzing::ReadSnapshot(*store->GetSnapshot());
  }
}

}  // namespace
}  // namespace runstore

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::Run(data, size);
  return 0;
}
