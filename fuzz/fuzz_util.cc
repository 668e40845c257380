#include "fuzz_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "format/block_reader.h"
#include "util/coding.h"
#include "util/hash.h"
#include "util/shape.h"

namespace runstore::fuzzing {

using format::BlockHeader;
using format::BlockView;

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz property failed: %s %s\n", what, detail.c_str());
  std::abort();
}

void ExactBytes::Free::operator()(char* p) const { std::free(p); }

ExactBytes::ExactBytes(std::string_view bytes) : size_(bytes.size()) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes.size()) != 0) Fail("posix_memalign", "");
  data_.reset(static_cast<char*>(p));
  if (!bytes.empty()) std::memcpy(data_.get(), bytes.data(), bytes.size());
}

void Touch(const char* p, size_t n) {
  // Summed into a volatile so that the reads are not optimised away.
  uint8_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<uint8_t>(p[i]);
  static volatile uint8_t sink;
  sink = sink + sum;
}

namespace {

// Whether [p, p + n) lies inside `outer`.
bool Inside(std::string_view outer, const char* p, uint64_t n) {
  if (n == 0) return true;
  if (p < outer.data() || p > outer.data() + outer.size()) return false;
  return n <= static_cast<uint64_t>(outer.data() + outer.size() - p);
}

std::string Where(const BlockHeader& h, uint32_t i) {
  return "(series '" + h.name.str() + "', record " + std::to_string(i) + " of " +
         std::to_string(h.count) + ")";
}

}  // namespace

void TouchBlock(const BlockHeader& h, const BlockView& v, std::string_view payload) {
  RUNSTORE_FUZZ_CHECK(v.count() == h.count, Where(h, 0));
  const uint32_t n = v.count();
  std::vector<int64_t> steps(n), runs(n);
  for (uint32_t i = 0; i < n; ++i) {
    const RunRef run = v.run(i);
    if (run.is_string) {
      RUNSTORE_FUZZ_CHECK(Inside(payload, run.s.data(), run.s.size()), Where(h, i));
      RUNSTORE_FUZZ_CHECK(run.s.size() <= kMaxRunIdLength, Where(h, i));
      Touch(run.s);
    }
    runs[i] = run.i;
    steps[i] = v.step(i);
    const std::string_view bytes = v.value_bytes(i);
    RUNSTORE_FUZZ_CHECK(Inside(payload, bytes.data(), bytes.size()), Where(h, i));
    Touch(bytes);
    const std::vector<int64_t> shape = v.value_shape(i);
    if (IsVarLength(h.dtype)) {
      RUNSTORE_FUZZ_CHECK(shape.empty(), Where(h, i));
    } else {
      uint64_t expected = 0;
      RUNSTORE_FUZZ_CHECK(ShapeBytes(shape, DTypeSize(h.dtype), &expected), Where(h, i));
      RUNSTORE_FUZZ_CHECK(expected == bytes.size(), Where(h, i) + ": shape holds " +
                                                        std::to_string(expected) + " bytes, view " +
                                                        std::to_string(bytes.size()));
      if (!h.variable_shape) RUNSTORE_FUZZ_CHECK(shape == h.dims, Where(h, i));
    }
  }
  std::vector<int64_t> copy(n);
  v.CopySteps(copy.data());
  RUNSTORE_FUZZ_CHECK(copy == steps, Where(h, 0) + ": CopySteps differs from step(i)");
  if (v.run_encoding() == format::RunEncoding::kInt) {
    v.CopyIntRuns(copy.data());
    RUNSTORE_FUZZ_CHECK(copy == runs, Where(h, 0) + ": CopyIntRuns differs from run(i)");
  }
  if (v.steps_data()) RUNSTORE_FUZZ_CHECK(Inside(payload, v.steps_data(), 8ull * n), Where(h, 0));
  if (v.run_encoding() == format::RunEncoding::kInt && v.int_runs_data()) {
    RUNSTORE_FUZZ_CHECK(Inside(payload, v.int_runs_data(), 8ull * n), Where(h, 0));
  }
  if (!IsVarLength(h.dtype) && !h.variable_shape) {
    uint64_t all = 0;
    RUNSTORE_FUZZ_CHECK(!__builtin_mul_overflow(v.record_bytes(), uint64_t{n}, &all), Where(h, 0));
    RUNSTORE_FUZZ_CHECK(Inside(payload, v.fixed_values(), all), Where(h, 0));
    Touch(v.fixed_values(), all);
  }
  if (const format::ValueChunks* c = v.value_chunks()) {
    RUNSTORE_FUZZ_CHECK(h.flags & format::kBlockValueChunks, Where(h, 0));
    RUNSTORE_FUZZ_CHECK(Inside(payload, payload.data() + c->data_offset, c->data_len), Where(h, 0));
    RUNSTORE_FUZZ_CHECK(c->count <= payload.size() / 8 + 1, Where(h, 0));
    RUNSTORE_FUZZ_CHECK(Inside(payload, c->table, 8 * c->count), Where(h, 0));
    uint64_t covered = 0;
    for (uint64_t i = 0; i < c->count; ++i) {
      RUNSTORE_FUZZ_CHECK(c->begin(i) == covered && c->end(i) > c->begin(i), Where(h, 0));
      covered = c->end(i);
      (void)c->expected(i);
    }
    RUNSTORE_FUZZ_CHECK(covered == c->data_len, Where(h, 0) + ": chunks do not cover the value");
  } else {
    RUNSTORE_FUZZ_CHECK(!(h.flags & format::kBlockValueChunks), Where(h, 0));
  }
}

