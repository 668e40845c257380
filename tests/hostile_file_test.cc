// Hostile files (docs/reliability.md): segments crafted to lie, with every
// checksum right, must never crash a reader, hang it, or make it allocate
// more than the file's bytes can hold; each is reported as Corruption naming
// the file, at open or at the read that meets it, and verify reports
// everything reading would refuse.
//
// Each crafted store is read twice: here, and in a child process whose
// address space is limited (setrlimit RLIMIT_AS) to what it had before plus
// the file's size plus a fixed margin, where an allocation sized by a lying
// header would fail. The child must end normally, having seen Corruption
// and nothing but Corruption, NotFound or OK.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "format/block.h"
#include "format/format.h"
#include "runstore/store.h"
#include "testing/crafted_segment.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::CraftedBlock;
using ::runstore::testing::FooterBlock;
using ::runstore::testing::ScalarBlock;
using ::runstore::testing::SegmentCrafter;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::StringBlock;
using ::runstore::testing::TempDir;

// The address-space margin a child gets beyond its size before and the files.
constexpr uint64_t kMarginBytes = uint64_t{64} << 20;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers reserve terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

struct Case {
  const char* name;
  // The segment file(s) of the store, by name.
  std::function<std::vector<std::pair<std::string, std::string>>()> files;
};

std::vector<RunId> Runs(int n) {
  std::vector<RunId> r;
  for (int i = 0; i < n; ++i) r.emplace_back(int64_t{i});
  return r;
}
std::vector<int64_t> Zeros(int n) { return std::vector<int64_t>(n, 0); }
std::vector<double> Values(int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(i * 0.5);
  return v;
}

// One sealed segment holding `block` (after `edit`), or an unsealed one.
std::vector<std::pair<std::string, std::string>> OneBlock(
    CraftedBlock block, bool keep_lengths = false, bool sealed = true,
    const std::function<void(std::vector<format::CommitRecord>*, std::vector<FooterBlock>*)>&
        edit_footer = {}) {
  SegmentCrafter c;
  c.AddBlock(ScalarBlock("ok", Runs(10), Zeros(10), Values(10)));
  c.AddBlock(std::move(block), keep_lengths);
  c.AddCommit();
  if (sealed) c.Seal(edit_footer);
  return {{"c-00000001.rss", c.bytes()}};
}

