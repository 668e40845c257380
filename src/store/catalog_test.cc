// The catalog (docs/design.md#catalog): opening reads it instead of every
// sealed segment's footer, it is never trusted over the segments (a segment
// added, replaced or changed since is read from its own footer), a damaged
// one only costs time, a crash at any file operation of writing it loses
// nothing, and many processes may open, refresh and write it at once.
#include "store/catalog.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "runstore/store.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore {
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::Contents;
using ::runstore::testing::DiffContents;
using ::runstore::testing::HashedId;
using ::runstore::testing::ScanAll;
using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;

// `segments` sealed segments of writer `id`, one writer and commit each: a hashed run
// with a scalar and a small array, as one experiment of a sweep writes.
void WriteSegments(Store* store, const std::string& id, int segments, int first = 0) {
  WriterOptions wo;
  wo.writer_id = id;  // each writer continues after the id's last segment
  for (int i = first; i < first + segments; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
    const std::string run = HashedId(static_cast<uint64_t>(i));
    const double loss = 0.25 * i;
    const std::vector<float> trace(8, static_cast<float>(i));
    const int64_t shape[] = {8};
    ASSERT_OK(w->Append(run, "loss", 0, ValueRef::Scalar(loss)));
    ASSERT_OK(w->Append(run, "trace", 0, ValueRef::Array(trace.data(), shape)));
    ASSERT_OK(w->Close());
  }
}

Contents Read(Store* store) {
  auto c = ScanAll(*store->GetSnapshot());
  EXPECT_OK(c.status());
  return c.ok() ? *c : Contents{};
}

// Open file descriptors of this process.
size_t OpenDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(CatalogTest, OpeningReadsTheCatalogAndHoldsNoDescriptorPerSegment) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents want;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 80);
    WriteSegments(store.get(), "b", 80, 80);
  }
  {
    // Without a catalog: every footer; a store opened for writing that read
    // so many writes one.
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 100}));
    const RefreshStats s = store->last_refresh();
    EXPECT_EQ(s.segments, 160u);
    EXPECT_EQ(s.from_footer, 160u);
    EXPECT_EQ(s.from_catalog, 0u);
    EXPECT_TRUE(s.catalog_written);
    want = Read(store.get());
    ASSERT_EQ(want.size(), 320u);
  }
  ASSERT_TRUE(fs::exists(path + "/CATALOG"));
  const size_t fds = OpenDescriptors();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.read_only = true}));
  const RefreshStats s = store->last_refresh();
  EXPECT_EQ(s.from_catalog, 160u);
  EXPECT_EQ(s.from_footer, 0u);
  EXPECT_FALSE(s.catalog_written);
  // Nothing is opened or mapped until it is read...
  EXPECT_LE(OpenDescriptors(), fds + 1);
  // ...and reading everything keeps no descriptor per segment either.
  const Contents got = Read(store.get());
  EXPECT_EQ(got, want) << DiffContents(want, got);
  EXPECT_LE(OpenDescriptors(), fds + 1);
  // Lookups by hashed id use the catalog's copy of the run index.
  ASSERT_OK_AND_ASSIGN(Value v, store->GetSnapshot()->Get(RunRef(HashedId(123)), "loss", 0));
  EXPECT_EQ(v.scalar<double>(), 0.25 * 123);
  EXPECT_TRUE(store->GetSnapshot()->VerifyAll().problems.empty());
  // The same without it.
  ASSERT_OK_AND_ASSIGN(auto plain, Store::Open(path, {.read_only = true, .use_catalog = false}));
  EXPECT_EQ(plain->last_refresh().from_footer, 160u);
  EXPECT_EQ(Read(plain.get()), want);
}

