// Corruption sweep (docs/design.md#invariant-3; STYLE.md "Tests that try to break
// it"): every byte of a small sealed segment and of a small unsealed one is
// damaged in turn (XOR 0xFF, and a one-bit flip), and each segment is cut at
// every length. After each change the store is opened read-only and read in
// full: ListSeries, Scan of every series, Get of every key, Verify.
//
// Each case must read data identical to the original, or report Corruption
// naming the damaged file and an offset; never a crash, a hang, a wrong
// value or another error code. Two outcomes are allowed besides, because the
// bytes are exactly what a crash leaves (docs/format.md "Recovery"):
//  - damage inside the last commit of an UNSEALED segment (its blocks or its
//    record) may drop that commit: it is indistinguishable from a torn write
//    of the one commit that can be in flight. The unsealed segment's first
//    commit is a Writer::Flush: damage there is still corruption, because
//    the last commit's record says everything before it had been synced;
//  - a cut file reads as exactly the commits whose frames, up to the end of
//    the padded commit record, lie wholly inside the cut (a sealed segment
//    loses its trailer and is recovered like an unsealed one); a file cut
//    inside its 128-byte header holds no commit.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "format/format.h"
#include "format/segment_reader.h"
#include "runstore/env.h"
#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kStorePath[] = "/store";
constexpr char kSealedFile[] = "segments/s-00000001.rss";
constexpr char kUnsealedFile[] = "segments/u-00000001.rss";
// A case that takes longer than the watchdog's limit aborts the test with its
// name: a hang, never a speed (the slowest case is printed, not judged).
constexpr int kWatchdogSeconds = 120;

// Every byte by default. $RUNSTORE_SWEEP_STRIDE=k damages and cuts every k-th
// byte only, from an offset the seed picks, so that a sanitizer build (ten
// times slower) replays a different eighth, say, of the sweep each run while
// the release build sweeps every byte.
struct Stride {
  uint64_t every = 1, offset = 0;
  static const Stride& Get() {
    static const Stride s = [] {
      Stride r;
      if (const char* e = std::getenv("RUNSTORE_SWEEP_STRIDE")) r.every = std::max(1, std::atoi(e));
      if (r.every > 1) {
        const uint64_t seed = testing::TestSeed();
        r.offset = seed % r.every;
        std::printf("[ stride   ] every %llu-th byte from offset %llu (RUNSTORE_SEED=%llu)\n",
                    static_cast<unsigned long long>(r.every),
                    static_cast<unsigned long long>(r.offset),
                    static_cast<unsigned long long>(seed));
      }
      return r;
    }();
    return s;
  }
  // The first position >= `from` on the stride.
  uint64_t First(uint64_t from) const { return from + (offset + every - from % every) % every; }
};

using ::runstore::testing::Contents;
using ::runstore::testing::KeyString;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::RecordValueAt;

// What went wrong in one case. A sweep reports the first few failing cases
// in full and counts the rest by kind, so that one bug does not hide another.
using ::runstore::testing::FailureSummary;
using ::runstore::testing::Problems;

// The records of one writer, commit by commit. Every key is written once.
struct WriterScript {
  std::string id;
  std::vector<Contents> commits;
};

Contents Union(const WriterScript& a, size_t na, const WriterScript& b, size_t nb) {
  Contents c;
  for (size_t i = 0; i < na; ++i) c.insert(a.commits[i].begin(), a.commits[i].end());
  for (size_t i = 0; i < nb; ++i) c.insert(b.commits[i].begin(), b.commits[i].end());
  return c;
}

// Appends the records of one commit (recording them) and commits.
class ScriptWriter {
 public:
  ScriptWriter(Writer* w, WriterScript* script) : w_(w), script_(script) {}

