// Golden stores (tests/golden/README.md): every build reads every format
// version ever written (docs/format.md "Versioning"), forever.
//
// tests/golden/v<N>/store was written by the library of the tag format-v<N>
// (scripts/make_golden.sh), and tests/golden/v<N>/expected.txt lists what it
// must show, computed by the program that wrote it from what it appended.
// For every version present, a copy of the store in a temporary directory
// (so that nothing can write into the source tree) is opened read-only and
// must show exactly the expected records, byte for byte, through Get,
// GetLazy and Scan; nothing else; the expected runs, series and segments;
// and no problem in VerifyAll. A store of an older version must also take a
// writer of this build and still show all of it afterwards. The versions
// present must be exactly 1..kFormatVersion, so that a new format version
// cannot land without its golden store. The same checks run on a store
// written now by this build's golden_writer ("this_build").
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

namespace fs = std::filesystem;

using ::runstore::testing::Contents;
using ::runstore::testing::KeyString;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::StatusIs;
using ::runstore::testing::TempDir;

// tests/golden, found from this file's own path.
fs::path GoldenRoot() { return fs::path(__FILE__).parent_path() / "golden"; }

// The N of every tests/golden/v<N> directory, ascending.
std::vector<uint32_t> GoldenVersions() {
  std::vector<uint32_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(GoldenRoot(), ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.size() < 2 || name[0] != 'v' ||
        name.find_first_not_of("0123456789", 1) != std::string::npos) {
      continue;
    }
    out.push_back(static_cast<uint32_t>(std::stoul(name.substr(1))));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------
// expected.txt (its format: tests/golden/README.md).

struct Expected {
  uint32_t format_version = 0;
  std::map<std::string, bool> segments;  // file (relative to the store) -> sealed
  Contents records;
  std::set<RecordKey> absent;
};

bool ParseRun(const std::string& s, RunId* run) {
  if (s.size() < 2 || s[1] != ':') return false;
  if (s[0] == 's') {
    *run = RunId(s.substr(2));
    return true;
  }
  if (s[0] != 'i') return false;
  try {
    size_t used = 0;
    *run = RunId(static_cast<int64_t>(std::stoll(s.substr(2), &used)));
    return used == s.size() - 2;
  } catch (...) {
    return false;
  }
}

bool ParseShape(const std::string& s, std::vector<int64_t>* shape) {
  if (s.size() < 2 || s.front() != '[' || s.back() != ']') return false;
  std::stringstream in(s.substr(1, s.size() - 2));
  std::string dim;
  while (std::getline(in, dim, ',')) {
    if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos) return false;
    shape->push_back(std::stoll(dim));
  }
  return true;
}

bool ParseHex(const std::string& s, std::string* bytes) {
  if (s == "-") return true;
  if (s.size() % 2 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 2) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + i, "%2x", &v) != 1) return false;
    bytes->push_back(static_cast<char>(v));
  }
  return true;
}

// Parses `file`, or returns an error naming the file and line.
Result<Expected> ParseExpected(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return Status::NotFound(file.string() + ": cannot open");
  Expected e;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string word; f >> word;) w.push_back(word);
    auto bad = [&](const std::string& why) {
      return Status::Corruption(file.string() + ":" + std::to_string(n) + ": " + why + ": " +
                                line.substr(0, 80));
    };
    RecordKey k;
    if (w[0] == "format_version" && w.size() == 2) {
      e.format_version = static_cast<uint32_t>(std::stoul(w[1]));
    } else if (w[0] == "segment" && w.size() == 3 && (w[2] == "sealed" || w[2] == "unsealed")) {
      e.segments[w[1]] = w[2] == "sealed";
    } else if (w[0] == "record" && w.size() == 7) {
      k.series = w[1];
      k.step = std::stoll(w[3]);
      RecordValue v;
      auto dtype = ParseDType(w[4]);
      if (!dtype.ok()) return bad("unknown dtype");
      v.dtype = *dtype;
      if (!ParseRun(w[2], &k.run) || !ParseShape(w[5], &v.shape) || !ParseHex(w[6], &v.bytes)) {
        return bad("malformed record");
      }
      if (!e.records.emplace(k, v).second) return bad("record listed twice");
    } else if (w[0] == "absent" && w.size() == 4) {
      k.series = w[1];
      k.step = std::stoll(w[3]);
      if (!ParseRun(w[2], &k.run)) return bad("malformed run");
      e.absent.insert(k);
    } else {
      return bad("unknown line");
    }
  }
  if (e.format_version == 0) return Status::Corruption(file.string() + ": no format_version");
  for (const RecordKey& k : e.absent) {
    if (e.records.count(k))
      return Status::Corruption(file.string() + ": " + KeyString(k) +
                                " is both a record and absent");
  }
  return e;
}