// A segment added, replaced or changed since the catalog was written is read
// from its own file, never from the catalog.
TEST(CatalogTest, TheCatalogIsNeverTrustedOverTheSegments) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
  WriteSegments(store.get(), "a", 20);
  ASSERT_OK_AND_ASSIGN(uint64_t n, store->WriteCatalog());
  EXPECT_EQ(n, 20u);
  // Added: 5 segments of another writer.
  WriteSegments(store.get(), "b", 5, 100);
  // Replaced: a-00000003.rss becomes another sealed segment of the same name
  // (written elsewhere and moved in, as a careless copy would), with other
  // values, and a-00000004.rss is rewritten in place with a byte changed.
  {
    TempDir other;
    ASSERT_OK_AND_ASSIGN(auto o, Store::Open(other.path() + "/s", {}));
    WriteSegments(o.get(), "a", 3, 500);
    fs::rename(other.path() + "/s/segments/a-00000003.rss", path + "/segments/a-00000003.rss");
  }
  const std::string four = path + "/segments/a-00000004.rss";
  std::string bytes;
  {
    std::ifstream in(four, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 40] ^= 1;  // in the footer: its checksum fails
  fs::remove(four);
  std::ofstream(four, std::ios::binary) << bytes;
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  const RefreshStats s = ro->last_refresh();
  EXPECT_EQ(s.segments, 25u);
  EXPECT_EQ(s.from_catalog, 18u);
  EXPECT_EQ(s.from_footer + s.recovered, 7u);
  auto snap = ro->GetSnapshot();
  // The replaced segment's values, not the catalog's.
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(RunRef(HashedId(502)), "loss", 0));
  EXPECT_EQ(v.scalar<double>(), 0.25 * 502);
  EXPECT_THAT(snap->Get(RunRef(HashedId(2)), "loss", 0), StatusIs(StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(v, snap->Get(RunRef(HashedId(100)), "loss", 0));
  EXPECT_EQ(v.scalar<double>(), 25.0);
  // The changed one is read from its own footer, found damaged, and read as
  // a segment whose seal is torn (its records are all intact).
  ASSERT_OK_AND_ASSIGN(v, snap->Get(RunRef(HashedId(3)), "loss", 0));
  EXPECT_EQ(v.scalar<double>(), 0.75);
}

// A damaged catalog costs time, never data: every way of breaking it makes
// opening read the segments' own footers.
TEST(CatalogTest, ADamagedCatalogIsIgnored) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents want;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 12);
    ASSERT_OK(store->WriteCatalog().status());
    want = Read(store.get());
  }
  std::string clean;
  {
    std::ifstream in(path + "/CATALOG", std::ios::binary);
    clean.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"cut in the header", clean.substr(0, 20)},
      {"cut in the body", clean.substr(0, clean.size() / 2)},
      {"grown", clean + "x"},
      {"not a catalog", std::string(100, 'x')},
  };
  for (int i = 0; i < 40; ++i) {
    std::string b = clean;
    b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
    cases.emplace_back("byte flipped", b);
  }
  {
    std::string b = clean;
    b[8] = 2;  // a newer version, header checksum fixed
    EncodeFixed<uint64_t>(b.data() + 40, Checksum(b.data(), 40));
    cases.emplace_back("newer version", b);
  }
  for (const auto& [what, bytes] : cases) {
    SCOPED_TRACE(what);
    std::ofstream(path + "/CATALOG", std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_FALSE(Catalog::Read(Env::Default(), path, UINT64_MAX).ok());
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
    EXPECT_EQ(ro->last_refresh().from_catalog, 0u);
    EXPECT_EQ(Read(ro.get()), want);
  }
  EXPECT_THAT(Catalog::Read(Env::Default(), path, UINT64_MAX),
              StatusIsWith(StatusCode::kNotSupported, "2"));
}

