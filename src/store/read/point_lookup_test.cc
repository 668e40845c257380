// Point lookups by run ids whose key ranges narrow nothing down: hashed
// experiment ids (runstore's default) and integers written in random order,
// spread over many blocks, segments and writers, with overwrites and resume
// markers, against a model of what each key must resolve to. These lookups
// go through the series' run index (point_lookup.cc); integer ids written in
// order go through the key ranges, and both must agree with the model. So
// must integer ids in order under one block whose range spans all of them (a
// compacted segment's block, then segments written after it): every key is
// in the ranges of more blocks than a lookup reads one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "runstore/store.h"
#include "store/read/snapshot.h"
#include "testing/test_util.h"

namespace runstore::read {
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::HashedId;
using ::runstore::testing::TempDir;

using RunKey = std::variant<int64_t, std::string>;
RunRef Ref(const RunKey& r) {
  return std::holds_alternative<int64_t>(r) ? RunRef(std::get<int64_t>(r))
                                            : RunRef(std::get<std::string>(r));
}
std::string Name(const RunKey& r) {
  return std::holds_alternative<int64_t>(r) ? std::to_string(std::get<int64_t>(r))
                                            : std::get<std::string>(r);
}

struct Model {
  // (run, step) -> the value the last commit wrote; the step-0 value of a run.
  std::map<std::pair<RunKey, int64_t>, double> values;
  // The runs hidden from a step on by a resume marker, applied to `values` as written.
  void Resume(const RunKey& run, int64_t step) {
    for (auto it = values.begin(); it != values.end();) {
      if (it->first.first == run && it->first.second >= step)
        it = values.erase(it);
      else
        ++it;
    }
  }
};

class PointLookupTest : public ::testing::TestWithParam<int> {
 protected:
  std::string StorePath() const { return dir_.path() + "/store"; }
  TempDir dir_;
};

// The run ids of one parameter: 0 hashed strings, 1 integers in random
// order, 2 integers in order (key ranges suffice), 3 both kinds mixed, 4
// integers in order under a block that spans them all.
std::vector<RunKey> Runs(int kind, int n, std::mt19937_64& rng) {
  std::vector<RunKey> runs;
  for (int i = 0; i < n; ++i) {
    if (kind == 0 || (kind == 3 && i % 2 == 0))
      runs.emplace_back(HashedId(i));
    else
      runs.emplace_back(int64_t{i});
  }
  if (kind != 2 && kind != 4) std::shuffle(runs.begin(), runs.end(), rng);
  return runs;
}

TEST_P(PointLookupTest, EveryKeyResolvesAsTheModelSays) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const int kind = GetParam();
  const std::vector<RunKey> runs = Runs(kind, 5000, rng);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {}));
  WriterOptions wo;
  wo.block_bytes = 2048;        // about 100 records a block: hundreds of blocks
  wo.segment_bytes = 64 << 10;  // and many segments
  std::vector<std::unique_ptr<Writer>> writers;
  for (int k = 0; k < 3; ++k) {
    wo.writer_id = "w" + std::to_string(k);
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
    writers.push_back(std::move(w));
  }
  Model model;
  if (kind == 4) {
    WriterOptions wide;
    wide.writer_id = "wide";
    wide.block_bytes = 4 << 20;
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wide));
    for (size_t i = 0; i < runs.size(); ++i) {
      for (int64_t step = 0; step < 3; ++step) {
        const double v = -1e6 - static_cast<double>(i) * 10 - static_cast<double>(step);
        ASSERT_OK(w->Append(Ref(runs[i]), "y", step, v));
        model.values[{runs[i], step}] = v;
      }
    }
    ASSERT_OK(w->Close());
  }
  // Rounds of commits: each writes a slice of the runs at steps 0..2; later
  // rounds overwrite some keys (the later commit wins) and resume some runs.
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (round > 0 && rng() % 4 != 0) continue;
      Writer& w = *writers[rng() % writers.size()];
      const int64_t steps = round == 0 ? 3 : 1 + static_cast<int64_t>(rng() % 3);
      for (int64_t step = 0; step < steps; ++step) {
        const double v = round * 1e6 + static_cast<double>(i) * 10 + static_cast<double>(step);
        ASSERT_OK(w.Append(Ref(runs[i]), "y", step, v));
        model.values[{runs[i], step}] = v;
      }
      if (i % 97 == 0) ASSERT_OK(w.Commit());
    }
    for (auto& w : writers) ASSERT_OK(w->Commit());
    if (round == 1) {
      for (size_t i = 0; i < runs.size(); i += 53) {
        ASSERT_OK(writers[i % writers.size()]->Resume(Ref(runs[i]), 1));
        model.Resume(runs[i], 1);
      }
    }
  }
  for (auto& w : writers) ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_GE(snap->ListSegments().size(), 8u);
  size_t found = 0, hidden = 0;
  for (const RunKey& run : runs) {
    for (int64_t step = 0; step < 3; ++step) {
      auto it = model.values.find({run, step});
      auto got = snap->Get(Ref(run), "y", step);
      if (it == model.values.end()) {
        EXPECT_EQ(got.status().code(), StatusCode::kNotFound)
            << "run " << Name(run) << " step " << step << " seed " << seed;
        ++hidden;
      } else {
        ASSERT_TRUE(got.ok()) << "run " << Name(run) << " step " << step << ": "
                              << got.status().ToString() << " seed " << seed;
        EXPECT_EQ(got->scalar<double>(), it->second)
            << "run " << Name(run) << " step " << step << " seed " << seed;
        ++found;
      }
    }
  }
  // A scan of the series returns exactly the model, each key once.
  {
    ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("y"));
    ScanBatch b;
    size_t records = 0;
    std::set<std::pair<std::string, int64_t>> seen;
    while (true) {
      ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) {
        const RunId r = b.run(i);
        const RunKey k = r.is_int() ? RunKey(r.int_value()) : RunKey(r.string_value());
        auto it = model.values.find({k, b.steps[i]});
        ASSERT_NE(it, model.values.end()) << Name(k) << " step " << b.steps[i] << " seed " << seed;
        double v;
        std::memcpy(&v, testing::RecordValueAt(b, i).bytes.data(), sizeof v);
        EXPECT_EQ(v, it->second) << Name(k) << " seed " << seed;
        EXPECT_TRUE(seen.insert({Name(k), b.steps[i]}).second) << Name(k) << " twice";
        ++records;
      }
    }
    EXPECT_EQ(records, model.values.size()) << "seed " << seed;
  }
  // Runs never written, of both kinds.
  EXPECT_EQ(snap->Get(RunRef(HashedId(-1)), "y", 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(snap->Get(RunRef(int64_t{-5}), "y", 0).status().code(), StatusCode::kNotFound);
  std::printf("[ figures  ] kind %d: %zu segments, %zu keys found, %zu hidden or absent\n", kind,
              snap->ListSegments().size(), found, hidden);
  EXPECT_GT(hidden, 0u);
}

INSTANTIATE_TEST_SUITE_P(RunKinds, PointLookupTest, ::testing::Values(0, 1, 2, 3, 4));

// A damaged block under the run index: a lookup that the block may answer
// reports Corruption, never an older value or NotFound. In a sealed segment
// the footer's run index says which runs the block holds, so only lookups of
// those runs read it, also those that take their candidates from the key
// ranges (keys near the ends of the key space, which few blocks' ranges
// reach); in a segment still open (no footer) the index is built from the
// blocks, and the damaged one is a candidate for every lookup that its key
// range covers.
class PointLookupDamageTest : public ::testing::TestWithParam<bool> {};

TEST_P(PointLookupDamageTest, ADamagedBlockIsReportedNotSkipped) {
  const bool sealed = GetParam();
  TempDir dir;
  const std::string path = dir.path() + "/store";
  std::map<std::string, double> model;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  WriterOptions wo;
  wo.block_bytes = 2048;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  for (int i = 0; i < 3000; ++i) {
    const double v = 0.5 * i;
    ASSERT_OK(w->Append(RunRef(HashedId(i)), "y", 0, v));
    model[HashedId(i)] = v;
    if (i % 100 == 99) ASSERT_OK(w->Commit());
  }
  if (sealed) {
    ASSERT_OK(w->Close());
  } else {
    ASSERT_OK(w->Commit());
  }
  // One byte flipped in the value column of a block in the middle: the
  // bytes of the value 750.0 (record 1500). Old commits of an open segment
  // are proven synced by the ones after them, so recovery keeps the block
  // and reads report its damage.
  std::string file;
  for (const auto& f : fs::directory_iterator(path + "/segments")) file = f.path();
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const double needle = 750.0;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&needle), 8));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] ^= 0x10;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(path, {.read_only = true}));
  auto snap = ro->GetSnapshot();
  size_t ok = 0;
  std::set<std::string> corrupt;  // the runs whose lookup reported Corruption
  for (const auto& [run, v] : model) {
    auto got = snap->Get(RunRef(run), "y", 0);
    if (got.ok()) {
      EXPECT_EQ(got->scalar<double>(), v) << run;
      ++ok;
    } else {
      EXPECT_EQ(got.status().code(), StatusCode::kCorruption)
          << run << ": " << got.status().ToString();
      corrupt.insert(run);
    }
  }
  // In a sealed segment a scan filtered to one run reads the same blocks as
  // the lookup (the footers' run indexes resolve the series' keys and rule
  // the other blocks out): it fails for exactly the runs whose lookup does.
  std::set<std::string> scans_failed;
  for (const auto& [run, v] : model) {
    ScanOptions so;
    so.runs = std::vector<RunId>{RunId(run)};
    auto scanner = snap->Scan("y", so);
    if (!scanner.ok()) {
      // In an open segment resolving the series' keys reads every block.
      EXPECT_FALSE(sealed) << scanner.status().ToString();
      EXPECT_EQ(scanner.status().code(), StatusCode::kCorruption);
      scans_failed.insert(run);
      continue;
    }
    ScanBatch b;
    size_t records = 0;
    Status s;
    while (true) {
      auto more = (*scanner)->Next(&b);
      if (!more.ok()) {
        s = more.status();
        break;
      }
      if (!*more) break;
      records += b.count;
    }
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << run;
      scans_failed.insert(run);
    } else {
      EXPECT_EQ(records, 1u) << run;
    }
  }
  if (sealed) {
    EXPECT_EQ(scans_failed, corrupt);
  }
  std::printf(
      "[ figures  ] %s segment: %zu lookups answered, %zu reported Corruption; "
      "%zu one-run scans failed\n",
      sealed ? "sealed" : "open", ok, corrupt.size(), scans_failed.size());
  EXPECT_GT(corrupt.size(), 0u);
  // A block of 2 KiB holds at most about a hundred of these records.
  if (sealed) {
    EXPECT_LE(corrupt.size(), 128u);
  } else {
    EXPECT_GT(corrupt.size(), 128u);
    ASSERT_OK(w->Close());
  }
}