void TouchValue(const Value& v, bool batch) {
  Touch(v.data(), v.nbytes());
  if (IsVarLength(v.dtype())) {
    RUNSTORE_FUZZ_CHECK(v.shape().empty(), "string value with a shape");
    return;
  }
  std::span<const int64_t> shape(v.shape());
  uint64_t records = 1;
  if (batch) {
    RUNSTORE_FUZZ_CHECK(!shape.empty() && shape[0] >= 0, "batch shape");
    records = static_cast<uint64_t>(shape[0]);
    shape = shape.subspan(1);
  }
  uint64_t expected = 0;
  RUNSTORE_FUZZ_CHECK(ShapeBytes(shape, DTypeSize(v.dtype()), &expected), "value shape");
  RUNSTORE_FUZZ_CHECK(!__builtin_mul_overflow(expected, records, &expected), "batch shape");
  RUNSTORE_FUZZ_CHECK(expected == v.nbytes(), "value of " + std::to_string(v.nbytes()) +
                                                  " bytes whose shape holds " +
                                                  std::to_string(expected));
}

namespace {

class ExactRegion final : public MappedRegion {
 public:
  explicit ExactRegion(std::string_view bytes) : bytes_(bytes) {
    data_ = bytes_.data();
    size_ = bytes_.size();
  }

 private:
  ExactBytes bytes_;
};

class ExactFile final : public RandomAccessFile {
 public:
  explicit ExactFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  Status Read(uint64_t offset, size_t n, char* scratch, std::string_view* result) const override {
    return base_->Read(offset, n, scratch, result);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }
  Result<std::shared_ptr<const MappedRegion>> Map(uint64_t length) const override {
    RUNSTORE_ASSIGN_OR_RETURN(auto m, base_->Map(length));
    return std::shared_ptr<const MappedRegion>(new ExactRegion({m->data(), m->size()}));
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
};

// The memory Env an ExactEnv owns, as a base class: made before the
// EnvWrapper that hands calls to it.
struct OwnsMemEnv {
  std::unique_ptr<Env> mem = NewMemEnv();
};

class ExactEnv final : private OwnsMemEnv, public EnvWrapper {
 public:
  ExactEnv() : EnvWrapper(mem.get()) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, target()->NewRandomAccessFile(path));
    return std::unique_ptr<RandomAccessFile>(new ExactFile(std::move(f)));
  }
  int64_t NowNanos() override { return 1; }
};

}  // namespace