// A sparse CATALOG larger than any catalog of the store's segments (truncate
// -s 256G) made every reader die of std::bad_alloc on the thread that read
// it. Its header is read first and its size checked against what a catalog
// of these segments can hold, before anything is allocated: it is ignored,
// the store reads from the footers, and why is reported. Read in a child
// whose address space could not hold the file.
TEST(CatalogTest, ACatalogLargerThanItCanBeIsIgnoredBeforeAnythingIsAllocated) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents want;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 12);
    ASSERT_OK(store->WriteCatalog().status());
    want = Read(store.get());
  }
  std::string header;
  {
    std::ifstream in(path + "/CATALOG", std::ios::binary);
    header.assign(std::istreambuf_iterator<char>(in), {});
    header.resize(48);
  }
  constexpr uint64_t kHuge = uint64_t{256} << 30;
  const std::vector<std::pair<std::string, bool>> cases = {
      {"extended by truncate", false},  // its header no longer matches its size
      {"a header that claims the whole sparse file", true},
  };
  for (const auto& [what, claim] : cases) {
    SCOPED_TRACE(what);
    if (claim) {
      std::string h = header;
      EncodeFixed<uint64_t>(h.data() + 24, kHuge - 48);
      EncodeFixed<uint64_t>(h.data() + 40, Checksum(h.data(), 40));
      std::ofstream(path + "/CATALOG", std::ios::binary | std::ios::trunc) << h;
    }
    ASSERT_EQ(::truncate((path + "/CATALOG").c_str(), static_cast<off_t>(kHuge)), 0);
    std::fflush(stdout);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
      const rlimit rl{uint64_t{4} << 30, uint64_t{4} << 30};
      ::setrlimit(RLIMIT_AS, &rl);
#endif
      auto ro = Store::Open(path, {.read_only = true});
      if (!ro.ok()) ::_exit(1);
      const RefreshStats st = (*ro)->last_refresh();
      if (st.from_catalog != 0 || st.catalog_status.code() != StatusCode::kCorruption ||
          st.catalog_status.message().find("CATALOG") == std::string::npos) {
        std::fprintf(stderr, "%s\n", st.catalog_status.ToString().c_str());
        ::_exit(2);
      }
      auto got = ScanAll(*(*ro)->GetSnapshot());
      ::_exit(got.ok() && *got == want ? 0 : 3);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the reader died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: open failed, 2: not reported, 3: read differently";
    EXPECT_THAT(Catalog::Read(Env::Default(), path, Catalog::MaxBytes({})),
                StatusIs(StatusCode::kCorruption));
  }
}

// An entry holding another segment's bytes, with this file's size, time and
// inode (a hostile or mixed-up catalog), is never replayed for this file:
// its header names another writer id and number than the file's name. Before,
// the healthy segment read as the other one's index over its own bytes, and
// verify reported it damaged (exit code 2, inviting its deletion).
TEST(CatalogTest, AnEntryOfAnotherSegmentIsNeverReplayedForThisOne) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents want;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 3);
    WriteSegments(store.get(), "b", 3, 3);
    ASSERT_OK(store->WriteCatalog().status());
    want = Read(store.get());
  }
  ASSERT_OK_AND_ASSIGN(auto real, Catalog::Read(Env::Default(), path, UINT64_MAX));
  std::map<std::string, CatalogEntry> lying;
  for (const auto& [name, e] : real->entries()) lying[std::string(name)] = e;
  // a-00000001's entry: b-00000002's bytes, a-00000001's stat.
  lying["a-00000001.rss"].reads = lying["b-00000002.rss"].reads;
  ASSERT_OK(Catalog::Write(Env::Default(), path, lying));
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  EXPECT_EQ(ro->last_refresh().from_catalog, 5u);
  EXPECT_EQ(ro->last_refresh().from_footer, 1u);
  EXPECT_EQ(Read(ro.get()), want);
  const VerifyReport r = ro->GetSnapshot()->VerifyAll();
  for (const Status& p : r.problems) ADD_FAILURE() << p.ToString();
}

// A catalog whose entry holds bytes that are a valid index of this very
// writer id and number, but not this file's (the same segment of another
// store): readers take it as the file's, as a cache is taken, but verify
// compares every catalog entry with its file, and blames the catalog, never
// the healthy segment.
TEST(CatalogTest, VerifyBlamesALyingCatalogNeverTheSegment) {
  TempDir dir;
  const std::string path = dir.path() + "/store", other = dir.path() + "/other";
  for (const std::string& p : {path, other}) {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(p, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 2, p == path ? 0 : 7);
    ASSERT_OK(store->WriteCatalog().status());
  }
  ASSERT_OK_AND_ASSIGN(auto mine, Catalog::Read(Env::Default(), path, UINT64_MAX));
  ASSERT_OK_AND_ASSIGN(auto theirs, Catalog::Read(Env::Default(), other, UINT64_MAX));
  std::map<std::string, CatalogEntry> lying;
  for (const auto& [name, e] : mine->entries()) lying[std::string(name)] = e;
  lying["a-00000001.rss"].reads = theirs->Find("a-00000001.rss")->reads;
  ASSERT_OK(Catalog::Write(Env::Default(), path, lying));
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  const VerifyReport r = ro->GetSnapshot()->VerifyAll();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0], StatusIsWith(StatusCode::kCorruption,
                                          "CATALOG: its entry for segments/a-00000001.rss"));
  EXPECT_EQ(r.blocks_checked, 4u) << "the segment is checked by its own index";
}