RecordValue ValueOf(const Value& v) {
  return RecordValue{v.dtype(), v.shape(), std::string(v.data(), v.nbytes())};
}

// "float64 [16], 128 bytes 0000000000804640..." for messages.
std::string Describe(const RecordValue& v) {
  std::string s = std::string(DTypeName(v.dtype)) + " [";
  for (size_t i = 0; i < v.shape.size(); ++i) s += (i ? "," : "") + std::to_string(v.shape[i]);
  s += "], " + std::to_string(v.bytes.size()) + " bytes ";
  char hex[3];
  for (size_t i = 0; i < std::min<size_t>(v.bytes.size(), 16); ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(v.bytes[i]));
    s += hex;
  }
  return v.bytes.size() > 16 ? s + "..." : s;
}

uint32_t ReadU32At(const fs::path& file, uint64_t offset) {
  std::ifstream in(file, std::ios::binary);
  unsigned char b[4] = {};
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(b), 4);
  return in ? uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24
            : 0;
}

std::string ReadAll(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every file under `dir`, by path relative to it, with its bytes.
std::map<std::string, std::string> Files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadAll(e.path());
  }
  return out;
}

// Every visible record of `series` through Scan with `options`; a key
// returned twice is an error.
Result<Contents> ScanSeries(const Snapshot& snap, const std::string& series,
                            const ScanOptions& options = {}) {
  RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap.Scan(series, options));
  Contents out;
  ScanBatch b;
  while (true) {
    RUNSTORE_ASSIGN_OR_RETURN(bool more, scanner->Next(&b));
    if (!more) break;
    for (size_t i = 0; i < b.count; ++i) {
      RecordKey k{series, b.run(i), b.steps[i]};
      if (!out.emplace(k, RecordValueAt(b, i)).second) {
        return Status::Corruption("scan of '" + series + "' returned " + KeyString(k) + " twice");
      }
    }
  }
  return out;
}

Contents OfSeries(const Contents& all, const std::string& series) {
  Contents out;
  for (const auto& [k, v] : all) {
    if (k.series == series) out.emplace(k, v);
  }
  return out;
}

std::string Diff(const Contents& expected, const Contents& actual) {
  std::string out;
  int shown = 0;
  auto note = [&](const std::string& s) {
    if (shown++ < 10) out += "\n  " + s;
  };
  for (const auto& [k, v] : expected) {
    auto it = actual.find(k);
    if (it == actual.end()) {
      note("missing " + KeyString(k));
    } else if (!(it->second == v)) {
      note("wrong value for " + KeyString(k) + ": " + Describe(it->second) + ", expected " +
           Describe(v));
    }
  }
  for (const auto& [k, v] : actual) {
    if (!expected.count(k)) note("unexpected " + KeyString(k));
  }
  if (shown > 10) out += "\n  ... " + std::to_string(shown - 10) + " more";
  return out;
}

// ---------------------------------------------------------------------------