std::unique_ptr<Env> NewExactMemEnv() { return std::make_unique<ExactEnv>(); }

void PutFile(Env* env, const std::string& path, std::string_view contents) {
  auto f = env->NewWritableFile(path, /*exclusive=*/false);
  RUNSTORE_FUZZ_CHECK(f.ok(), f.status().ToString());
  RUNSTORE_FUZZ_CHECK((*f)->Append(contents).ok(), path);
  RUNSTORE_FUZZ_CHECK((*f)->Close().ok(), path);
}

void MakeStoreDir(Env* env, const std::string& path, std::string_view marker) {
  RUNSTORE_FUZZ_CHECK(env->CreateDir(path).ok(), path);
  RUNSTORE_FUZZ_CHECK(env->CreateDir(path + "/segments").ok(), path);
  PutFile(env, path + "/RUNSTORE", marker);
}

void CheckIndex(const format::SegmentIndex& index, uint64_t file_size, const std::string& name) {
  const std::string at = name + ": ";
  RUNSTORE_FUZZ_CHECK(index.committed_end <= file_size,
                      at + "committed end " + std::to_string(index.committed_end) +
                          " past the end of a file of " + std::to_string(file_size) + " bytes");
  uint64_t prev_end = format::kSegmentHeaderSize;
  for (size_t i = 0; i < index.commits.size(); ++i) {
    const format::CommitInfo& c = index.commits[i];
    RUNSTORE_FUZZ_CHECK(c.sequence == i + 1, at + "commit sequence");
    RUNSTORE_FUZZ_CHECK(i == 0 || c.time_ns > index.commits[i - 1].time_ns, at + "commit time");
    RUNSTORE_FUZZ_CHECK(
        c.end_offset > prev_end && c.end_offset <= index.committed_end,
        at + "commit " + std::to_string(c.sequence) + " ends at " + std::to_string(c.end_offset));
    prev_end = c.end_offset;
  }
  if (!index.commits.empty()) {
    RUNSTORE_FUZZ_CHECK(index.commits.back().end_offset == index.committed_end,
                        at + "the last commit does not end at the committed end");
  }
  uint64_t prev_frame_end = format::kSegmentHeaderSize;
  uint32_t prev_commit = 0;
  for (size_t i = 0; i < index.blocks.size(); ++i) {
    const format::BlockInfo& b = index.blocks[i];
    const std::string which =
        at + "block " + std::to_string(i) + " at " + std::to_string(b.frame_offset) + ": ";
    RUNSTORE_FUZZ_CHECK(b.commit_index < index.commits.size(), which + "commit index");
    RUNSTORE_FUZZ_CHECK(b.commit_index >= prev_commit, which + "commit index goes back");
    prev_commit = b.commit_index;
    RUNSTORE_FUZZ_CHECK(b.frame_offset >= prev_frame_end, which + "overlaps the block before");
    RUNSTORE_FUZZ_CHECK(b.payload_offset == format::PayloadOffset(b.frame_offset, b.header_len),
                        which + "payload offset");
    const uint64_t commit_end = index.commits[b.commit_index].end_offset;
    RUNSTORE_FUZZ_CHECK(RangeWithin(b.payload_offset, b.header.payload_len, commit_end),
                        which + "payload of " + std::to_string(b.header.payload_len) +
                            " bytes ends past its commit's end " + std::to_string(commit_end));
    prev_frame_end = format::NextFrameOffset(b.payload_offset, b.header.payload_len);
  }
}