// Opening a store of more segments than are loaded on one thread (512)
// gives what opening it segment by segment gives, from the catalog and from
// the footers, and a refresh that adds segments sees them (the suite runs
// this under ThreadSanitizer too).
TEST(CatalogTest, ManySegmentsLoadedOnThreadsReadAsOnOne) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
  WriteSegments(store.get(), "a", 300);
  WriteSegments(store.get(), "b", 300, 300);
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(path, {.read_only = true}));
  const Contents want = Read(reader.get());
  EXPECT_EQ(want.size(), 1200u);
  ASSERT_OK(store->WriteCatalog().status());
  for (bool catalog : {true, false}) {
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true, .use_catalog = catalog}));
    EXPECT_EQ(ro->last_refresh().segments, 600u);
    EXPECT_EQ(ro->last_refresh().from_catalog, catalog ? 600u : 0u);
    EXPECT_EQ(Read(ro.get()), want);
    for (int i : {0, 299, 300, 599}) {
      ASSERT_OK_AND_ASSIGN(Value v, ro->GetSnapshot()->Get(RunRef(HashedId(i)), "loss", 0));
      EXPECT_EQ(v.scalar<double>(), 0.25 * i);
    }
  }
  // 600 more: the refresh loads only those, on threads too.
  WriteSegments(store.get(), "c", 600, 600);
  ASSERT_OK(reader->Refresh());
  EXPECT_EQ(reader->last_refresh().unchanged, 600u);
  EXPECT_EQ(reader->last_refresh().from_footer, 600u);
  EXPECT_EQ(Read(reader.get()).size(), 2400u);
}

// A loaded segment keeps where its index's bytes lie and their hash, not the
// bytes: read again from the same file they are the entry's bytes, from any
// other file (another segment of the same size, a cut copy) they are
// refused; and a catalog written from bytes read again is the catalog
// written from the bytes loading read, byte for byte.
TEST(CatalogTest, ASegmentKeepsWhereItsReadsLieAndTheirHashNotTheBytes) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 3);
    ASSERT_OK(store->WriteCatalog().status());
  }
  const std::string first = ReadFileToString(Env::Default(), path + "/CATALOG").value();
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Read(Env::Default(), path, UINT64_MAX));
  const CatalogEntry* e = catalog->Find("a-00000001.rss");
  ASSERT_NE(e, nullptr);
  const SegmentReadsDigest digest = DigestOf(*e->reads);
  EXPECT_EQ(digest.size, e->reads->size);
  ASSERT_EQ(digest.ranges.size(), e->reads->ranges.size());
  ASSERT_OK_AND_ASSIGN(auto same,
                       Env::Default()->NewRandomAccessFile(path + "/segments/a-00000001.rss"));
  ASSERT_OK_AND_ASSIGN(auto again, ReadAgain(*same, digest));
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->ranges.size(), e->reads->ranges.size());
  for (size_t i = 0; i < again->ranges.size(); ++i) {
    EXPECT_EQ(again->ranges[i].first, e->reads->ranges[i].first);
    EXPECT_EQ(again->ranges[i].second, e->reads->ranges[i].second);
  }
  ASSERT_OK_AND_ASSIGN(auto other,
                       Env::Default()->NewRandomAccessFile(path + "/segments/a-00000002.rss"));
  ASSERT_OK_AND_ASSIGN(const uint64_t other_size, other->Size());
  ASSERT_EQ(other_size, digest.size) << "the test wants a segment of the same size";
  ASSERT_OK_AND_ASSIGN(auto not_it, ReadAgain(*other, digest));
  EXPECT_EQ(not_it, nullptr) << "another segment's bytes pass for this one's";
  const std::string cut_path = dir.path() + "/cut.rss";
  std::string bytes = ReadFileToString(Env::Default(), path + "/segments/a-00000001.rss").value();
  bytes.pop_back();
  std::ofstream(cut_path, std::ios::binary) << bytes;
  ASSERT_OK_AND_ASSIGN(auto cut, Env::Default()->NewRandomAccessFile(cut_path));
  ASSERT_OK_AND_ASSIGN(auto cut_again, ReadAgain(*cut, digest));
  EXPECT_EQ(cut_again, nullptr) << "a cut copy passes for the segment";

  // Rewritten by a store that loaded every index from the catalog, and by
  // one that loaded them from the footers: each entry's bytes read again.
  for (bool use_catalog : {true, false}) {
    ASSERT_OK_AND_ASSIGN(
        auto store, Store::Open(path, {.use_catalog = use_catalog, .catalog_rewrite_segments = 0}));
    EXPECT_EQ(store->last_refresh().from_catalog, use_catalog ? 3u : 0u);
    ASSERT_OK_AND_ASSIGN(uint64_t written, store->WriteCatalog());
    EXPECT_EQ(written, 3u);
    EXPECT_EQ(ReadFileToString(Env::Default(), path + "/CATALOG").value(), first)
        << (use_catalog ? "from the catalog" : "from the footers");
  }
}

