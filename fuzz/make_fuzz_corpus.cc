// Writes the seed corpora of the fuzz targets (fuzz/README.md): real stores
// written through the public API into an in-memory Env with a deterministic
// clock, cut into the inputs each target takes.
//
//   make_fuzz_corpus OUT_DIR     writes OUT_DIR/<target>/<seed>
//
// The same build writes the same bytes: writer ids, clock and contents are
// fixed, and nothing depends on the time or on randomness.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "format/format.h"
#include "format/replaces.h"
#include "runstore/env.h"
#include "runstore/store.h"
#include "util/coding.h"

namespace runstore {
namespace {

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "make_fuzz_corpus: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}
template <typename T>
T Check(Result<T> r, const char* what) {
  Check(r.status(), what);
  return std::move(r).value();
}

// An Env with a clock that ticks once per call from a fixed start, so that
// creation and commit times are the same on every run.
class ClockEnv final : public EnvWrapper {
 public:
  explicit ClockEnv(Env* target) : EnvWrapper(target) {}
  int64_t NowNanos() override { return kStart + 1000 * ticks_.fetch_add(1); }

 private:
  static constexpr int64_t kStart = 1'700'000'000'000'000'000;
  std::atomic<int64_t> ticks_{1};
};

constexpr char kStorePath[] = "/store";

// One segment file as written, under its name in segments/.
struct SegmentFile {
  std::string name;
  std::string bytes;
  bool sealed;
};

// A store written by one scenario, and the segments it holds at its end.
class Scenario {
 public:
  explicit Scenario(std::string label) : label_(std::move(label)) {
    StoreOptions o;
    o.env = &env_;
    store_ = Check(Store::Open(kStorePath, o), "open store");
  }
  const std::string& label() const { return label_; }

  std::unique_ptr<Writer> NewWriter(const std::string& id, WriterOptions o = {}) {
    o.writer_id = id;
    if (o.block_bytes == WriterOptions().block_bytes) o.block_bytes = 1024;
    o.large_value_bytes = std::max<size_t>(
        o.large_value_bytes == WriterOptions().large_value_bytes ? 4096 : o.large_value_bytes,
        4096);
    return Check(store_->NewWriter(o), "new writer");
  }

  // The segment's bytes now, while its writer may still be appending to it.
  SegmentFile Take(const std::string& name) {
    std::string bytes = Check(
        ReadFileToString(&env_, std::string(kStorePath) + "/segments/" + name), "read segment");
    Trailer t;
    const bool sealed =
        bytes.size() >= format::kTrailerSize &&
        format::DecodeTrailer(std::string_view(bytes).substr(bytes.size() - format::kTrailerSize),
                              &t);
    return SegmentFile{name, std::move(bytes), sealed};
  }
  std::vector<SegmentFile> TakeAll() {
    std::vector<std::string> names =
        Check(env_.GetChildren(std::string(kStorePath) + "/segments"), "list segments");
    std::sort(names.begin(), names.end());
    std::vector<SegmentFile> out;
    for (const std::string& n : names) out.push_back(Take(n));
    return out;
  }
  std::string Marker() {
    return Check(ReadFileToString(&env_, std::string(kStorePath) + "/RUNSTORE"), "read marker");
  }
  // The store's catalog (docs/format.md "Catalog") as it is now.
  std::string CatalogBytes() {
    Check(store_->WriteCatalog().status(), "write catalog");
    return Check(ReadFileToString(&env_, std::string(kStorePath) + "/CATALOG"), "read catalog");
  }

 private:
  using Trailer = format::Trailer;
  std::string label_;
  std::unique_ptr<Env> mem_ = NewMemEnv();
  ClockEnv env_{mem_.get()};
  std::unique_ptr<Store> store_;
};

// The corpora being written: target -> seed name -> contents, each
// contents once per target.
class Corpora {
 public:
  void Add(const std::string& target, const std::string& name, std::string contents) {
    // store_keys takes the store target's inputs.
    if (target == "store") Add("store_keys", name, contents);
    if (!seen_[target].insert(contents).second) return;
    seeds_[target][name] = std::move(contents);
  }
  void Write(const std::filesystem::path& out) const {
    for (const auto& [target, seeds] : seeds_) {
      std::filesystem::create_directories(out / target);
      for (const auto& [name, contents] : seeds) {
        std::ofstream f(out / target / name, std::ios::binary);
        f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
        if (!f) {
          std::fprintf(stderr, "make_fuzz_corpus: cannot write %s\n", name.c_str());
          std::exit(1);
        }
      }
      std::printf("%-22s %4zu seeds\n", target.c_str(), seeds.size());
    }
  }

