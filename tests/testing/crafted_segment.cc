#include "testing/crafted_segment.h"

#include "codec/codec.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore::testing {
namespace {

std::string Join(const std::vector<std::string_view>& pieces) {
  std::string s;
  for (auto p : pieces) s.append(p);
  return s;
}

void Pad(std::string* s) { s->resize(AlignUp(s->size(), format::kFrameAlign), '\0'); }

CraftedBlock Finish(format::BlockBuilder* b, Codec codec) {
  CraftedBlock out;
  std::vector<std::string_view> pieces;
  b->Finish(&out.header, &pieces);
  out.payload = Join(pieces);
  if (codec != Codec::kNone) {
    std::string compressed;
    (void)Compress(codec, 3, out.payload, &compressed);
    out.header.codec = codec;
    out.payload = std::move(compressed);
  }
  return out;
}

}  // namespace

CraftedBlock ScalarBlock(const std::string& name, const std::vector<RunId>& runs,
                         const std::vector<int64_t>& steps, const std::vector<double>& values,
                         Codec codec) {
  format::BlockBuilder b(format::BlockSchema{name, DType::kFloat64, false, {}, codec});
  for (size_t i = 0; i < runs.size(); ++i) {
    b.Add(RunRef(runs[i]), steps[i], ValueRef::Scalar(values[i]));
  }
  return Finish(&b, codec);
}

CraftedBlock StringBlock(const std::string& name, const RunId& run, int64_t step,
                         const std::string& value) {
  format::BlockBuilder b(format::BlockSchema{name, DType::kString, false, {}, Codec::kNone});
  b.Add(RunRef(run), step, ValueRef::String(value));
  return Finish(&b, Codec::kNone);
}

SegmentCrafter::SegmentCrafter(std::string writer_id, uint64_t seq) {
  header_.version = format::kSegmentFormatVersion;
  header_.created_ns = 1;
  header_.sequence = seq;
  header_.writer_id = std::move(writer_id);
}

void SegmentCrafter::AppendFrame(const std::string& header, const std::string& payload) {
  body_ += header;
  Pad(&body_);
  body_ += payload;
  Pad(&body_);
}

uint64_t SegmentCrafter::AddBlock(CraftedBlock block, bool keep_lengths) {
  const uint64_t offset = format::kSegmentHeaderSize + body_.size();
  if (!keep_lengths) {
    block.header.payload_len = block.payload.size();
    block.header.payload_checksum = Checksum(block.payload);
    if (block.header.codec == Codec::kNone) block.header.raw_len = block.payload.size();
  }
  const std::string h = format::EncodeBlockHeader(block.header);
  AppendFrame(h, block.payload);
  pending_digests_.push_back(format::StoredHeaderChecksum(h));
  pending_blocks_.push_back(FooterBlock{offset, 0, block.header, {}});
  return offset;
}

uint64_t SegmentCrafter::AddCommit() {
  const uint64_t offset = format::kSegmentHeaderSize + body_.size();
  format::CommitRecord c;
  c.sequence = commits_.size() + 1;
  c.time_ns = ++time_ns_;
  c.first_frame_offset = commit_start_;
  c.frame_count = static_cast<uint32_t>(pending_digests_.size());
  c.frames_digest = Checksum(pending_digests_.data(), pending_digests_.size() * 8);
  AppendFrame(format::EncodeCommitRecord(c), "");
  commit_start_ = format::kSegmentHeaderSize + body_.size();
  for (FooterBlock& b : pending_blocks_) {
    b.commit_index = static_cast<uint32_t>(commits_.size());
    blocks_.push_back(std::move(b));
  }
  pending_blocks_.clear();
  pending_digests_.clear();
  commits_.push_back(c);
  commit_ends_.push_back(commit_start_);
  return offset;
}