// The heap the main arena holds (what a store loaded on the calling thread
// allocates: fewer than 512 segments are loaded there).
size_t HeapInUse() {
  malloc_trim(0);
  return mallinfo2().uordblks;
}

// Opening with the catalog costs no more memory, once open, than opening
// without it: the catalog's bytes (about 700 a segment here) are not held
// (a segment keeps a digest of its entry, under 200 bytes), and they were held
// for as long as the store was open.
TEST(CatalogTest, AStoreOpenedWithItsCatalogHoldsNoMoreThanWithout) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  constexpr int kSegments = 400;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", kSegments);
    ASSERT_OK(store->WriteCatalog().status());
  }
  const uint64_t catalog_bytes = fs::file_size(path + "/CATALOG");
  size_t held[2];
  for (bool use_catalog : {false, true}) {
    const size_t before = HeapInUse();
    ASSERT_OK_AND_ASSIGN(auto store,
                         Store::Open(path, {.read_only = true, .use_catalog = use_catalog}));
    ASSERT_EQ(store->last_refresh().from_catalog, use_catalog ? kSegments : 0u);
    held[use_catalog] = HeapInUse() - before;
  }
  std::printf(
      "[ figures  ] %d segments opened read-only: %zu heap bytes held without the catalog, "
      "%zu with it (a catalog of %llu bytes)\n",
      kSegments, held[0], held[1], static_cast<unsigned long long>(catalog_bytes));
  EXPECT_LE(held[1], held[0] + kSegments * 200) << "the catalog's bytes are held";
}