 private:
  std::map<std::string, std::map<std::string, std::string>> seeds_;
  std::map<std::string, std::set<std::string>> seen_;
};

std::string U16(uint16_t v) {
  std::string s;
  PutFixed<uint16_t>(&s, v);
  return s;
}
std::string U32(uint32_t v) {
  std::string s;
  PutFixed<uint32_t>(&s, v);
  return s;
}
std::string U64(uint64_t v) {
  std::string s;
  PutFixed<uint64_t>(&s, v);
  return s;
}

// A segment cut into its pieces along the walk of its frames.
struct Frames {
  struct Frame {
    uint64_t offset;
    format::FramePrefix prefix;
    std::string header;
    std::string payload;
  };
  std::vector<Frame> frames;
  std::vector<uint64_t> commit_ends;  // just past each commit record's padding
};

Frames Walk(const std::string& seg) {
  Frames out;
  uint64_t pos = format::kSegmentHeaderSize;
  while (RangeWithin(pos, 8, seg.size())) {
    const uint16_t len = format::PeekHeaderLength(std::string_view(seg).substr(pos, 8));
    if (len == 0 || !RangeWithin(pos, len, seg.size())) break;
    Frames::Frame f;
    f.offset = pos;
    f.header = seg.substr(pos, len);
    if (!format::CheckFrameHeader(f.header, &f.prefix).ok()) break;
    const uint64_t payload_off = format::PayloadOffset(pos, len);
    if (!RangeWithin(payload_off, f.prefix.payload_len, seg.size())) break;
    f.payload = seg.substr(payload_off, f.prefix.payload_len);
    pos = format::NextFrameOffset(payload_off, f.prefix.payload_len);
    if (f.prefix.kind == format::FrameKind::kCommit) out.commit_ends.push_back(pos);
    out.frames.push_back(std::move(f));
  }
  return out;
}

std::string Stem(const std::string& name) { return name.substr(0, name.find('.')); }

// Cuts one segment into the inputs of the targets that take pieces of one.
void AddSegment(Corpora* c, const std::string& label, const SegmentFile& seg) {
  const std::string base = label + "-" + Stem(seg.name) + (seg.sealed ? "-sealed" : "-open");
  c->Add("segment_header", label + "-" + Stem(seg.name), seg.bytes.substr(0, 128));
  c->Add("segment_header", label + "-name-" + Stem(seg.name), seg.name);
  const Frames w = Walk(seg.bytes);
  int block = 0, commit = 0;
  for (const Frames::Frame& f : w.frames) {
    switch (f.prefix.kind) {
      case format::FrameKind::kBlock: {
        const std::string n = label + "-" + Stem(seg.name) + "-block" + std::to_string(block++);
        c->Add("block_header", n, f.header);
        c->Add("block_payload", n, f.header + f.payload);
        c->Add("block_payload_fixup", n, f.header + f.payload);
        break;
      }
      case format::FrameKind::kCommit:
        c->Add("commit_record", label + "-" + Stem(seg.name) + "-commit" + std::to_string(commit++),
               f.header);
        break;
      case format::FrameKind::kFooter: {
        const std::string frames = seg.bytes.substr(128, f.offset - 128);
        format::FooterHeader fh;
        Check(format::DecodeFooterHeader(f.header, &fh), "footer header");
        c->Add("commit_record", label + "-" + Stem(seg.name) + "-footer", f.header);
        c->Add("footer", base,
               U64(fh.commit_count) + U64(fh.block_count) + U32(f.payload.size()) + f.payload +
                   frames);
        break;
      }
    }
  }
  if (seg.sealed) {
    c->Add("commit_record", label + "-" + Stem(seg.name) + "-trailer",
           seg.bytes.substr(seg.bytes.size() - format::kTrailerSize));
    c->Add("footer_raw", base, seg.bytes);
  }
  // Recovery: the file whole, and cut at the end of its first commit and in
  // the middle of its second (cuts are u16: files here stay under 64 KiB).
  std::vector<uint64_t> cuts = {seg.bytes.size()};
  if (!w.commit_ends.empty()) cuts.push_back(w.commit_ends.front());
  if (w.commit_ends.size() > 1) cuts.push_back((w.commit_ends[0] + w.commit_ends[1]) / 2);
  if (seg.sealed) cuts.push_back(seg.bytes.size() - format::kTrailerSize);
  for (uint64_t cut : cuts) {
    if (cut > 0xffff) continue;
    c->Add("recovery", base + "-cut" + std::to_string(cut),
           seg.bytes + U16(static_cast<uint16_t>(cut)));
  }
}

// The store target's input (store_fuzzer.cc): flags, cut, marker, segments.
std::string StoreInput(uint8_t flags, uint32_t cut, const std::string& marker,
                       const std::string& first, const std::string& second) {
  return std::string(1, static_cast<char>(flags)) + U32(cut) +
         U16(static_cast<uint16_t>(marker.size())) + marker + U32(first.size()) + first + second;
}

void AddStore(Corpora* c, Scenario* s, const std::vector<SegmentFile>& segs) {
  const std::string marker = s->Marker();
  c->Add("marker", s->label(), marker);
  // The catalog target's input (catalog_fuzzer.cc): flags, then the file.
  const std::string catalog = s->CatalogBytes();
  c->Add("catalog", s->label(), std::string(1, '\0') + catalog);
  c->Add("catalog", s->label() + "-fixed", std::string(1, '\1') + catalog);
  if (segs.empty()) return;
  const std::string& first = segs[0].bytes;
  const Frames w = Walk(first);
  const uint32_t cut = w.commit_ends.empty() ? 0 : static_cast<uint32_t>(w.commit_ends.front());
  c->Add("store", s->label() + "-one", StoreInput(0, 0, marker, first, ""));
  c->Add("store", s->label() + "-one-fixed", StoreInput(1, 0, marker, first, ""));
  c->Add("store", s->label() + "-one-grow", StoreInput(8, cut, marker, first, ""));
  c->Add("store", s->label() + "-one-shrink", StoreInput(16, cut, marker, first, ""));
  if (segs.size() > 1) {
    const bool same_writer = segs[1].name.substr(0, segs[1].name.rfind('-')) ==
                             segs[0].name.substr(0, segs[0].name.rfind('-'));
    const uint8_t two = same_writer ? 2 | 4 : 2;
    const uint32_t half = static_cast<uint32_t>(segs[1].bytes.size() / 2);
    c->Add("store", s->label() + "-two", StoreInput(two, 0, marker, first, segs[1].bytes));
    c->Add("store", s->label() + "-two-fixed-grow",
           StoreInput(two | 1 | 8, half, marker, first, segs[1].bytes));
  }
}

// Every numeric dtype as scalars, runs written run by run (their keys stored
// as sequences) and step by step, over two commits: the unsealed segment
// after each commit, and sealed.
void Scalars(Corpora* c) {
  Scenario s("scalars");
  auto w = s.NewWriter("w1");
  for (int64_t run = 0; run < 4; ++run) {
    for (int64_t step = 0; step < 20; ++step) {
      Check(w->Append(run, "loss", step, 1.0 / static_cast<double>(1 + run + step)), "append");
    }
  }
  for (int64_t step = 0; step < 5; ++step) {
    for (int64_t run = 0; run < 3; ++run) {
      Check(w->Append(run, "epoch", step, static_cast<int32_t>(step * 10 + run)), "append");
    }
  }
  Check(w->Commit(), "commit");
  AddSegment(c, s.label() + "1", s.Take("w1-00000001.rss"));
  Check(w->Append(0, "done", 0, true), "append");
  Check(w->Append(0, "i8", 0, int8_t{-3}), "append");
  Check(w->Append(0, "i16", 0, int16_t{-300}), "append");
  Check(w->Append(0, "i64", 0, int64_t{-3000000000}), "append");
  Check(w->Append(0, "u8", 0, uint8_t{200}), "append");
  Check(w->Append(0, "u16", 0, uint16_t{60000}), "append");
  Check(w->Append(0, "u32", 0, uint32_t{4000000000}), "append");
  Check(w->Append(0, "u64", 0, uint64_t{1} << 63), "append");
  Check(w->Append(0, "f32", 0, 0.5f), "append");
  Check(w->Append(7, "loss", 3, 0.25), "append");  // out of order: keys not ascending
  Check(w->Append(5, "loss", 1, 0.125), "append");
  Check(w->Commit(), "commit");
  AddSegment(c, s.label() + "2", s.Take("w1-00000001.rss"));
  Check(w->Close(), "close");
  const auto segs = s.TakeAll();
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
}

// Fixed shapes under each codec, variable shapes, and records of a shape
// with a zero dimension (no bytes at all).
void Arrays(Corpora* c) {
  Scenario s("arrays");
  auto w = s.NewWriter("w2");
  Check(w->DefineSeries("img", SeriesOptions{DType::kFloat32, {4, 3}, false, Codec::kLz4}), "def");
  Check(w->DefineSeries("vec", SeriesOptions{DType::kInt64, {8}, false, Codec::kZstd}), "def");
  Check(w->DefineSeries("cube", SeriesOptions{DType::kUInt8, {2, 2, 2}, false, Codec::kNone}),
        "def");
  Check(w->DefineSeries("ragged", SeriesOptions{DType::kFloat64, {}, true, Codec::kZstd}), "def");
  Check(w->DefineSeries("shapes", SeriesOptions{DType::kInt16, {}, true, Codec::kNone}), "def");
  const int64_t img_shape[] = {4, 3}, vec_shape[] = {8}, cube_shape[] = {2, 2, 2};
  for (int64_t step = 0; step < 6; ++step) {
    float img[12];
    for (int i = 0; i < 12; ++i) img[i] = static_cast<float>((i / 4) + step);
    Check(w->Append(1, "img", step, ValueRef::Array(img, img_shape)), "append");
    int64_t vec[8];
    for (int i = 0; i < 8; ++i) vec[i] = step * (i % 2);
    Check(w->Append(1, "vec", step, ValueRef::Array(vec, vec_shape)), "append");
    uint8_t cube[8];
    for (int i = 0; i < 8; ++i) cube[i] = static_cast<uint8_t>(step + i);
    Check(w->Append(2, "cube", step, ValueRef::Array(cube, cube_shape)), "append");
    std::vector<double> r(static_cast<size_t>(step + 1), 0.5 * static_cast<double>(step));
    const int64_t r_shape[] = {step + 1};
    Check(w->Append(2, "ragged", step, ValueRef::Array(r.data(), r_shape)), "append");
    std::vector<int16_t> m(static_cast<size_t>(step % 3 + 1) * 2, static_cast<int16_t>(step));
    const int64_t m_shape[] = {step % 3 + 1, 2};
    // Step 4 is a scalar, step 5 a shape with a zero dimension: no bytes.
    // The scalar's empty shape points at an array, and no series holds only
    // records without bytes: inputs the corpus has always had (fuzz/README.md).
    const int64_t empty_shape[] = {0, 2};
    Check(w->Append(3, "shapes", step,
                    step == 4   ? ValueRef::Array(m.data(), std::span<const int64_t>(m_shape, 0))
                    : step == 5 ? ValueRef::Array(m.data(), empty_shape)
                                : ValueRef::Array(m.data(), m_shape)),
          "append");
  }
  Check(w->Commit(), "commit");
  AddSegment(c, s.label(), s.Take("w2-00000001.rss"));
  Check(w->Close(), "close");
  const auto segs = s.TakeAll();
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
}

// String and mixed run ids, string and bytes values, under each codec.
void Strings(Corpora* c) {
  Scenario s("strings");
  WriterOptions o;
  o.codec = Codec::kZstd;
  auto w = s.NewWriter("w3", o);
  Check(w->DefineSeries("note", SeriesOptions{DType::kString, {}, false, Codec::kNone}), "def");
  Check(w->DefineSeries("blob", SeriesOptions{DType::kBytes, {}, false, Codec::kLz4}), "def");
  const std::string runs[] = {"alpha", "beta", "gamma-long-run-name"};
  for (int64_t step = 0; step < 4; ++step) {
    for (const std::string& run : runs) {
      const std::string text = run + " step " + std::to_string(step);
      Check(w->Append(run, "note", step, ValueRef::String(text)), "append");
      // Not empty at step 0, as the corpus has always had it (fuzz/README.md).
      const std::string bytes(static_cast<size_t>(step * 3 + (step == 0)), static_cast<char>(step));
      Check(w->Append(run, "blob", step, ValueRef::Bytes(bytes)), "append");
      Check(w->Append(run, "score", step, static_cast<double>(step)), "append");  // zstd
    }
    // Integer and string runs in one series: a mixed run column.
    Check(w->Append(step, "mixed", step, static_cast<float>(step)), "append");
    Check(w->Append("s" + std::to_string(step), "mixed", step, static_cast<float>(-step)),
          "append");
  }
  Check(w->Flush(), "flush");
  Check(w->Append("", "note", 9, ValueRef::String("")), "append");
  Check(w->Commit(), "commit");
  AddSegment(c, s.label(), s.Take("w3-00000001.rss"));
  Check(w->Close(), "close");
  const auto segs = s.TakeAll();
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
}

// Flushes, a resume marker, and keys written again by later commits
// (overlapping blocks resolved record by record).
void FlushResume(Corpora* c) {
  Scenario s("resume");
  auto w = s.NewWriter("w4");
  for (int64_t step = 0; step < 10; ++step) Check(w->Append(1, "x", step, step * 1.0), "append");
  Check(w->Flush(), "flush");
  for (int64_t step = 0; step < 10; ++step) Check(w->Append(2, "x", step, step * 2.0), "append");
  Check(w->Flush(), "flush");
  Check(w->Commit(), "commit");
  Check(w->Resume(1, 5), "resume");
  for (int64_t step = 5; step < 8; ++step) Check(w->Append(1, "x", step, step * -1.0), "append");
  Check(w->Append(2, "x", 3, 99.0), "append");  // written again: the later commit wins
  Check(w->Flush(), "flush");
  AddSegment(c, s.label(), s.Take("w4-00000001.rss"));
  Check(w->Commit(), "commit");
  Check(w->Close(), "close");
  const auto segs = s.TakeAll();
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
}

// Large values: blocks of their own, their data in 4 KiB value chunks when
// uncompressed and numeric; compressed and string ones without.
void Large(Corpora* c) {
  Scenario s("large");
  auto w = s.NewWriter("w5");
  Check(w->DefineSeries("zbig", SeriesOptions{DType::kFloat64, {1024}, false, Codec::kZstd}),
        "def");
  Check(w->DefineSeries("vbig", SeriesOptions{DType::kInt32, {}, true, Codec::kNone}), "def");
  std::vector<double> big(1024);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.25 * static_cast<double>(i);
  const int64_t big_shape[] = {1024};
  Check(w->Append(0, "big", 0, ValueRef::Array(big.data(), big_shape)), "append");
  std::vector<uint8_t> odd(5000);
  for (size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<uint8_t>(i * 7);
  const int64_t odd_shape[] = {5000};
  Check(w->Append(0, "odd", 0, ValueRef::Array(odd.data(), odd_shape)), "append");
  Check(w->Commit(), "commit");
  std::vector<double> flat(1024, 1.5);
  Check(w->Append(1, "zbig", 0, ValueRef::Array(flat.data(), big_shape)), "append");
  std::vector<int32_t> grid(40 * 40);
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<int32_t>(i);
  const int64_t grid_shape[] = {40, 40};
  Check(w->Append(1, "vbig", 0, ValueRef::Array(grid.data(), grid_shape)), "append");
  const std::string text(4500, 'q');
  Check(w->Append(1, "text", 0, ValueRef::String(text)), "append");
  Check(w->Append(1, "loss", 0, 0.5), "append");
  Check(w->Commit(), "commit");
  AddSegment(c, s.label(), s.Take("w5-00000001.rss"));
  Check(w->Close(), "close");
  const auto segs = s.TakeAll();
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
}

// Two writers in one store, both writing some of the same keys; the first
// restarts under its id and so writes a second segment.
void Multi(Corpora* c) {
  Scenario s("multi");
  auto a = s.NewWriter("a");
  auto b = s.NewWriter("b");
  for (int64_t step = 0; step < 6; ++step) {
    Check(a->Append(step % 2, "m", step, static_cast<double>(step)), "append");
    Check(b->Append(step % 3, "m", step, static_cast<double>(-step)), "append");
    if (step % 2 == 1) {
      Check(a->Commit(), "commit");
      Check(b->Commit(), "commit");
    }
  }
  Check(a->Close(), "close");
  a = s.NewWriter("a");  // continues with a-00000002.rss
  for (int64_t step = 4; step < 8; ++step) {
    Check(a->Append(1, "m", step, static_cast<double>(10 * step)), "append");
  }
  Check(a->Commit(), "commit");
  AddSegment(c, s.label(), s.Take("a-00000002.rss"));
  AddSegment(c, s.label(), s.Take("b-00000001.rss"));
  Check(a->Close(), "close");
  Check(b->Close(), "close");
  const auto segs = s.TakeAll();  // a-1, a-2, b-1
  for (const auto& seg : segs) AddSegment(c, s.label(), seg);
  AddStore(c, &s, segs);
  if (segs.size() == 3) {
    const std::string marker = s.Marker();
    c->Add("store", "multi-two-writers", StoreInput(2, 0, marker, segs[0].bytes, segs[2].bytes));
    c->Add("store", "multi-two-writers-fixed",
           StoreInput(3, 0, marker, segs[0].bytes, segs[2].bytes));
  }
}

// Markers of every version this build reads, a newer one, and some that
// are not markers at all.
void Markers(Corpora* c) {
  for (uint32_t v = 1; v <= format::kSegmentFormatVersion + 1; ++v) {
    c->Add("marker", "version" + std::to_string(v), format::EncodeStoreMarker(v));
  }
  c->Add("marker", "extra-lines", format::EncodeStoreMarker(3) + "created_by test\n\n");
  c->Add("marker", "no-newline", "runstore store\nformat_version 3");
  c->Add("marker", "crlf", "runstore store\r\nformat_version 3\r\n");
}

// The replaces target's input (replaces_fuzzer.cc): described segments of the
// shapes compaction leaves, each with its section encoded as a compaction
// writes it or generated by the harness: a complete group, one of two parts
// (a crash while publishing), two groups that overlap, a chain, and a section
// cut short.
void ReplacesSections(Corpora* c) {
  enum : uint8_t { kA = 0, kB = 1, kW = 2, kX = 3 };  // compact.a, compact.b, w, x
  const char* ids[] = {"compact.a", "compact.b", "w", "x"};
  auto plain = [](uint8_t writer, uint8_t seq, uint8_t created) {
    return std::string{static_cast<char>(writer), static_cast<char>(seq - 1),
                       static_cast<char>(created - 1)} +
           U16(0);
  };
  auto with = [](uint8_t writer, uint8_t seq, uint8_t created, const std::string& section) {
    return std::string{static_cast<char>(writer), static_cast<char>(seq - 1),
                       static_cast<char>(created - 1)} +
           U16(static_cast<uint16_t>(section.size())) + section;
  };
  auto section = [&](uint32_t parts, std::vector<std::tuple<uint8_t, uint8_t, uint8_t>> named) {
    format::Replaces r;
    r.part_count = parts;
    for (auto [w, q, t] : named) r.segments.push_back(format::SegmentId{ids[w], q, t});
    std::sort(r.segments.begin(), r.segments.end());
    return format::EncodeReplaces(r);
  };
  const std::string one = section(1, {{kW, 1, 1}, {kW, 2, 1}, {kX, 1, 1}});
  c->Add("replaces", "complete",
         plain(kW, 1, 1) + plain(kW, 2, 1) + plain(kX, 1, 1) + with(kA, 1, 1, one));
  const std::string two = section(2, {{kW, 1, 1}, {kX, 1, 1}});
  c->Add("replaces", "two-parts",
         plain(kW, 1, 1) + plain(kX, 1, 1) + with(kA, 1, 1, two) + with(kA, 2, 1, two));
  c->Add("replaces", "one-of-two-parts", plain(kW, 1, 1) + plain(kX, 1, 1) + with(kA, 1, 1, two));
  c->Add("replaces", "overlapping",
         plain(kW, 1, 1) + plain(kW, 2, 1) + with(kA, 1, 1, section(1, {{kW, 1, 1}, {kW, 2, 1}})) +
             with(kB, 1, 1, section(1, {{kW, 2, 1}})));
  c->Add("replaces", "chain",
         plain(kW, 1, 1) + with(kA, 1, 1, section(1, {{kW, 1, 1}})) +
             with(kB, 1, 2, section(1, {{kA, 1, 1}, {kW, 1, 1}})));
  c->Add("replaces", "reused-name", plain(kW, 1, 2) + with(kA, 1, 1, section(1, {{kW, 1, 1}})));
  c->Add("replaces", "cut", plain(kW, 1, 1) + with(kA, 1, 1, one.substr(0, one.size() - 3)));
  // Generated sections: `u16 0xffff, u8 part_count, u8 mask` of the described.
  c->Add("replaces", "generated",
         plain(kW, 1, 1) + plain(kW, 2, 1) + std::string{kA, 0, 0} + U16(0xffff) +
             std::string{1, 3} + std::string{kB, 0, 0} + U16(0xffff) + std::string{1, 2});
}

}  // namespace
}  // namespace runstore

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_corpus OUT_DIR\n");
    return 2;
  }
  runstore::Corpora c;
  runstore::Scalars(&c);
  runstore::Arrays(&c);
  runstore::Strings(&c);
  runstore::FlushResume(&c);
  runstore::Large(&c);
  runstore::Multi(&c);
  runstore::Markers(&c);
  runstore::ReplacesSections(&c);
  c.Write(argv[1]);
  return 0;
}