void SegmentCrafter::Seal(const std::function<void(std::vector<format::CommitRecord>*,
                                                   std::vector<FooterBlock>*)>& edit) {
  std::vector<format::CommitRecord> commits = commits_;
  std::vector<FooterBlock> blocks = blocks_;
  if (edit) edit(&commits, &blocks);
  std::string payload;
  for (size_t i = 0; i < commits.size(); ++i) {
    PutFixed<uint64_t>(&payload, commits[i].sequence);
    PutFixed<int64_t>(&payload, commits[i].time_ns);
    PutFixed<uint64_t>(&payload, i < commit_ends_.size() ? commit_ends_[i] : 0);
  }
  for (const FooterBlock& b : blocks) {
    const std::string h = b.raw_header.empty() ? format::EncodeBlockHeader(b.header) : b.raw_header;
    PutFixed<uint64_t>(&payload, b.frame_offset);
    PutFixed<uint32_t>(&payload, static_cast<uint32_t>(h.size()));
    PutFixed<uint32_t>(&payload, b.commit_index);
    payload += h;
  }
  const uint64_t footer_offset = format::kSegmentHeaderSize + body_.size();
  format::FooterHeader f;
  f.commit_count = commits.size();
  f.block_count = blocks.size();
  f.committed_end = footer_offset;
  f.payload_len = payload.size();
  f.payload_checksum = Checksum(payload);
  AppendFrame(format::EncodeFooterHeader(f), payload);
  body_ += format::EncodeTrailer(format::Trailer{footer_offset, format::kSegmentFormatVersion});
}

std::string SegmentCrafter::bytes() const { return format::EncodeSegmentHeader(header_) + body_; }

std::string WithFooterSections(const std::string& seg, const std::string& sections) {
  const char* trailer = seg.data() + seg.size() - format::kTrailerSize;
  const uint64_t footer = DecodeFixed<uint64_t>(trailer);
  std::string h = seg.substr(footer, format::kFooterHeaderSize);
  const uint64_t commits = DecodeFixed<uint64_t>(h.data() + 24);
  const uint64_t blocks = DecodeFixed<uint64_t>(h.data() + 32);
  const uint64_t payload_at = footer + AlignUp(format::kFooterHeaderSize, format::kFrameAlign);
  uint64_t end = payload_at + 24 * commits;
  for (uint64_t i = 0; i < blocks; ++i) end += 16 + DecodeFixed<uint32_t>(seg.data() + end + 8);
  const std::string payload = seg.substr(payload_at, end - payload_at) + sections;
  EncodeFixed<uint64_t>(h.data() + 8, payload.size());
  EncodeFixed<uint64_t>(h.data() + 16, Checksum(payload));
  EncodeFixed<uint64_t>(h.data() + h.size() - 8, Checksum(h.data(), h.size() - 8));
  std::string out = seg.substr(0, footer) + h;
  out.resize(payload_at, '\0');
  out += payload;
  out.resize(AlignUp(out.size(), format::kFrameAlign), '\0');
  out.append(trailer, format::kTrailerSize);
  return out;
}

Status WriteCraftedStore(Env* env, const std::string& dir,
                         const std::vector<std::pair<std::string, std::string>>& segments) {
  for (const std::string& d : {dir, dir + "/segments"}) {
    Status s = env->CreateDir(d);
    if (!s.ok() && s.code() != StatusCode::kAlreadyExists) return s;
  }
  auto write = [&](const std::string& path, const std::string& bytes) -> Status {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path, /*exclusive=*/false));
    RUNSTORE_RETURN_IF_ERROR(f->Append(bytes));
    RUNSTORE_RETURN_IF_ERROR(f->Sync());
    return f->Close();
  };
  RUNSTORE_RETURN_IF_ERROR(
      write(dir + "/RUNSTORE", format::EncodeStoreMarker(format::kSegmentFormatVersion)));
  for (const auto& [name, bytes] : segments) {
    RUNSTORE_RETURN_IF_ERROR(write(dir + "/segments/" + name, bytes));
  }
  return Status::OK();
}

}  // namespace runstore::testing