size_t ReadBlocks(const RandomAccessFile& file, const format::SegmentIndex& index,
                  const std::string& name) {
  auto map = file.Map(index.committed_end);
  RUNSTORE_FUZZ_CHECK(map.ok(), map.status().ToString());
  const std::shared_ptr<const MappedRegion>& m = *map;
  size_t decoded = 0;
  for (const format::BlockInfo& b : index.blocks) {
    if (!RangeWithin(b.payload_offset, b.header.payload_len, m->size())) continue;
    const std::string_view stored(m->data() + b.payload_offset, b.header.payload_len);
    const Status checked = format::CheckPayload(stored, b, name);
    const Status by_reading = format::CheckPayloadByReading(file, stored, b, name);
    RUNSTORE_FUZZ_CHECK(checked.ok() == by_reading.ok(),
                        "CheckPayload: " + checked.ToString() +
                            "; CheckPayloadByReading: " + by_reading.ToString());
    format::DecodedBlock out;
    if (!format::DecodeBlock(stored, nullptr, m, b, name, &out).ok()) continue;
    TouchBlock(b.header, out.view, out.bytes);
    ++decoded;
  }
  return decoded;
}

bool SplitBlockInput(std::string_view in, std::string* header, std::string_view* payload) {
  const uint16_t len = format::PeekHeaderLength(in.substr(0, 8));
  if (len == 0 || len > in.size()) return false;
  header->assign(in.substr(0, len));
  *payload = in.substr(len);
  EncodeFixed<uint64_t>(header->data() + 8, payload->size());
  // raw_len at 24, codec at 37: a header too short for them fails to decode.
  if (len > 40 && (*header)[37] == static_cast<char>(Codec::kNone)) {
    EncodeFixed<uint64_t>(header->data() + 24, payload->size());
  }
  return true;
}

uint64_t FixPayloadChecksums(const BlockHeader& h, char* payload, size_t n) {
  if (h.flags & format::kBlockValueChunks) {
    BlockView v;
    if (v.Parse(h, std::string_view(payload, n)).ok() && v.value_chunks() != nullptr) {
      const format::ValueChunks& c = *v.value_chunks();
      char* table = payload + (c.table - payload);
      for (uint64_t i = 0; i < c.count; ++i) {
        EncodeFixed<uint64_t>(
            table + 8 * i, Checksum(payload + c.data_offset + c.begin(i), c.end(i) - c.begin(i)));
      }
      ChecksumStream s;
      s.Update(payload, c.data_offset);
      const uint64_t after = c.data_offset + c.data_len;
      s.Update(payload + after, n - after);
      return s.Digest();
    }
  }
  return Checksum(payload, n);
}

void FixHeaderChecksum(char* header, size_t len) {
  EncodeFixed<uint64_t>(header + len - 8, Checksum(header, len - 8));
}