TEST(GoldenVersionsTest, EveryFormatVersionHasAGoldenStore) {
  std::vector<uint32_t> want;
  for (uint32_t v = 1; v <= kFormatVersion; ++v) want.push_back(v);
  EXPECT_EQ(GoldenVersions(), want)
      << "tests/golden must hold v1..v" << kFormatVersion << " (found in " << GoldenRoot()
      << "); a new format version needs its golden store: tag the last commit that writes it "
         "format-vN and run scripts/make_golden.sh N";
}

// The parameter of the tests below that stands for no golden store but one
// written now by this build's golden_writer, so that the program and these
// checks are known to agree before anyone regenerates a golden store with it.
constexpr uint32_t kThisBuild = 0;

// The path of a program built beside this test binary.
std::string HelperPath(const char* name) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

class GoldenTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    version_ = GetParam();
    fs::path dir = GoldenRoot() / ("v" + std::to_string(version_));
    if (version_ == kThisBuild) {
      const std::string program = HelperPath("golden_writer");
      ASSERT_EQ(::access(program.c_str(), X_OK), 0)
          << program << " is missing: build the golden_writer target";
      dir = tmp_.path() + "/written";
      const std::string command = program + " " + dir.string() + " > /dev/null";
      ASSERT_EQ(std::system(command.c_str()), 0) << command;
      version_ = kFormatVersion;
    }
    source_ = dir / "store";
    ASSERT_TRUE(fs::is_directory(source_)) << source_ << " is missing";
    auto e = ParseExpected(dir / "expected.txt");
    ASSERT_OK(e);
    expected_ = std::move(e).value();
    ASSERT_EQ(expected_.format_version, version_) << "expected.txt of " << dir;
    ASSERT_FALSE(expected_.records.empty());
    // A copy: a read-only open must not write, but if it did, it would
    // write here and not into the source tree.
    store_path_ = tmp_.path() + "/store";
    fs::copy(source_, store_path_, fs::copy_options::recursive);
    original_ = Files(store_path_);
  }

  std::string Label() const {
    return GetParam() == kThisBuild ? "this build's golden_writer"
                                    : "golden v" + std::to_string(version_);
  }

  Result<std::unique_ptr<Store>> OpenReadOnly() {
    StoreOptions o;
    o.read_only = true;
    return Store::Open(store_path_, o);
  }

  // The series of the expected records, and of the keys that must be
  // absent: a series whose records are all hidden must still not scan any.
  std::set<std::string> AllSeries() const {
    std::set<std::string> s;
    for (const auto& [k, v] : expected_.records) s.insert(k.series);
    for (const RecordKey& k : expected_.absent) s.insert(k.series);
    return s;
  }

  // Every record through Get and GetLazy; NotFound for every absent key.
  void CheckGets(const Snapshot& snap, const Contents& records) {
    int wrong = 0;
    for (const auto& [k, want] : records) {
      auto got = snap.Get(k.run, k.series, k.step);
      if (!got.ok()) {
        ADD_FAILURE() << "Get " << KeyString(k) << ": " << got.status().ToString();
        ++wrong;
        continue;
      }
      if (!(ValueOf(*got) == want)) {
        ADD_FAILURE() << "Get " << KeyString(k) << " returned " << Describe(ValueOf(*got))
                      << " that differ from the expected " << Describe(want);
        ++wrong;
      }
      auto lazy = snap.GetLazy(k.run, k.series, k.step);
      if (!lazy.ok()) {
        ADD_FAILURE() << "GetLazy " << KeyString(k) << ": " << lazy.status().ToString();
        ++wrong;
        continue;
      }
      const Status checked = lazy->CheckAll();
      if (!checked.ok() || !lazy->all_checked() || !(ValueOf(lazy->value()) == want)) {
        ADD_FAILURE() << "GetLazy " << KeyString(k) << ": CheckAll " << checked.ToString()
                      << ", value " << Describe(ValueOf(lazy->value()));
        ++wrong;
      }
    }
    for (const RecordKey& k : expected_.absent) {
      EXPECT_THAT(snap.Get(k.run, k.series, k.step), StatusIs(StatusCode::kNotFound))
          << "Get " << KeyString(k) << " must find nothing (hidden or never committed)";
      EXPECT_THAT(snap.GetLazy(k.run, k.series, k.step), StatusIs(StatusCode::kNotFound))
          << "GetLazy " << KeyString(k);
    }
    EXPECT_EQ(wrong, 0);
  }

  // Scan of every series, whole and run by run, gives exactly `records`.
  void CheckScans(const Snapshot& snap, const Contents& records) {
    for (const std::string& series : AllSeries()) {
      const Contents want = OfSeries(records, series);
      auto got = ScanSeries(snap, series);
      if (want.empty() && got.status().code() == StatusCode::kNotFound) continue;
      ASSERT_OK(got);
      EXPECT_TRUE(*got == want) << "Scan of '" << series << "'" << Diff(want, *got);
      std::set<RunId> runs;
      for (const auto& [k, v] : want) runs.insert(k.run);
      for (const RunId& run : runs) {
        ScanOptions o;
        o.runs = std::vector<RunId>{run};
        Contents one;
        for (const auto& [k, v] : want) {
          if (k.run == run) one.emplace(k, v);
        }
        auto only = ScanSeries(snap, series, o);
        ASSERT_OK(only);
        EXPECT_TRUE(*only == one) << "Scan of '" << series << "' for run " << run.ToString()
                                  << Diff(one, *only);
      }
    }
  }

  void CheckListings(const Snapshot& snap, const Contents& records) {
    std::map<std::string, uint64_t> counts, counts_all;
    std::set<RunId> runs;
    for (const auto& [k, v] : records) {
      ++counts_all[k.series];
      if (k.series[0] == '~') continue;
      ++counts[k.series];
      runs.insert(k.run);
    }
    ASSERT_OK_AND_ASSIGN(auto listed, snap.ListSeries());
    std::map<std::string, uint64_t> got;
    for (const SeriesInfo& s : listed) got[s.name] = s.count;
    EXPECT_EQ(got, counts) << "ListSeries: names and visible counts";
    ASSERT_OK_AND_ASSIGN(auto listed_all, snap.ListSeries(/*include_reserved=*/true));
    got.clear();
    for (const SeriesInfo& s : listed_all) got[s.name] = s.count;
    EXPECT_EQ(got, counts_all) << "ListSeries(include_reserved): names and visible counts";
    ASSERT_OK_AND_ASSIGN(auto listed_runs, snap.ListRuns());
    EXPECT_EQ(listed_runs, std::vector<RunId>(runs.begin(), runs.end())) << "ListRuns";
  }

  uint32_t version_ = 0;
  fs::path source_;
  Expected expected_;
  TempDir tmp_;
  std::string store_path_;
  std::map<std::string, std::string> original_;
};