  // A scalar by value: ValueRef::Scalar borrows, so the caller's temporary
  // is held here for the call.
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Put(RunRef run, std::string_view series, int64_t step, T scalar) {
    Put(run, series, step, ValueRef::Scalar(scalar));
  }
  void Put(RunRef run, std::string_view series, int64_t step, const ValueRef& v) {
    current_.emplace(RecordKey{std::string(series), run.ToRunId(), step},
                     RecordValue{v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()),
                                 std::string(static_cast<const char*>(v.data), v.nbytes)});
    ASSERT_OK(w_->Append(run, series, step, v));
  }
  void Commit(bool flush = false) {
    ASSERT_OK(flush ? w_->Flush() : w_->Commit());
    script_->commits.push_back(std::move(current_));
    current_.clear();
  }

 private:
  Writer* w_;
  WriterScript* script_;
  Contents current_;
};

// Three commits over six series: float64 and int32 scalars (int runs), a
// zstd float32[16] series, a variable-shape int16 series, a large float64
// array, and strings under string runs; with `flush_first`, the first is a Flush. `base` keeps the
// two writers' runs apart.
void WriteCommits(Writer* w, WriterScript* script, int base, const std::string& prefix,
                  bool flush_first) {
  ASSERT_OK(w->DefineSeries("zs", SeriesOptions{DType::kFloat32, {16}, false, Codec::kZstd}));
  ASSERT_OK(w->DefineSeries("var", SeriesOptions{DType::kInt16, {}, true, Codec::kNone}));
  ScriptWriter sw(w, script);
  for (int run = base + 1; run <= base + 2; ++run) {
    for (int step = 0; step < 3; ++step) sw.Put(run, "f64", step, run + step * 0.25);
  }
  for (int step = 0; step < 3; ++step) sw.Put(base + 1, "i32", step, int32_t{base * 10 + step});
  for (int step = 0; step < 2; ++step) {
    const std::string text = prefix + " status " + std::to_string(step);
    sw.Put(prefix + "-a", "txt", step, ValueRef::String(text));
  }
  sw.Commit(flush_first);

  const int64_t vec16[] = {16};
  for (int step = 0; step < 4; ++step) {
    float z[16];
    for (int i = 0; i < 16; ++i) z[i] = static_cast<float>((i / 8) * step);  // compressible
    sw.Put(base + 1, "zs", step, ValueRef::Array(z, vec16));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<int16_t> v(static_cast<size_t>(step + 1) * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(base + step * 10 + i);
    const int64_t shape[] = {step + 1, 2};
    sw.Put(base + 2, "var", step, ValueRef::Array(v.data(), shape));
  }
  // A large value (the writers' large_value_bytes is 4096): a block of its
  // own, its data checksummed in chunks (docs/format.md "Value chunks").
  std::vector<double> big(513);
  for (size_t i = 0; i < big.size(); ++i) big[i] = base + 0.5 * static_cast<double>(i);
  const int64_t big_shape[] = {513};
  sw.Put(base + 2, "big", 0, ValueRef::Array(big.data(), big_shape));
  sw.Commit();

  for (int step = 0; step < 3; ++step) sw.Put(base + 3, "f64", step, -1.0 * step);
  sw.Put(prefix + "-b", "txt", 0, ValueRef::String(prefix + " done"));
  sw.Commit();
}

// ---------------------------------------------------------------------------
// Reading a case.

struct Observation {
  std::vector<Status> errors;          // every failure other than an expected NotFound
  Contents scanned;                    // records returned by Scan
  Contents got;                        // records returned by Get
  bool scan_complete = false;          // every scan ran to its end
  std::vector<std::string> anomalies;  // disagreements that are failures by themselves
};

void ReadSnapshot(const Snapshot& snap_ref, const std::set<std::string>& series,
                  const std::set<RecordKey>& universe, Observation* out) {
  Observation& o = *out;
  const Snapshot* snap = &snap_ref;
  // Lazy reads first, while no block is verified yet: a value whose chunks
  // all check must be the value Get returns below.
  Contents lazy;
  for (const RecordKey& k : universe) {
    auto v = snap->GetLazy(k.run, k.series, k.step);
    Status s = v.ok() ? v->CheckAll() : v.status();
    if (s.ok()) {
      const Value& x = v->value();
      lazy.emplace(k, RecordValue{x.dtype(), x.shape(), std::string(x.data(), x.nbytes())});
    } else if (s.code() != StatusCode::kNotFound) {
      o.errors.push_back(s);
    }
  }
  auto listed = snap->ListSeries();
  if (!listed.ok()) o.errors.push_back(listed.status());
  o.scan_complete = true;
  for (const std::string& name : series) {
    auto scanner = snap->Scan(name);
    if (!scanner.ok()) {
      if (scanner.status().code() != StatusCode::kNotFound) {
        o.errors.push_back(scanner.status());
        o.scan_complete = false;
      }
      continue;
    }
    ScanBatch b;
    while (true) {
      auto more = (*scanner)->Next(&b);
      if (!more.ok()) {
        o.errors.push_back(more.status());
        o.scan_complete = false;
        break;
      }
      if (!*more) break;
      for (size_t i = 0; i < b.count; ++i) {
        RecordKey k{name, b.run(i), b.steps[i]};
        if (!o.scanned.emplace(k, RecordValueAt(b, i)).second) {
          o.anomalies.push_back("Scan returned " + KeyString(k) + " twice");
        }
      }
    }
  }
  if (listed.ok() && o.scan_complete) {
    std::map<std::string, uint64_t> counts;
    for (const auto& [k, v] : o.scanned) ++counts[k.series];
    std::map<std::string, uint64_t> got;
    for (const SeriesInfo& info : *listed) got[info.name] = info.count;
    if (got != counts) o.anomalies.push_back("ListSeries counts differ from the records scanned");
  }
  for (const RecordKey& k : universe) {
    auto v = snap->Get(k.run, k.series, k.step);
    if (v.ok()) {
      o.got.emplace(k, RecordValue{v->dtype(), v->shape(), std::string(v->data(), v->nbytes())});
    } else if (v.status().code() != StatusCode::kNotFound) {
      o.errors.push_back(v.status());
    }
  }
  for (const auto& [k, v] : lazy) {
    auto it = o.got.find(k);
    if (it != o.got.end() && !(it->second == v)) {
      o.anomalies.push_back("GetLazy and Get differ for " + KeyString(k));
    }
  }
  uint64_t blocks = 0;
  Status verified = snap->Verify(&blocks);
  if (!verified.ok()) o.errors.push_back(verified);
}

// Opens the store read-only and reads everything.
Observation ReadEverything(Env* env, const std::set<std::string>& series,
                           const std::set<RecordKey>& universe) {
  Observation o;
  StoreOptions ro;
  ro.env = env;
  ro.read_only = true;
  auto store = Store::Open(kStorePath, ro);
  if (!store.ok()) {
    o.errors.push_back(store.status());
    return o;
  }
  ReadSnapshot(*(*store)->GetSnapshot(), series, universe, &o);
  return o;
}

// ---------------------------------------------------------------------------

enum class Outcome { kIdentical, kCorruption, kLastCommitDropped, kPrefix, kFailed };

struct SegmentFacts {
  std::string file;      // relative to the store
  std::string original;  // its bytes
  bool sealed = false;
  std::vector<uint64_t> commit_end;  // end of each commit (past its record)
};

struct Tally {
  uint64_t cases = 0;
  std::map<Outcome, uint64_t> by_outcome;
  double slowest = 0;
  std::string slowest_case;
};

class Watchdog {
 public:
  Watchdog() : thread_([this] { Run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Start(const std::string& name) {
    std::lock_guard lk(mu_);
    name_ = name;
    started_ = Clock::now();
  }

 private:
  void Run() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::seconds(1));
      if (!name_.empty() && Clock::now() - started_ > std::chrono::seconds(kWatchdogSeconds)) {
        std::fprintf(stderr, "HANG: case '%s' has run for over %d s\n", name_.c_str(),
                     kWatchdogSeconds);
        std::abort();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string name_;
  Clock::time_point started_;
  std::thread thread_;
};

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = NewMemEnv();
    StoreOptions o;
    o.env = env_.get();
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(kStorePath, o));
    WriterOptions wo;
    wo.buffer_bytes = 1 << 20;
    wo.block_bytes = 4096;
    wo.large_value_bytes = 4096;
    wo.writer_id = "s";
    sealed_.id = "s";
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
      WriteCommits(w.get(), &sealed_, 0, "s", /*flush_first=*/false);
      ASSERT_OK(w->Close());
    }
    wo.writer_id = "u";
    unsealed_.id = "u";
    std::string open_bytes;
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
      WriteCommits(w.get(), &unsealed_, 100, "u", /*flush_first=*/true);
      if (HasFatalFailure()) return;
      // The file as a kill -9 right now would leave it.
      ASSERT_OK_AND_ASSIGN(open_bytes, ReadFileToString(env_.get(), Path(kUnsealedFile)));
      ASSERT_OK(w->Close());
    }
    ASSERT_OK(Put(kUnsealedFile, open_bytes));
    for (const WriterScript* s : {&sealed_, &unsealed_}) {
      for (const Contents& c : s->commits) {
        for (const auto& [k, v] : c) {
          series_.insert(k.series);
          universe_.insert(k);
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(Facts(kSealedFile, &sealed_facts_));
    ASSERT_NO_FATAL_FAILURE(Facts(kUnsealedFile, &unsealed_facts_));
    ASSERT_TRUE(sealed_facts_.sealed);
    ASSERT_FALSE(unsealed_facts_.sealed);
    ASSERT_EQ(sealed_facts_.commit_end.size(), 3u);
    ASSERT_EQ(unsealed_facts_.commit_end.size(), 3u);
    // The undamaged store reads back exactly what was written.
    Observation seen = ReadEverything(env_.get(), series_, universe_);
    for (const Status& s : seen.errors) ADD_FAILURE() << "undamaged store: " << s.ToString();
    ASSERT_TRUE(seen.errors.empty());
    ASSERT_TRUE(seen.scanned == Union(sealed_, 3, unsealed_, 3));
    ASSERT_TRUE(seen.got == seen.scanned);
  }

  static std::string Path(const std::string& rel) { return std::string(kStorePath) + "/" + rel; }

  Status Put(const std::string& rel, std::string_view bytes) {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, env_->NewWritableFile(Path(rel), /*exclusive=*/false));
    RUNSTORE_RETURN_IF_ERROR(f->Append(bytes));
    return f->Close();
  }

  void Facts(const std::string& rel, SegmentFacts* f) {
    f->file = rel;
    ASSERT_OK_AND_ASSIGN(f->original, ReadFileToString(env_.get(), Path(rel)));
    ASSERT_OK_AND_ASSIGN(auto file, env_->NewRandomAccessFile(Path(rel)));
    format::SegmentIndex index;
    ASSERT_OK(format::LoadSegmentIndex(*file, rel, &index));
    f->sealed = index.sealed;
    for (const auto& c : index.commits) f->commit_end.push_back(c.end_offset);
    bool zstd = false;
    for (const auto& b : index.blocks) zstd |= b.header.codec == Codec::kZstd;
    EXPECT_TRUE(zstd) << rel << " should hold a zstd block";
  }

  // Commits of `f` that a file cut at `len` still holds in full: those whose
  // commit record frame (72 bytes, padded to 128) ends inside the cut. A
  // record without its padding is what a torn write of the commit in flight
  // leaves, never an acknowledged commit (the sync follows the whole frame).
  static size_t CommitsInside(const SegmentFacts& f, uint64_t len) {
    size_t n = 0;
    for (uint64_t end : f.commit_end) n += end <= len;
    return n;
  }

  // The commit of `f` that byte `at` belongs to (commit_end.size() for the
  // footer and trailer).
  static size_t CommitOf(const SegmentFacts& f, uint64_t at) {
    for (size_t i = 0; i < f.commit_end.size(); ++i) {
      if (at < f.commit_end[i]) return i;
    }
    return f.commit_end.size();
  }

  // The contents with `n` commits of the segment `f` and all of the other.
  Contents With(const SegmentFacts& f, size_t n) const {
    return &f == &sealed_facts_ ? Union(sealed_, n, unsealed_, 3) : Union(sealed_, 3, unsealed_, n);
  }

  // Runs one case: `bytes` replace the segment's file; `allowed` lists the
  // data outcomes acceptable besides Corruption.
  // With `refresh_from` set, a reader first opens the store while the file
  // holds only its first `refresh_from` bytes (its first commit), then the
  // file takes the case's bytes and the reader refreshes: the path of a
  // reader that follows a writer which crashed or sealed meanwhile.
  void RunCase(const SegmentFacts& f, const std::string& name, std::string_view bytes,
               const std::vector<std::pair<Outcome, size_t>>& allowed, Tally* tally,
               FailureSummary* failures, uint64_t refresh_from = 0) {
    Problems p;
    watchdog_.Start(name);
    const auto start = Clock::now();
    Observation o;
    if (refresh_from == 0) {
      ASSERT_OK(Put(f.file, bytes));
      o = ReadEverything(env_.get(), series_, universe_);
    } else {
      ASSERT_OK(Put(f.file, std::string_view(f.original).substr(0, refresh_from)));
      StoreOptions ro;
      ro.env = env_.get();
      ro.read_only = true;
      ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(kStorePath, ro));
      Observation before;
      ReadSnapshot(*reader->GetSnapshot(), series_, universe_, &before);
      p.Check(before.errors.empty() && before.scanned == With(f, 1),
              "before the refresh the reader should see exactly the first commit");
      ASSERT_OK(Put(f.file, bytes));
      auto snap = reader->Refresh();
      if (!snap.ok()) {
        o.errors.push_back(snap.status());
      } else {
        ReadSnapshot(**snap, series_, universe_, &o);
      }
    }
    ASSERT_OK(Put(f.file, f.original));
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    ++tally->cases;
    if (secs > tally->slowest) {
      tally->slowest = secs;
      tally->slowest_case = name;
    }
    for (const std::string& a : o.anomalies) p.Check(false, a);
    const Contents full = With(f, f.commit_end.size());
    // Whatever was read must be right, whatever else happened.
    for (const Contents* read : {&o.scanned, &o.got}) {
      for (const auto& [k, v] : *read) {
        auto it = full.find(k);
        if (it == full.end()) {
          p.Check(false, "read a record that was never written: " + KeyString(k));
        } else if (!(it->second == v)) {
          p.Check(false, "WRONG VALUE for " + KeyString(k));
        }
      }
    }
    if (!o.errors.empty()) {
      const std::string base = f.file.substr(f.file.find('/') + 1);
      for (const Status& s : o.errors) {
        p.Check(s.code() == StatusCode::kCorruption &&
                    s.message().find(base) != std::string::npos &&
                    s.message().find("offset") != std::string::npos,
                "expected Corruption naming " + base + " and an offset, got " + s.ToString());
      }
      ++tally->by_outcome[p.empty() ? Outcome::kCorruption : Outcome::kFailed];
      failures->Add(name, p);
      return;
    }
    p.Check(o.got == o.scanned, "Get and Scan disagree");
    for (const auto& [outcome, commits] : allowed) {
      if (o.scanned == With(f, commits)) {
        ++tally->by_outcome[p.empty() ? outcome : Outcome::kFailed];
        failures->Add(name, p);
        return;
      }
    }
    std::string what = "neither Corruption nor an allowed outcome:";
    for (const auto& [outcome, commits] : allowed) {
      const Contents want = With(f, commits);
      size_t missing = 0, extra = 0;
      for (const auto& [k, v] : want) missing += !o.scanned.count(k);
      for (const auto& [k, v] : o.scanned) extra += !want.count(k);
      what += " vs " + std::to_string(commits) + " commits of " + f.file + ": " +
              std::to_string(missing) + " records missing, " + std::to_string(extra) + " extra;";
    }
    p.Check(false, what);
    ++tally->by_outcome[Outcome::kFailed];
    failures->Add(name, p);
  }

  // Damages every byte (from `first` on) and cuts at every length (from
  // `first` on). With `refresh`, every case goes through a reader that saw
  // the first commit before (RunCase); `first` is then the end of that commit.
  void Sweep(const SegmentFacts& f, bool bit_flips, bool refresh = false) {
    const size_t n = f.commit_end.size();
    const uint64_t size = f.original.size();
    const uint64_t first = refresh ? f.commit_end[0] : 0;
    const uint64_t refresh_from = refresh ? f.commit_end[0] : 0;
    const std::string title = f.file + (refresh ? " (refreshing reader)" : "");
    Tally flips, bits, cuts;
    FailureSummary failures(5);
    const auto start = Clock::now();
    const Stride& stride = Stride::Get();
    for (uint64_t at = stride.First(first); at < size; at += stride.every) {
      std::vector<std::pair<Outcome, size_t>> allowed{{Outcome::kIdentical, n}};
      if (!f.sealed && CommitOf(f, at) == n - 1)
        allowed.push_back({Outcome::kLastCommitDropped, n - 1});
      std::string bytes = f.original;
      bytes[at] = static_cast<char>(bytes[at] ^ 0xFF);
      RunCase(f, title + ": byte " + std::to_string(at) + " ^ 0xFF", bytes, allowed, &flips,
              &failures, refresh_from);
      if (bit_flips) {
        bytes = f.original;
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (at % 8)));
        RunCase(f, title + ": byte " + std::to_string(at) + " bit " + std::to_string(at % 8), bytes,
                allowed, &bits, &failures, refresh_from);
      }
      if (HasFatalFailure()) return;
    }
    for (uint64_t len = stride.First(first); len <= size; len += stride.every) {
      const size_t inside = len == size ? n : CommitsInside(f, len);
      const Outcome o = inside == n       ? Outcome::kIdentical
                        : inside == n - 1 ? Outcome::kLastCommitDropped
                                          : Outcome::kPrefix;
      RunCase(f, title + ": cut at " + std::to_string(len),
              std::string_view(f.original).substr(0, len), {{o, inside}}, &cuts, &failures,
              refresh_from);
      if (HasFatalFailure()) return;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    auto print = [&](const char* what, const Tally& t) {
      if (t.cases == 0) return;
      auto get = [&](Outcome o) {
        auto it = t.by_outcome.find(o);
        return static_cast<unsigned long long>(it == t.by_outcome.end() ? 0 : it->second);
      };
      std::printf(
          "[ figures  ] %s (%s, %llu bytes, %zu commits) %s: %llu cases: identical=%llu, "
          "corruption reported=%llu, last commit dropped=%llu, prefix of commits=%llu, "
          "FAILED=%llu; slowest %.2f ms (%s)\n",
          title.c_str(), f.sealed ? "sealed" : "unsealed", static_cast<unsigned long long>(size), n,
          what, static_cast<unsigned long long>(t.cases), get(Outcome::kIdentical),
          get(Outcome::kCorruption), get(Outcome::kLastCommitDropped), get(Outcome::kPrefix),
          get(Outcome::kFailed), t.slowest * 1e3, t.slowest_case.c_str());
    };
    print("byte ^ 0xFF", flips);
    print("one-bit flip", bits);
    print("cut", cuts);
    std::string ends;
    for (uint64_t e : f.commit_end) ends += " " + std::to_string(e);
    std::printf("[ figures  ] %s: commits end at%s; sweep took %.2f s\n", title.c_str(),
                ends.c_str(), secs);
    failures.Print(title);
    EXPECT_EQ(failures.failing(), 0u) << "failing cases in " << title;
  }

  // Two damages in a sealed segment: one fixed byte `first_at` (in the footer
  // or the trailer) and every other byte in turn. A sealed segment holds only
  // synced, acknowledged commits, so each case must read identical data or
  // report Corruption: never drop a commit as if it were a torn tail.
  void DoubleDamageSweep(uint64_t first_at, const std::string& what, bool refresh) {
    const SegmentFacts& f = sealed_facts_;
    const size_t n = f.commit_end.size();
    const uint64_t from = refresh ? f.commit_end[0] : 0;
    const std::string title =
        f.file + " with " + what + " damaged" + (refresh ? " (refreshing reader)" : "");
    Tally tally;
    FailureSummary failures(3);
    std::string base = f.original;
    base[first_at] = static_cast<char>(base[first_at] ^ 0xFF);
    const Stride& stride = Stride::Get();
    for (uint64_t at = stride.First(from); at < base.size(); at += stride.every) {
      if (at == first_at) continue;
      std::string bytes = base;
      bytes[at] = static_cast<char>(bytes[at] ^ 0xFF);
      RunCase(f, title + ", and byte " + std::to_string(at) + " ^ 0xFF", bytes,
              {{Outcome::kIdentical, n}}, &tally, &failures, refresh ? f.commit_end[0] : 0);
      if (HasFatalFailure()) return;
    }
    auto get = [&](Outcome o) {
      auto it = tally.by_outcome.find(o);
      return static_cast<unsigned long long>(it == tally.by_outcome.end() ? 0 : it->second);
    };
    std::printf(
        "[ figures  ] %s: %llu cases: identical=%llu, corruption reported=%llu, FAILED=%llu\n",
        title.c_str(), static_cast<unsigned long long>(tally.cases), get(Outcome::kIdentical),
        get(Outcome::kCorruption), get(Outcome::kFailed));
    failures.Print(title);
    EXPECT_EQ(failures.failing(), 0u) << "failing cases in " << title;
  }

  std::unique_ptr<Env> env_;
  WriterScript sealed_, unsealed_;
  SegmentFacts sealed_facts_, unsealed_facts_;
  std::set<std::string> series_;
  std::set<RecordKey> universe_;
  Watchdog watchdog_;
};