namespace {

// The payload checksum of the block whose frame header is `header`, with
// its payload at `payload` (value chunk tables fixed on the way).
uint64_t BlockPayloadChecksum(std::string_view header, char* payload, uint64_t n) {
  BlockHeader h;
  if (!format::DecodeBlockHeader(header, &h).ok()) return Checksum(payload, n);
  return FixPayloadChecksums(h, payload, n);
}

void FixFooter(std::string* segment, uint64_t footer_offset) {
  std::string& s = *segment;
  if (!RangeWithin(footer_offset, 8, s.size())) return;
  const uint16_t len = format::PeekHeaderLength(std::string_view(s).substr(footer_offset, 8));
  if (len < format::kFooterHeaderSize || !RangeWithin(footer_offset, len, s.size())) return;
  char* hdr = s.data() + footer_offset;
  if (hdr[4] != static_cast<char>(format::FrameKind::kFooter)) return;
  const uint64_t payload_len = DecodeFixed<uint64_t>(hdr + 8);
  const uint64_t commit_count = DecodeFixed<uint64_t>(hdr + 24);
  const uint64_t block_count = DecodeFixed<uint64_t>(hdr + 32);
  const uint64_t payload_off = format::PayloadOffset(footer_offset, len);
  if (RangeWithin(payload_off, payload_len, s.size())) {
    char* payload = s.data() + payload_off;
    uint64_t p = 0;
    if (commit_count <= payload_len / 24) {
      p = commit_count * 24;
      for (uint64_t i = 0; i < block_count && RangeWithin(p, 16, payload_len); ++i) {
        const uint64_t frame_offset = DecodeFixed<uint64_t>(payload + p);
        const uint32_t hl = DecodeFixed<uint32_t>(payload + p + 8);
        p += 16;
        if (hl < format::kFramePrefixSize + 8 || hl > format::kMaxFrameHeaderSize ||
            !RangeWithin(p, hl, payload_len)) {
          break;
        }
        char* copy = payload + p;
        const uint64_t block_payload_len = DecodeFixed<uint64_t>(copy + 8);
        const uint64_t padded = AlignUp(hl, format::kFrameAlign);
        // Only a payload among the frames: fixing the chunk table of one
        // that a hostile entry places over the header, the footer or the
        // trailer would rewrite those.
        if (frame_offset >= format::kSegmentHeaderSize &&
            RangeWithin(frame_offset, padded, footer_offset) &&
            RangeWithin(frame_offset + padded, block_payload_len, footer_offset)) {
          EncodeFixed<uint64_t>(
              copy + 16, BlockPayloadChecksum(std::string_view(copy, hl),
                                              s.data() + frame_offset + padded, block_payload_len));
        }
        FixHeaderChecksum(copy, hl);
        p += hl;
      }
    }
    EncodeFixed<uint64_t>(hdr + 16, Checksum(payload, payload_len));
  }
  FixHeaderChecksum(hdr, len);
}

}  // namespace

void FixChecksums(std::string* segment) {
  std::string& s = *segment;
  if (s.size() >= format::kSegmentHeaderSize &&
      std::memcmp(s.data(), format::kSegmentMagic, 8) == 0) {
    EncodeFixed<uint64_t>(s.data() + 120, Checksum(s.data(), 120));
  }
  // The frames end where a trailer names its footer: the walk rewrites
  // nothing past it, so that a hostile frame over the footer or the trailer
  // does not rewrite them.
  uint64_t frames_end = s.size();
  if (s.size() >= format::kSegmentHeaderSize + format::kTrailerSize) {
    const char* t = s.data() + s.size() - format::kTrailerSize;
    if (std::memcmp(t + 16, format::kTrailerMagic, 8) == 0) {
      frames_end = std::min<uint64_t>(DecodeFixed<uint64_t>(t), s.size() - format::kTrailerSize);
    }
  }
  std::vector<uint64_t> digests;
  uint64_t pos = format::kSegmentHeaderSize;
  while (RangeWithin(pos, 8, frames_end)) {
    const uint16_t len = format::PeekHeaderLength(std::string_view(s).substr(pos, 8));
    if (len == 0 || !RangeWithin(pos, len, frames_end)) break;
    char* hdr = s.data() + pos;
    const auto kind = static_cast<format::FrameKind>(hdr[4]);
    if (kind == format::FrameKind::kFooter) break;  // fixed with the trailer
    const uint64_t payload_len = DecodeFixed<uint64_t>(hdr + 8);
    const uint64_t payload_off = format::PayloadOffset(pos, len);
    const bool payload_inside = RangeWithin(payload_off, payload_len, frames_end);
    if (kind == format::FrameKind::kBlock) {
      if (payload_inside) {
        EncodeFixed<uint64_t>(hdr + 16, BlockPayloadChecksum(std::string_view(hdr, len),
                                                             s.data() + payload_off, payload_len));
      }
      FixHeaderChecksum(hdr, len);
      digests.push_back(format::StoredHeaderChecksum(std::string_view(hdr, len)));
    } else {
      if (len == format::kCommitHeaderSize) {
        EncodeFixed<uint64_t>(hdr + 56, Checksum(digests.data(), digests.size() * 8));
      }
      FixHeaderChecksum(hdr, len);
      digests.clear();
    }
    if (!payload_inside) break;
    pos = format::NextFrameOffset(payload_off, payload_len);
  }
  if (s.size() >= format::kSegmentHeaderSize + format::kTrailerSize) {
    char* t = s.data() + s.size() - format::kTrailerSize;
    if (std::memcmp(t + 16, format::kTrailerMagic, 8) == 0) {
      FixFooter(segment, DecodeFixed<uint64_t>(t));
      t = s.data() + s.size() - format::kTrailerSize;
      EncodeFixed<uint64_t>(t + 24, Checksum(t, 24));
    }
  }
}