CraftedBlock WithRawLen(CraftedBlock b, uint64_t raw_len) {
  b.header.raw_len = raw_len;
  return b;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"footer entry whose payload wraps past 2^64", [] {
                     return OneBlock(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), false, true,
                                     [](auto*, std::vector<FooterBlock>* blocks) {
                                       FooterBlock& b = blocks->back();
                                       const uint64_t payload_at = b.frame_offset + 128;
                                       b.header.payload_len = b.header.raw_len =
                                           UINT64_MAX - payload_at + 65;
                                     });
                   }});
  cases.push_back({"footer entry inside the segment header", [] {
                     return OneBlock(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), false, true,
                                     [](auto*, std::vector<FooterBlock>* blocks) {
                                       blocks->back().frame_offset = 64;
                                     });
                   }});
  cases.push_back({"zstd block declaring 2^40 raw bytes", [] {
                     return OneBlock(WithRawLen(
                         ScalarBlock("x", Runs(100), Zeros(100), Values(100), Codec::kZstd),
                         uint64_t{1} << 40));
                   }});
  cases.push_back({"zstd block whose frame declares another raw size", [] {
                     CraftedBlock b =
                         ScalarBlock("x", Runs(1000), Zeros(1000), Values(1000), Codec::kZstd);
                     return OneBlock(WithRawLen(std::move(b), 64 << 20));
                   }});
  cases.push_back({"lz4 block declaring more than its sequences make", [] {
                     CraftedBlock b =
                         ScalarBlock("x", Runs(1000), Zeros(1000), Values(1000), Codec::kLz4);
                     const uint64_t raw = b.header.raw_len;
                     return OneBlock(WithRawLen(std::move(b), raw * 200));
                   }});
  cases.push_back({"block header claiming 2^32-1 records", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.count = 0xFFFFFFFF;
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"block header claiming more records than its columns hold", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.count = static_cast<uint32_t>(b.payload.size() / 2);
                     return OneBlock(std::move(b));
                   }});
  cases.push_back(
      {"record shape (0, 2^62)", [] {
         format::BlockBuilder builder(
             format::BlockSchema{"x", DType::kFloat64, false, {0, 3}, Codec::kNone});
         const int64_t shape[] = {0, 3};
         builder.Add(RunRef(int64_t{1}), 0, ValueRef{DType::kFloat64, shape, nullptr, 0});
         CraftedBlock b;
         std::vector<std::string_view> pieces;
         builder.Finish(&b.header, &pieces);
         for (auto p : pieces) b.payload.append(p);
         b.header.dims = {0, int64_t{1} << 62};
         return OneBlock(std::move(b));
       }});
  cases.push_back({"series name that is not UTF-8", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.name = std::string("n\xff", 2);
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"string run id that is not UTF-8", [] {
                     CraftedBlock b = StringBlock("s", RunId(std::string("r\xfe", 2)), 0, "v");
                     b.header.min_key = b.header.max_key = format::Key{RunId("r"), 0};
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"string value that is not UTF-8", [] {
                     return OneBlock(StringBlock("s", RunId("r"), 0, std::string("v\xc3", 2)));
                   }});
  cases.push_back({"block whose steps lie outside its header's step range", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), {0, 1, 2, 1052311532}, Values(4));
                     b.header.max_step = 2;
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"block whose keys lie outside its header's key range", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.max_key = format::Key{RunId(int64_t{2}), 0};
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"block flagged ascending that holds one key twice", [] {
                     CraftedBlock b = ScalarBlock("x", {RunId(int64_t{0}), RunId(int64_t{0})},
                                                  {1, 1}, Values(2));
                     b.header.flags |= format::kBlockKeysAscending;
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"unsealed segment with a block claiming 2^32-1 records", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.count = 0xFFFFFFFF;
                     return OneBlock(std::move(b), false, /*sealed=*/false);
                   }});
  cases.push_back({"unsealed segment with a zstd block declaring 2^40 raw bytes", [] {
                     return OneBlock(WithRawLen(ScalarBlock("x", Runs(100), Zeros(100), Values(100),
                                                            Codec::kZstd),
                                                uint64_t{1} << 40),
                                     false, /*sealed=*/false);
                   }});
  return cases;
}

// What reading a store everywhere met: how many calls gave Corruption, and
// the first status of any other non-OK kind (NotFound aside).
struct Outcome {
  int corruption = 0;
  int ok = 0;
  std::string other;  // empty if none
};

void Note(const Status& s, Outcome* o) {
  if (s.ok()) {
    ++o->ok;
  } else if (s.code() == StatusCode::kCorruption) {
    ++o->corruption;
  } else if (s.code() != StatusCode::kNotFound && o->other.empty()) {
    o->other = s.ToString();
  }
}

// Opens the store both ways and reads all of it: series, runs, every scan,
// every key the scans returned through Get and GetLazy, and VerifyAll.
Outcome ReadEverything(const std::string& path) {
  Outcome o;
  auto strict = Store::Open(path, {.read_only = true});
  Note(strict.status(), &o);
  auto store = Store::Open(path, {.read_only = true, .on_damaged = OnDamaged::kSkip});
  Note(store.status(), &o);
  if (!store.ok()) return o;
  auto snap = (*store)->GetSnapshot();
  for (const DamagedSegment& d : snap->DamagedSegments()) Note(d.status, &o);
  auto series = snap->ListSeries(true);
  Note(series.status(), &o);
  Note(snap->ListRuns().status(), &o);
  if (series.ok()) {
    for (const SeriesInfo& info : *series) {
      auto scanner = snap->Scan(info.name);
      Note(scanner.status(), &o);
      if (!scanner.ok()) continue;
      ScanBatch b;
      while (true) {
        auto more = (*scanner)->Next(&b);
        Note(more.status(), &o);
        if (!more.ok() || !*more) break;
        for (size_t i = 0; i < b.count; ++i) {
          Note(snap->Get(b.run(i), info.name, b.steps[i]).status(), &o);
          auto lazy = snap->GetLazy(b.run(i), info.name, b.steps[i]);
          Note(lazy.ok() ? lazy->CheckAll() : lazy.status(), &o);
        }
      }
    }
  }
  const VerifyReport r = snap->VerifyAll();
  if (r.problems.empty()) ++o.ok;
  for (const Status& s : r.problems) Note(s, &o);
  return o;
}