// Entries are written sorted by name; a catalog whose entries are out of
// order or name a segment twice (crafted, checksums valid) is damaged, and
// lookups of a good one find every entry by name and no other.
TEST(CatalogTest, EntriesOutOfOrderOrTwiceMakeTheCatalogDamaged) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
  WriteSegments(store.get(), "a", 3);
  ASSERT_OK(store->WriteCatalog().status());
  ASSERT_OK_AND_ASSIGN(auto catalog, Catalog::Read(Env::Default(), path, UINT64_MAX));
  ASSERT_EQ(catalog->size(), 3u);
  std::vector<std::string> names;
  for (const auto& [name, e] : catalog->entries()) names.emplace_back(name);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& n : names) {
    const CatalogEntry* e = catalog->Find(n);
    ASSERT_NE(e, nullptr) << n;
    EXPECT_GT(e->reads->ranges.size(), 0u);
  }
  EXPECT_EQ(catalog->Find(names[0] + "x"), nullptr);
  EXPECT_EQ(catalog->Find(""), nullptr);
  EXPECT_EQ(catalog->Find("zzz"), nullptr);
  // One entry's bytes each, from catalogs of one entry.
  std::vector<std::string> bodies;
  for (const auto& [name, e] : catalog->entries()) {
    ASSERT_OK(Catalog::Write(Env::Default(), path, {{std::string(name), e}}));
    std::ifstream in(path + "/CATALOG", std::ios::binary);
    bodies.emplace_back(std::string(std::istreambuf_iterator<char>(in), {}).substr(48));
  }
  auto craft = [&](const std::vector<int>& order) {
    std::string body;
    for (int i : order) body += bodies[i];
    std::string header("RSCATAL\n", 8);
    PutFixed<uint32_t>(&header, 1);
    PutFixed<uint32_t>(&header, 0);
    PutFixed<uint64_t>(&header, order.size());
    PutFixed<uint64_t>(&header, body.size());
    PutFixed<uint64_t>(&header, Checksum(body));
    PutFixed<uint64_t>(&header, Checksum(header));
    std::ofstream(path + "/CATALOG", std::ios::binary | std::ios::trunc) << header + body;
  };
  craft({0, 1, 2});
  ASSERT_OK_AND_ASSIGN(auto crafted, Catalog::Read(Env::Default(), path, UINT64_MAX));
  EXPECT_EQ(crafted->size(), 3u);
  craft({0, 2, 1});
  EXPECT_THAT(Catalog::Read(Env::Default(), path, UINT64_MAX),
              StatusIsWith(StatusCode::kCorruption, "entry 2 is out of order"));
  craft({0, 1, 1});
  EXPECT_THAT(Catalog::Read(Env::Default(), path, UINT64_MAX),
              StatusIsWith(StatusCode::kCorruption, names[1] + " appears twice"));
  // Either way the store opens from the segments themselves.
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  EXPECT_EQ(ro->last_refresh().from_catalog, 0u);
  EXPECT_EQ(ro->last_refresh().from_footer, 3u);
}

// A snapshot maps a sealed segment on its first read: one removed before
// then (a compaction replaced it) is reported as such.
TEST(CatalogTest, ASegmentRemovedBeforeItsFirstReadIsReported) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  WriteSegments(store.get(), "a", 3);
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  auto snap = ro->GetSnapshot();
  ASSERT_OK(snap->Get(RunRef(HashedId(0)), "loss", 0).status());  // maps a-1
  fs::remove(path + "/segments/a-00000001.rss");
  fs::remove(path + "/segments/a-00000002.rss");
  EXPECT_OK(snap->Get(RunRef(HashedId(0)), "loss", 0).status());  // still mapped
  EXPECT_THAT(snap->Get(RunRef(HashedId(1)), "loss", 0),
              StatusIsWith(StatusCode::kNotFound,
                           "segments/a-00000002.rss: the segment was removed after this "
                           "snapshot was taken"));
}