TEST_P(GoldenTest, StoreAndSegmentsAreOfTheirVersion) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  EXPECT_EQ(store->format_version(), version_);
  std::map<std::string, bool> segments;
  for (const SegmentInfo& s : store->GetSnapshot()->ListSegments()) {
    segments[s.file] = s.sealed;
    EXPECT_GT(s.commits, 0u) << s.file;
    // Bytes 8..11 of the segment header, and of a sealed file's trailer:
    // written by the tagged version, not by this build.
    const fs::path file = fs::path(store_path_) / s.file;
    EXPECT_EQ(ReadU32At(file, 8), version_) << s.file << ": segment header format_version";
    if (s.sealed) {
      EXPECT_EQ(ReadU32At(file, fs::file_size(file) - 32 + 8), version_)
          << s.file << ": trailer format_version";
    }
  }
  EXPECT_EQ(segments, expected_.segments) << "ListSegments: files and which are sealed";
  std::printf("[ figures  ] %s: %zu segments, %zu records, %zu absent keys, %zu bytes\n",
              Label().c_str(), segments.size(), expected_.records.size(), expected_.absent.size(),
              [&] {
                size_t n = 0;
                for (const auto& [name, bytes] : original_) n += bytes.size();
                return n;
              }());
}

TEST_P(GoldenTest, EveryRecordReadsBackByteForByteThroughGetAndGetLazy) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  CheckGets(*store->GetSnapshot(), expected_.records);
}