INSTANTIATE_TEST_SUITE_P(SealedOrOpen, PointLookupDamageTest, ::testing::Bool());

// The order of a series' blocks by min key is sorted on a 64-bit prefix of
// each key first (snapshot.cc, SortByMinKey): it must be the order of the
// keys themselves, for integer and string runs, strings that share their
// first 8 bytes or differ only past them, embedded NULs, bytes >= 0x80 and
// the empty string, with ties broken by step. Seed printed.
TEST(SortByMinKeyTest, OrdersAsTheKeysDo) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<RunId> runs = {RunId(int64_t{0}),
                             RunId(INT64_MIN),
                             RunId(INT64_MAX),
                             RunId(int64_t{-1}),
                             RunId(int64_t{1}),
                             RunId(std::string()),
                             RunId(std::string("a")),
                             RunId(std::string("a\0", 2)),
                             RunId(std::string("a\0b", 3)),
                             RunId(std::string("abcdefgh")),
                             RunId(std::string("abcdefghi")),
                             RunId(std::string("abcdefgh\x01")),
                             RunId(std::string("abcdefgh\0")),
                             RunId(std::string("\xff")),
                             RunId(std::string("\x80"
                                               "abc")),
                             RunId(std::string("\x7f"))};
  for (int i = 0; i < 200; ++i) runs.emplace_back(HashedId(i));
  for (int i = 0; i < 50; ++i)
    runs.emplace_back(HashedId(i).substr(0, 8) + "tail" + std::to_string(i));
  for (int i = 0; i < 50; ++i) runs.emplace_back(static_cast<int64_t>(rng()));
  std::vector<format::BlockHeader> headers;
  for (int i = 0; i < 3000; ++i) {
    format::BlockHeader h;
    h.min_key = format::Key{runs[rng() % runs.size()], static_cast<int64_t>(rng() % 5) - 2};
    headers.push_back(std::move(h));
  }
  std::vector<SnapshotImpl::BlockRef> blocks;
  for (uint32_t i = 0; i < headers.size(); ++i) {
    blocks.push_back(SnapshotImpl::BlockRef{nullptr, i, {}, &headers[i]});
  }
  std::vector<uint32_t> order(blocks.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  SnapshotImpl::SortByMinKey(blocks, &order);
  std::vector<format::Key> want;
  for (const auto& h : headers) want.push_back(h.min_key);
  std::sort(want.begin(), want.end());
  ASSERT_EQ(order.size(), want.size());
  std::vector<bool> seen(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_FALSE(seen[order[i]]) << "block " << order[i] << " twice";
    seen[order[i]] = true;
    ASSERT_EQ(headers[order[i]].min_key, want[i]) << "position " << i << ", seed " << seed;
  }
}

}  // namespace
}  // namespace runstore::read