// A crash after every file operation of writing the catalog, with unsynced
// data dropped: the store then opens with all its records, the catalog is
// the old one, none, or the new one whole, and writing it again works.
TEST(CatalogTest, ACrashAtEveryFileOperationOfWritingItLosesNothing) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK(env.CreateDir("/s"));
  ASSERT_OK(env.SyncDir("/"));
  const std::string path = "/s/store";
  Contents want;
  {
    ASSERT_OK_AND_ASSIGN(auto store,
                         Store::Open(path, {.env = &env, .catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "a", 6);
    ASSERT_OK_AND_ASSIGN(uint64_t n, store->WriteCatalog());  // the old catalog
    ASSERT_EQ(n, 6u);
    WriteSegments(store.get(), "b", 6, 50);
    ASSERT_OK(store->Refresh().status());
    want = Read(store.get());
    ASSERT_EQ(want.size(), 24u);
  }
  ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, 1));
  ASSERT_OK_AND_ASSIGN(const std::string old_bytes, ReadFileToString(&env, path + "/CATALOG"));
  // The number of operations writing the catalog takes.
  uint64_t ops = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto store,
                         Store::Open(path, {.env = &env, .catalog_rewrite_segments = 0}));
    env.ResetCounters();
    ASSERT_OK_AND_ASSIGN(uint64_t n, store->WriteCatalog());
    ops = env.operation_count();
    ASSERT_EQ(n, 12u);
  }
  ASSERT_GE(ops, 4u);  // create, append, sync, rename, sync dir
  size_t old_catalog = 0, new_catalog = 0;
  for (uint64_t crash = 0; crash <= ops; ++crash) {
    SCOPED_TRACE("crash after operation " + std::to_string(crash));
    {  // the old catalog back, durably
      ASSERT_OK_AND_ASSIGN(auto f, env.NewWritableFile(path + "/CATALOG", false));
      ASSERT_OK(f->Append(old_bytes));
      ASSERT_OK(f->Sync());
      ASSERT_OK(f->Close());
      ASSERT_OK(env.SyncDir(path));
      ASSERT_OK_AND_ASSIGN(auto back, Catalog::Read(&env, path, UINT64_MAX));
      ASSERT_EQ(back->size(), 6u);
    }
    {
      ASSERT_OK_AND_ASSIGN(auto store,
                           Store::Open(path, {.env = &env, .catalog_rewrite_segments = 0}));
      env.ResetCounters();
      env.CrashAfter(crash);
      (void)store->WriteCatalog();
    }
    ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, crash));
    auto catalog = Catalog::Read(&env, path, UINT64_MAX);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();  // never half written
    ASSERT_TRUE((*catalog)->size() == 6 || (*catalog)->size() == 12) << (*catalog)->size();
    ((*catalog)->size() == 6 ? old_catalog : new_catalog)++;
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.env = &env, .read_only = true}));
    EXPECT_EQ(ro->last_refresh().from_catalog, (*catalog)->size());
    const Contents got = Read(ro.get());
    EXPECT_EQ(got, want) << DiffContents(want, got);
  }
  std::printf("[ figures  ] %llu crash points: %zu left the old catalog, %zu the new one\n",
              static_cast<unsigned long long>(ops + 1), old_catalog, new_catalog);
  EXPECT_GT(new_catalog, 0u);
  EXPECT_GT(old_catalog, 0u);
}

// Many openers, refreshers and catalog writers at once, while a writer adds
// segments: every open sees every segment sealed before it, with the right
// values, and the catalog left at the end is whole.
TEST(CatalogTest, ManyProcessesOpenRefreshAndWriteItAtOnce) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
    WriteSegments(store.get(), "base", 40);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> opens{0}, writes{0};
  std::vector<std::string> errors;
  std::mutex mu;
  auto fail = [&](const std::string& e) {
    std::lock_guard lk(mu);
    errors.push_back(e);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        auto store = Store::Open(path, {.catalog_rewrite_segments = 1});
        if (!store.ok()) return fail(store.status().ToString());
        ++opens;
        auto c = ScanAll(*(*store)->GetSnapshot());
        if (!c.ok()) return fail(c.status().ToString());
        // The 40 base segments at least, each with its two records.
        if (c->size() < 80 || c->size() % 2 != 0) return fail("size " + std::to_string(c->size()));
        for (const auto& [k, v] : *c) {
          if (k.series != "loss") continue;
          double d;
          std::memcpy(&d, v.bytes.data(), 8);
          const std::string run = k.run.ToString();
          bool known = false;
          for (int i = 0; i < 1000 && !known; ++i) known = run == HashedId(i) && d == 0.25 * i;
          if (!known) return fail("wrong value for " + run);
        }
        if (t % 2 == 0) {
          auto w = (*store)->WriteCatalog();
          if (!w.ok()) return fail(w.status().ToString());
          ++writes;
        }
        if (auto r = (*store)->Refresh(); !r.ok()) return fail(r.status().ToString());
      }
    });
  }
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.catalog_rewrite_segments = 0}));
    WriteSegments(store.get(), "more", 60, 100);
  }
  stop = true;
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
  ASSERT_OK(Catalog::Read(Env::Default(), path, UINT64_MAX).status());
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  EXPECT_EQ(Read(ro.get()).size(), 200u);
  std::printf("[ figures  ] %d opens and %d catalog writes beside a writer of 60 segments\n",
              opens.load(), writes.load());
  // No temporary is left behind by writers that finished.
  for (const auto& e : fs::directory_iterator(path)) {
    EXPECT_EQ(e.path().filename().string().find("CATALOG.tmp"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace runstore