TEST_P(GoldenTest, ScansShowExactlyTheExpectedRecords) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  CheckScans(*store->GetSnapshot(), expected_.records);
}

TEST_P(GoldenTest, SeriesAndRunsAreListed) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  CheckListings(*store->GetSnapshot(), expected_.records);
}

TEST_P(GoldenTest, VerifyAllFindsNoProblem) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  const VerifyReport r = store->GetSnapshot()->VerifyAll();
  for (const Status& p : r.problems) ADD_FAILURE() << p.ToString();
  EXPECT_EQ(r.segments, expected_.segments.size());
  EXPECT_GT(r.blocks_checked, 0u);
  std::printf("[ figures  ] %s: VerifyAll checked %llu blocks, %llu bytes\n", Label().c_str(),
              static_cast<unsigned long long>(r.blocks_checked),
              static_cast<unsigned long long>(r.bytes_checked));
}

TEST_P(GoldenTest, ReadingChangesNoByte) {
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
    auto snap = store->GetSnapshot();
    CheckGets(*snap, expected_.records);
    (void)snap->VerifyAll();
  }
  EXPECT_TRUE(Files(store_path_) == original_) << "a read-only open changed the store";
}

// A store written by an older version takes a writer of this build: the
// marker keeps its version, the new segment is of this build's, and every
// old record is still there beside the new ones.
TEST_P(GoldenTest, AWriterOfThisBuildAppendsToTheStore) {
  Contents want = expected_.records;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
    ASSERT_OK_AND_ASSIGN(auto w,
                         store->NewWriter({.writer_id = "current", .large_value_bytes = 4096}));
    const double x = 0.5;
    ASSERT_OK(w->Append(900, "loss", 0, x));
    std::vector<double> big(1100);  // a large value of its own, in value chunks
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) - 1.5;
    const int64_t shape[] = {1100};
    ASSERT_OK(w->Append(900, "big", 0, ValueRef::Array(big.data(), shape)));
    // A later commit than every golden one: it replaces (0, 'loss', 0).
    ASSERT_OK(w->Append(0, "loss", 0, x));
    ASSERT_OK(w->Close());
    const std::string xs(reinterpret_cast<const char*>(&x), sizeof x);
    want[RecordKey{"loss", RunId(900), 0}] = RecordValue{DType::kFloat64, {}, xs};
    want[RecordKey{"loss", RunId(0), 0}] = RecordValue{DType::kFloat64, {}, xs};
    want[RecordKey{"big", RunId(900), 0}] = RecordValue{
        DType::kFloat64, {1100}, std::string(reinterpret_cast<const char*>(big.data()), 8800)};
  }
  ASSERT_OK_AND_ASSIGN(auto store, OpenReadOnly());
  EXPECT_EQ(store->format_version(), version_) << "the marker keeps the store's version";
  EXPECT_EQ(ReadU32At(fs::path(store_path_) / "segments/current-00000001.rss", 8), kFormatVersion);
  auto snap = store->GetSnapshot();
  CheckGets(*snap, want);
  CheckScans(*snap, want);
  const VerifyReport r = snap->VerifyAll();
  for (const Status& p : r.problems) ADD_FAILURE() << p.ToString();
}

INSTANTIATE_TEST_SUITE_P(Versions, GoldenTest, ::testing::ValuesIn(GoldenVersions()),
                         [](const auto& info) { return "v" + std::to_string(info.param); });
INSTANTIATE_TEST_SUITE_P(GoldenWriter, GoldenTest, ::testing::Values(kThisBuild),
                         [](const auto&) { return std::string("this_build"); });

}  // namespace
}  // namespace runstore