uint64_t AddressSpaceBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) << 10;
  }
  return 0;
}

class HostileFileTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const Case c = Cases()[GetParam()];
    name_ = c.name;
    path_ = dir_.path() + "/store";
    ASSERT_OK(testing::WriteCraftedStore(Env::Default(), path_, c.files()));
    for (const auto& e : std::filesystem::recursive_directory_iterator(path_)) {
      if (e.is_regular_file()) bytes_ += e.file_size();
    }
  }
  TempDir dir_;
  std::string name_, path_;
  uint64_t bytes_ = 0;
};

TEST_P(HostileFileTest, IsCorruptionNamingTheFile) {
  const Outcome o = ReadEverything(path_);
  EXPECT_GT(o.corruption, 0) << name_ << ": read as if it were fine";
  EXPECT_EQ(o.other, "") << name_;
  auto strict = Store::Open(path_, {.read_only = true});
  if (!strict.ok()) {
    EXPECT_THAT(strict.status(),
                StatusIsWith(StatusCode::kCorruption, "segments/c-00000001.rss: offset"))
        << name_;
  }
  auto skipping = Store::Open(path_, {.read_only = true, .on_damaged = OnDamaged::kSkip});
  ASSERT_OK(skipping.status());
  const VerifyReport r = (*skipping)->GetSnapshot()->VerifyAll();
  EXPECT_FALSE(r.problems.empty()) << name_ << ": verify says ok";
}

// The same reads in a child process whose address space is what it was plus
// the store's bytes plus kMarginBytes.
TEST_P(HostileFileTest, NeverAllocatesMoreThanTheFileHolds) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not apply under a sanitizer";
  std::fflush(stdout);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const uint64_t limit = AddressSpaceBytes() + bytes_ + kMarginBytes;
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(10);
    const Outcome o = ReadEverything(path_);
    if (!o.other.empty()) {
      std::fprintf(stderr, "%s: %s\n", name_.c_str(), o.other.c_str());
      _exit(11);
    }
    _exit(o.corruption > 0 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << name_ << ": the reader died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << name_ << ": 10 setrlimit failed, 11 an error other than Corruption (out of memory?), "
      << "12 no Corruption reported";
}

INSTANTIATE_TEST_SUITE_P(Crafted, HostileFileTest, ::testing::Range(0, int(Cases().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n;
                           for (char c : std::string(Cases()[info.param].name)) {
                             n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           }
                           return n;
                         });

// A marker file larger than any marker is refused after reading 4 KiB of it.
TEST(HostileMarkerTest, HugeMarkerIsRefusedWithoutReadingIt) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK(testing::WriteCraftedStore(Env::Default(), path, {}));
  {
    std::ofstream f(path + "/RUNSTORE", std::ios::binary | std::ios::trunc);
    const std::string chunk(1 << 20, 'x');
    f << "runstore store\nformat_version 3\n";
    for (int i = 0; i < 64; ++i) f << chunk;
  }
  EXPECT_THAT(Store::Open(path, {.read_only = true}),
              StatusIsWith(StatusCode::kCorruption, "larger than 4096 bytes"));
}

}  // namespace
}  // namespace runstore