// The footer's header (its checksum field) is damaged: recovery must then
// reach the footer (a valid trailer proves every commit before it was
// synced), through a fresh open and through a reader's refresh alike.
TEST_F(CorruptionTest, SealedSegmentWithADamagedFooterNeverDropsACommitSilently) {
  DoubleDamageSweep(sealed_facts_.commit_end.back() + 16, "its footer", /*refresh=*/false);
}

TEST_F(CorruptionTest, RefreshOfASealedSegmentWithADamagedFooterNeverDropsACommitSilently) {
  DoubleDamageSweep(sealed_facts_.commit_end.back() + 16, "its footer", /*refresh=*/true);
}

// The trailer is damaged, so the segment no longer proves it was sealed by
// its last 32 bytes; but its footer frame, intact after the last commit, is
// written only after every commit before it was synced: damage before it is
// corruption as well, not a torn tail.
TEST_F(CorruptionTest, SealedSegmentWithADamagedTrailerNeverDropsACommitSilently) {
  DoubleDamageSweep(sealed_facts_.original.size() - 1, "its trailer", /*refresh=*/false);
}

TEST_F(CorruptionTest, EveryDamagedByteOrCutOfASealedSegmentReadsIdenticalOrReportsCorruption) {
  Sweep(sealed_facts_, /*bit_flips=*/true);
}

TEST_F(CorruptionTest,
       ReaderThatRefreshesPastDamageInASealedSegmentReadsIdenticalOrReportsCorruption) {
  Sweep(sealed_facts_, /*bit_flips=*/false, /*refresh=*/true);
}

TEST_F(
    CorruptionTest,
    ReaderThatRefreshesPastDamageInAnUnsealedSegmentReadsIdenticalDropsTheLastCommitOrReportsCorruption) {
  Sweep(unsealed_facts_, /*bit_flips=*/false, /*refresh=*/true);
}

TEST_F(
    CorruptionTest,
    EveryDamagedByteOrCutOfAnUnsealedSegmentReadsIdenticalDropsTheLastCommitOrReportsCorruption) {
  Sweep(unsealed_facts_, /*bit_flips=*/true);
}

}  // namespace
}  // namespace runstore