namespace {

constexpr size_t kKeysPerSeries = 8;

// What a read of a snapshot may fail with: NotFound for what is not there,
// Corruption naming the segment for damage.
void CheckReadStatus(const Status& s, const char* what) {
  if (s.ok() || s.code() == StatusCode::kNotFound) return;
  RUNSTORE_FUZZ_CHECK(s.code() == StatusCode::kCorruption && s.message().starts_with("segments/"),
                      std::string(what) + ": " + s.ToString());
}

struct SeenKey {
  RunId run;
  int64_t step;
};

// Scans `name` with `options` to its end, reading every batch; the first
// keys seen go to *keys (when not null).
void ScanSeries(const Snapshot& snap, const std::string& name, const ScanOptions& options,
                std::vector<SeenKey>* keys) {
  auto scanner = snap.Scan(name, options);
  CheckReadStatus(scanner.status(), "Scan");
  if (!scanner.ok()) return;
  ScanBatch batch;
  // Every batch holds at least one record, so a scan ends within the
  // snapshot's record count; the bound catches one that does not end.
  for (uint64_t batches = 0;; ++batches) {
    RUNSTORE_FUZZ_CHECK(batches <= (uint64_t{1} << 32), "scan of '" + name + "' does not end");
    auto more = (*scanner)->Next(&batch);
    CheckReadStatus(more.status(), "SeriesScanner::Next");
    if (!more.ok() || !*more) return;
    RUNSTORE_FUZZ_CHECK(batch.count > 0, "empty batch of '" + name + "'");
    if (options.keys) {
      RUNSTORE_FUZZ_CHECK(batch.int_runs.size() == batch.count && batch.steps.size() == batch.count,
                          "key columns of a batch of '" + name + "'");
      RUNSTORE_FUZZ_CHECK(batch.run_is_string.empty() || batch.run_is_string.size() == batch.count,
                          "run kinds of a batch of '" + name + "'");
      RUNSTORE_FUZZ_CHECK(batch.string_runs.size() == batch.run_is_string.size(),
                          "string runs of a batch of '" + name + "'");
      for (size_t i = 0; i < batch.count; ++i) {
        const RunId run = batch.run(i);
        if (keys && keys->size() < kKeysPerSeries) keys->push_back(SeenKey{run, batch.steps[i]});
      }
    }
    if (batch.records.empty()) {
      RUNSTORE_FUZZ_CHECK(!batch.values.shape().empty() &&
                              batch.values.shape()[0] == static_cast<int64_t>(batch.count),
                          "value array of a batch of '" + name + "'");
      TouchValue(batch.values, /*batch=*/true);
    } else {
      RUNSTORE_FUZZ_CHECK(batch.records.size() == batch.count,
                          "records of a batch of '" + name + "'");
      for (const Value& v : batch.records) TouchValue(v);
    }
  }
}

void ReadLazy(const Snapshot& snap, const SeenKey& k, const std::string& name) {
  auto lazy = snap.GetLazy(k.run, name, k.step);
  CheckReadStatus(lazy.status(), "GetLazy");
  if (!lazy.ok()) return;
  const uint64_t n = lazy->value().nbytes();
  const LazyValue::Range some[] = {{n / 2, 1}, {0, 1}, {n > 0 ? n - 1 : 0, 1}};
  CheckReadStatus(lazy->Check(some), "LazyValue::Check");
  const Status all = lazy->CheckAll();
  CheckReadStatus(all, "LazyValue::CheckAll");
  const bool checked = all.ok();
  RUNSTORE_FUZZ_CHECK(!checked || lazy->all_checked(), "CheckAll passed, all_checked false");
  TouchValue(lazy->value());
}

}  // namespace

void ReadSnapshot(const Snapshot& snap) {
  for (const SegmentInfo& s : snap.ListSegments()) {
    RUNSTORE_FUZZ_CHECK(s.committed_bytes <= s.file_bytes, s.file + ": committed past the end");
  }
  CheckReadStatus(snap.ListSeries(false).status(), "ListSeries");
  CheckReadStatus(snap.ListRuns().status(), "ListRuns");
  auto series = snap.ListSeries(/*include_reserved=*/true);
  CheckReadStatus(series.status(), "ListSeries");
  if (series.ok()) {
    for (const SeriesInfo& info : *series) {
      const std::string& name = info.name;
      CheckReadStatus(snap.GetSeriesInfo(name).status(), "GetSeriesInfo");
      std::vector<SeenKey> keys;
      ScanSeries(snap, name, ScanOptions(), &keys);
      if (!keys.empty()) {
        ScanOptions one;
        one.runs = std::vector<RunId>{keys.front().run, RunId("no such run")};
        one.steps = ScanOptions::StepRange{keys.front().step, keys.front().step};
        ScanSeries(snap, name, one, nullptr);
        ScanOptions window;
        window.keys = false;
        window.steps = ScanOptions::StepRange{keys.front().step, keys.back().step};
        if (window.steps->first > window.steps->last) {
          std::swap(window.steps->first, window.steps->last);
        }
        ScanSeries(snap, name, window, nullptr);
      }
      ScanOptions none;
      none.runs = std::vector<RunId>{};
      ScanSeries(snap, name, none, nullptr);
      for (const SeenKey& k : keys) {
        auto v = snap.Get(k.run, name, k.step);
        CheckReadStatus(v.status(), "Get");
        if (v.ok()) TouchValue(*v);
        ReadLazy(snap, k, name);
      }
      CheckReadStatus(snap.Get(RunId(int64_t{-7}), name, -7).status(), "Get");
    }
  }
  uint64_t last = 0;
  const VerifyReport report = snap.VerifyAll([&](uint64_t done, uint64_t total) {
    RUNSTORE_FUZZ_CHECK(done <= total && done >= last, "VerifyAll progress");
    last = done;
  });
  for (const Status& s : report.problems) {
    RUNSTORE_FUZZ_CHECK(
        s.code() == StatusCode::kCorruption && s.message().starts_with("segments/"),
        "VerifyAll problem that is not a Corruption naming its file: " + s.ToString());
  }
  snap.ReleasePages();
}

std::unique_ptr<Store> OpenReadOnly(Env* env, const std::string& path) {
  StoreOptions options;
  options.env = env;
  options.create_if_missing = false;
  options.read_only = true;
  auto store = Store::Open(path, options);
  if (!store.ok()) {
    CheckOpenStatus(store.status(), path);
    return nullptr;
  }
  return std::move(store).value();
}

void CheckOpenStatus(const Status& s, const std::string& path) {
  if (s.ok()) return;
  RUNSTORE_FUZZ_CHECK(
      (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported) &&
          (s.message().starts_with(path + "/") || s.message().starts_with(path + ":") ||
           s.message().starts_with("segments/")),
      "opening or refreshing a store whose files are damaged: " + s.ToString());
}

}  // namespace runstore::fuzzing
