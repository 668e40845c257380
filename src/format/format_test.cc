#include "format/format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/block.h"
#include "format/block_reader.h"
#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "runstore/store.h"
#include "testing/crafted_segment.h"
#include "testing/test_util.h"
#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {
namespace {

using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;

TEST(FormatTest, SegmentFileNamesSortInWritingOrder) {
  EXPECT_EQ(SegmentFileName("w1", 3), "w1-00000003.rss");
  std::string id;
  uint64_t seq;
  ASSERT_TRUE(ParseSegmentFileName("node-7-abc-00000042.rss", &id, &seq));
  EXPECT_EQ(id, "node-7-abc");
  EXPECT_EQ(seq, 42u);
  EXPECT_FALSE(ParseSegmentFileName("w1-3.rss", &id, &seq));
  EXPECT_FALSE(ParseSegmentFileName("w1-00000003.rss.tmp", &id, &seq));
  EXPECT_FALSE(ParseSegmentFileName("-00000003.rss", &id, &seq));
}

TEST(FormatTest, StoreMarkerIsParsedStrictly) {
  uint32_t v = 0;
  ASSERT_OK(DecodeStoreMarker(EncodeStoreMarker(3), "RUNSTORE", &v));
  EXPECT_EQ(v, 3u);
  ASSERT_OK(DecodeStoreMarker("runstore store\nformat_version 2\nlater lines are ignored\n",
                              "RUNSTORE", &v));
  EXPECT_EQ(v, 2u);
  EXPECT_THAT(DecodeStoreMarker("runstore store\nformat_version 5\n", "RUNSTORE", &v),
              StatusIsWith(StatusCode::kNotSupported, "reads versions 1 to 4"));
  for (const char* bad :
       {"runstore store\nformat_version 1x\n", "runstore store\nformat_version \n",
        "runstore store\nformat_version 99999999999999999999\n",
        "runstore store\nformat_version -1\n", "runstore store\n", "hello"}) {
    EXPECT_THAT(DecodeStoreMarker(bad, "RUNSTORE", &v), StatusIs(StatusCode::kCorruption)) << bad;
  }
  // Bytes that are not text are shown escaped, so that any message prints.
  const Status s =
      DecodeStoreMarker(std::string("runstore store\nformat_version \xff\x01", 32), "RUNSTORE", &v);
  EXPECT_THAT(s, StatusIsWith(StatusCode::kCorruption, "'\\xff\\x01'"));
}

TEST(FormatTest, SegmentHeaderRoundTripAndNewerVersionIsNotSupported) {
  SegmentHeader h{1, 123456789, 7, "writer"};
  std::string b = EncodeSegmentHeader(h);
  ASSERT_EQ(b.size(), kSegmentHeaderSize);
  SegmentHeader d;
  ASSERT_OK(DecodeSegmentHeader(b, "f", &d));
  EXPECT_EQ(d.writer_id, "writer");
  EXPECT_EQ(d.sequence, 7u);
  h.version = 2;  // files of earlier versions and of this build's all read
  ASSERT_OK(DecodeSegmentHeader(EncodeSegmentHeader(h), "f", &d));
  h.version = 3;
  ASSERT_OK(DecodeSegmentHeader(EncodeSegmentHeader(h), "f", &d));
  h.version = 4;
  ASSERT_OK(DecodeSegmentHeader(EncodeSegmentHeader(h), "f", &d));
  h.version = 5;
  EXPECT_THAT(DecodeSegmentHeader(EncodeSegmentHeader(h), "f.rss", &d),
              StatusIsWith(StatusCode::kNotSupported, "this build reads versions 1 to 4"));
  b[50] ^= 1;
  EXPECT_THAT(DecodeSegmentHeader(b, "f.rss", &d),
              StatusIsWith(StatusCode::kCorruption, "f.rss: offset 0"));
  EXPECT_THAT(DecodeSegmentHeader("hello", "f.rss", &d), StatusIs(StatusCode::kCorruption));
}

TEST(FormatTest, BlockHeaderRoundTripWithStringKeys) {
  BlockHeader h;
  h.payload_len = h.raw_len = 1000;
  h.payload_checksum = 99;
  h.count = 5;
  h.dtype = DType::kInt16;
  h.dims = {3, 4};
  h.name = "qi/3_17";
  h.run_encoding = RunEncoding::kMixed;
  h.flags = kBlockKeysAscending;
  h.min_step = -5;
  h.max_step = 9;
  h.min_key = Key{RunId(int64_t{-3}), 4};
  h.max_key = Key{RunId("zeta"), 9};
  std::string e = EncodeBlockHeader(h);
  EXPECT_EQ(e.size() % 8, 0u);
  FramePrefix p;
  ASSERT_OK(CheckFrameHeader(e, &p));
  EXPECT_EQ(p.kind, FrameKind::kBlock);
  BlockHeader d;
  ASSERT_OK(DecodeBlockHeader(e, &d));
  EXPECT_EQ(d.name, h.name);
  EXPECT_EQ(d.dims, h.dims);
  EXPECT_EQ(d.min_key, h.min_key);
  EXPECT_EQ(d.max_key, h.max_key);
  EXPECT_EQ(d.run_encoding, RunEncoding::kMixed);
  for (size_t i = 0; i < e.size(); ++i) {
    std::string bad = e;
    bad[i] ^= 0x20;
    EXPECT_FALSE(CheckFrameHeader(bad, &p).ok()) << "flip at " << i;
  }
}

// A block's header keys (min, max, ascending) against the keys themselves,
// for string runs that mostly repeat the last run at a later step (a
// per-run writer, the builder's fast path), and now and then go back a step,
// change run or switch to an integer run.
TEST(FormatTest, BlockKeyBoundsMatchTheKeysForRepeatedStringRuns) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const std::vector<std::string> runs = {"e3f1c2a9b4d5e6f70", "e0", "run-with-a-long-name-x", "z"};
  for (int trial = 0; trial < 200; ++trial) {
    BlockBuilder b(BlockSchema{"x", DType::kFloat64});
    std::vector<Key> keys;
    size_t run = rng() % runs.size();
    int64_t step = static_cast<int64_t>(rng() % 10);
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng() % 20;
      if (r == 0) run = rng() % runs.size();
      if (r == 1) step -= static_cast<int64_t>(rng() % 5);  // back, or the same step
      step += r == 1 ? 0 : 1 + static_cast<int64_t>(rng() % 3);
      const bool int_run = r == 2;
      const double v = i;
      if (int_run) {
        b.Add(RunRef(int64_t{7}), step, ValueRef::Scalar(v));
        keys.push_back(Key{RunId(int64_t{7}), step});
      } else {
        b.Add(RunRef(runs[run]), step, ValueRef::Scalar(v));
        keys.push_back(Key{RunId(runs[run]), step});
      }
    }
    BlockHeader h;
    std::vector<std::string_view> pieces;
    b.Finish(&h, &pieces);
    bool ascending = true;
    for (size_t i = 1; i < keys.size(); ++i) ascending &= keys[i - 1] < keys[i];
    EXPECT_EQ(h.min_key, *std::min_element(keys.begin(), keys.end())) << "trial " << trial;
    EXPECT_EQ(h.max_key, *std::max_element(keys.begin(), keys.end())) << "trial " << trial;
    EXPECT_EQ((h.flags & kBlockKeysAscending) != 0, ascending) << "trial " << trial;
  }
}

TEST(FormatTest, BlockPayloadColumnsAreAlignedAndParse) {
  BlockBuilder b(BlockSchema{"s", DType::kString});
  b.Add(RunRef(int64_t{5}), 0, ValueRef::String("a"));
  b.Add(RunRef("x"), 1, ValueRef::String("hello"));
  b.Add(RunRef(int64_t{6}), 3, ValueRef::String(""));  // steps 0, 1, 3: stored plainly
  BlockHeader h;
  std::vector<std::string_view> pieces;
  b.Finish(&h, &pieces);
  EXPECT_EQ(h.run_encoding, RunEncoding::kMixed);
  EXPECT_FALSE(h.flags & kBlockKeysAscending);  // int 6 after string "x"
  std::string raw;
  for (auto piece : pieces) raw += piece;
  ASSERT_EQ(raw.size(), h.raw_len);
  BlockView v;
  ASSERT_OK(v.Parse(h, raw));
  EXPECT_EQ(v.count(), 3u);
  EXPECT_TRUE(v.run_is_string(1));
  EXPECT_EQ(v.run_string(1), "x");
  EXPECT_EQ(v.run_int(2), 6);
  EXPECT_EQ(v.value_bytes(1), "hello");
  EXPECT_EQ(v.value_bytes(2), "");
  EXPECT_EQ((v.steps_data() - raw.data()) % 64, 0);
  EXPECT_EQ(h.min_key, (Key{RunId(int64_t{5}), 0}));
  EXPECT_EQ(h.max_key, (Key{RunId("x"), 1}));
  // A payload one byte short or long is refused.
  EXPECT_THAT(v.Parse(h, std::string_view(raw).substr(0, raw.size() - 1)),
              StatusIs(StatusCode::kCorruption));
}

// Key columns that are a few arithmetic sequences -- a sweep's runs 0, 1, 2,
// ...; step 0 everywhere; runs that each log steps 0, 1, 2, ... -- are stored
// as those sequences (format version 2), in wrapping arithmetic; anything
// else, and columns too short to gain half their bytes, plainly.
TEST(FormatTest, KeyColumnsThatAreSequencesAreStoredAsSequences) {
  struct Case {
    const char* what;
    std::vector<int64_t> runs, steps;
    uint64_t run_sequences, step_sequences;  // 0: stored plainly
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  std::mt19937_64 rng(7);
  auto make = [](size_t n, auto f) {
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = f(static_cast<int64_t>(i));
    return v;
  };
  std::vector<Case> cases = {
      {"a sweep", make(1000, [](int64_t i) { return 10 + i; }),
       make(1000, [](int64_t) { return 0; }), 1, 1},
      {"one run's steps", make(1000, [](int64_t) { return 7; }),
       make(1000, [](int64_t i) { return 1000 - i; }), 1, 1},
      {"4 runs of 1,024 steps", make(4096, [](int64_t i) { return i / 1024; }),
       make(4096, [](int64_t i) { return i % 1024; }), 4, 4},
      {"wrapping",
       make(100,
            [](int64_t i) {
              return static_cast<int64_t>(static_cast<uint64_t>(kMax - 50) +
                                          static_cast<uint64_t>(i));
            }),
       make(100, [](int64_t i) { return kMin + 3 * i; }), 1, 1},
      {"no pattern", make(1000, [&](int64_t) { return static_cast<int64_t>(rng() % 5000); }),
       make(1000, [&](int64_t) { return static_cast<int64_t>(rng() % 100); }), 0, 0},
      {"too short", {4, 5, 6}, {0, 0, 0}, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    BlockBuilder b(BlockSchema{"x", DType::kInt32});
    for (size_t i = 0; i < c.runs.size(); ++i) {
      const auto v = static_cast<int32_t>(i);
      b.Add(RunRef(c.runs[i]), c.steps[i], ValueRef::Scalar(v));
    }
    BlockHeader h;
    std::vector<std::string_view> pieces;
    const size_t memory = b.memory_bytes();
    b.Finish(&h, &pieces);
    // The encoded sequences count in the builder's memory (the writer's bound).
    EXPECT_GE(b.memory_bytes(), memory + (c.run_sequences > 0 ? 8 + 24 * c.run_sequences : 0) +
                                    (c.step_sequences > 0 ? 8 + 24 * c.step_sequences : 0));
    EXPECT_EQ((h.flags & kBlockRunSequences) != 0, c.run_sequences > 0);
    EXPECT_EQ((h.flags & kBlockStepSequences) != 0, c.step_sequences > 0);
    std::string raw;
    for (auto piece : pieces) raw += piece;
    ASSERT_EQ(raw.size(), h.raw_len);
    if (c.run_sequences > 0) {
      EXPECT_EQ(DecodeFixed<uint64_t>(raw.data()), c.run_sequences);
    }
    // The header round trip keeps the flags; the payload parses back.
    h.payload_len = h.raw_len;
    BlockHeader back;
    ASSERT_OK(DecodeBlockHeader(EncodeBlockHeader(h), &back));
    EXPECT_EQ(back.flags, h.flags);
    BlockView v;
    ASSERT_OK(v.Parse(back, raw));
    EXPECT_EQ(v.int_runs_data() == nullptr, c.run_sequences > 0);
    EXPECT_EQ(v.steps_data() == nullptr, c.step_sequences > 0);
    std::vector<int64_t> runs(v.count()), steps(v.count());
    v.CopyIntRuns(runs.data());
    v.CopySteps(steps.data());
    EXPECT_EQ(runs, c.runs);
    EXPECT_EQ(steps, c.steps);
    for (uint32_t i = 0; i < v.count(); ++i) {
      ASSERT_EQ(v.run_int(i), c.runs[i]) << i;
      ASSERT_EQ(v.step(i), c.steps[i]) << i;
    }
  }
}

// FindLast (a point lookup in a block whose keys do not ascend) finds what a
// walk over every record finds: the last record of the key, or none, with the
// steps stored plainly or as sequences (constant, rising, falling, wrapping
// around as int64 within one sequence), runs of integers, strings or both, a
// key written twice.
TEST(FormatTest, FindLastFindsTheLastRecordOfAKeyAsAWalkDoes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  using Keys = std::vector<std::pair<RunId, int64_t>>;
  std::mt19937_64 rng(11);
  auto keys = [](size_t n, auto f) {
    Keys k;
    for (size_t i = 0; i < n; ++i) k.push_back(f(static_cast<int64_t>(i)));
    return k;
  };
  const std::vector<std::pair<const char*, Keys>> cases = {
      {"100 runs interleaved",
       keys(20000, [](int64_t i) { return std::make_pair(RunId(i % 100), i / 100); })},
      {"written twice",
       keys(3000, [](int64_t i) { return std::make_pair(RunId(i % 7), (i % 1500) / 7); })},
      {"falling steps",
       keys(4000,
            [](int64_t i) { return std::make_pair(RunId(i / 1000), 5000 - 3 * (i % 1000)); })},
      {"steps wrapping within a sequence",
       keys(200,
            [](int64_t i) {
              return std::make_pair(RunId(i % 2),
                                    static_cast<int64_t>(static_cast<uint64_t>(kMax - 99) +
                                                         static_cast<uint64_t>(i)));
            })},
      {"steps of a wide stride",
       keys(300,
            [](int64_t i) {
              return std::make_pair(RunId(int64_t{3}),
                                    static_cast<int64_t>(static_cast<uint64_t>(kMin) +
                                                         static_cast<uint64_t>(i) * (1ull << 62)));
            })},
      {"string runs", keys(2000,
                           [](int64_t i) {
                             return std::make_pair(RunId("exp-" + std::to_string(i % 13)), i / 13);
                           })},
      {"mixed runs", keys(2000,
                          [](int64_t i) {
                            return std::make_pair(
                                i % 2 ? RunId("r" + std::to_string(i % 5)) : RunId(i % 5), i / 10);
                          })},
      {"no pattern", keys(3000,
                          [&](int64_t) {
                            return std::make_pair(RunId(static_cast<int64_t>(rng() % 20)),
                                                  static_cast<int64_t>(rng() % 50));
                          })},
  };
  for (const auto& [what, ks] : cases) {
    SCOPED_TRACE(what);
    BlockBuilder b(BlockSchema{"x", DType::kInt64});
    std::vector<int64_t> values(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      values[i] = static_cast<int64_t>(i);
      b.Add(RunRef(ks[i].first), ks[i].second, ValueRef::Scalar(values[i]));
    }
    BlockHeader h;
    std::vector<std::string_view> pieces;
    b.Finish(&h, &pieces);
    std::string raw;
    for (auto piece : pieces) raw += piece;
    h.payload_len = h.raw_len;
    BlockView v;
    ASSERT_OK(v.Parse(h, raw));
    auto walk = [&](const RunId& run, int64_t step) -> int64_t {
      for (size_t i = ks.size(); i-- > 0;) {
        if (ks[i].first == run && ks[i].second == step) return static_cast<int64_t>(i);
      }
      return -1;
    };
    // Every key written, and keys next to them that may not be.
    size_t probes = 0;
    for (size_t i = 0; i < ks.size(); i += 1 + i % 3) {
      const auto& [run, step] = ks[i];
      for (int64_t d : {int64_t{0}, int64_t{1}, int64_t{-1}}) {
        const int64_t at = static_cast<int64_t>(static_cast<uint64_t>(step) + d);
        ASSERT_EQ(v.FindLast(RunRef(run), at), walk(run, at)) << run.ToString() << " " << at;
        ++probes;
      }
    }
    EXPECT_EQ(v.FindLast(RunRef(int64_t{-12345}), 0), -1);
    EXPECT_EQ(v.FindLast(RunRef("absent"), ks[0].second), -1);
    EXPECT_GT(probes, ks.size() / 2);
  }
}

// A sequence column whose ends do not ascend to the record count is corrupt,
// not read past.
TEST(FormatTest, SequenceColumnsWithBadEndsAreRefused) {
  BlockBuilder b(BlockSchema{"x", DType::kFloat64});
  const double one = 1.0;
  for (int64_t i = 0; i < 100; ++i) b.Add(RunRef(i / 10), i % 10, ValueRef::Scalar(one));
  BlockHeader h;
  std::vector<std::string_view> pieces;
  b.Finish(&h, &pieces);
  ASSERT_TRUE(h.flags & kBlockRunSequences);
  std::string raw;
  for (auto piece : pieces) raw += piece;
  BlockView v;
  ASSERT_OK(v.Parse(h, raw));
  const uint64_t count = DecodeFixed<uint64_t>(raw.data());
  ASSERT_EQ(count, 10u);
  for (const uint64_t bad : {uint64_t{0}, uint64_t{11}, uint64_t{1} << 40}) {
    std::string r = raw;
    EncodeFixed<uint64_t>(r.data(), bad);  // the count
    EXPECT_THAT(v.Parse(h, r), StatusIsWith(StatusCode::kCorruption, "run column")) << bad;
  }
  for (const uint64_t end : {uint64_t{0}, uint64_t{30}, uint64_t{101}}) {
    std::string r = raw;
    EncodeFixed<uint64_t>(r.data() + 8 + 24, end);  // the second sequence's end (20)
    EXPECT_THAT(v.Parse(h, r), StatusIsWith(StatusCode::kCorruption, "run column")) << end;
  }
}

// The worked example of docs/format.md, byte for byte.
TEST(FormatTest, WorkedExampleOfTheSpec) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK(env->CreateDir("/s"));
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s/store", {.env = env.get()}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "demo"}));
  ASSERT_OK(w->Append(7, "loss", 0, 0.5));
  ASSERT_OK(w->Commit());
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(std::string f,
                       ReadFileToString(env.get(), "/s/store/segments/demo-00000001.rss"));
  ASSERT_EQ(f.size(), 864u);
  EXPECT_EQ(f.substr(0, 8), std::string("\x89RUNS\r\n\x1a", 8));
  EXPECT_EQ(DecodeFixed<uint16_t>(f.data() + 128 + 6), 112);    // block header_len
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 128 + 8), 136u);   // payload_len
  EXPECT_EQ(DecodeFixed<int64_t>(f.data() + 256), 7);           // run column
  EXPECT_EQ(DecodeFixed<int64_t>(f.data() + 320), 0);           // step column
  EXPECT_EQ(DecodeFixed<double>(f.data() + 384), 0.5);          // value column
  EXPECT_EQ(static_cast<uint8_t>(f[448 + 4]), 2);               // commit record
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 448 + 40), 128u);  // first_frame_offset
  EXPECT_EQ(static_cast<uint8_t>(f[576 + 4]), 3);               // footer
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 576 + 8), 192u);   // footer payload_len
  EXPECT_EQ(DecodeFixed<uint32_t>(f.data() + 640 + 152), 5u);   // shared run index section
  EXPECT_EQ(DecodeFixed<uint32_t>(f.data() + 640 + 156), 1u);   // optional
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 640 + 168), 1u);   // of one block
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 640 + 176), 0u);   // no lists
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 640 + 184), 0u);   // unlisted: integer runs
  EXPECT_EQ(f.substr(832 + 16, 8), "RSSEALED");
  EXPECT_EQ(DecodeFixed<uint64_t>(f.data() + 832), 576u);
}

// A new segment "/seg.rss" on an in-memory env, and one block of ten float64
// records to add to it any number of times.
struct TestSegment {
  TestSegment() {
    for (int i = 0; i < 10; ++i) {
      const double v = 1.0 * i;
      b.Add(RunRef(int64_t{i}), 0, ValueRef::Scalar(v));
    }
    b.Finish(&h, &pieces);
    b.RunHashes(&hashes);
    auto w = SegmentWriter::Create(env.get(), "/seg.rss", SegmentHeader{1, 1, 1, "w"});
    EXPECT_OK(w.status());
    if (w.ok()) sw = std::move(w).value();
  }
  Status AddBlock() { return sw->AddBlock(&h, pieces, hashes, 3); }

  std::unique_ptr<Env> env = NewMemEnv();
  BlockBuilder b{BlockSchema{"x", DType::kFloat64}};
  BlockHeader h;
  std::vector<std::string_view> pieces;
  std::vector<uint64_t> hashes;
  std::unique_ptr<SegmentWriter> sw;
};

TEST(FormatTest, CommitRecordIsOnlyAcceptedWithItsOwnFrames) {
  TestSegment t;
  ASSERT_NE(t.sw, nullptr);
  auto& env = t.env;
  auto& sw = t.sw;
  ASSERT_OK(t.AddBlock());
  ASSERT_OK(sw->Commit(100));
  ASSERT_OK(t.AddBlock());
  ASSERT_OK(sw->Commit(200));
  ASSERT_OK_AND_ASSIGN(auto file, env->NewRandomAccessFile("/seg.rss"));
  SegmentIndex idx;
  ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &idx));
  EXPECT_FALSE(idx.sealed);
  EXPECT_EQ(idx.commits.size(), 2u);
  EXPECT_EQ(idx.blocks.size(), 2u);
  ASSERT_OK(sw->Seal());
  ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &idx));
  EXPECT_TRUE(idx.sealed);
  EXPECT_EQ(idx.commits.size(), 2u);
  EXPECT_EQ(idx.blocks[1].commit_index, 1u);
}

// Every reader holds the key range of every block of the store: a run id of
// up to 22 bytes (a hashed experiment id is 17) is held inline, longer ones on
// the heap, and the order and equality are RunId's whatever the mix.
TEST(FormatTest, StoredRunsOrderAsRunIdsAndHoldShortIdsInline) {
  std::mt19937_64 rng(20261206);
  std::vector<RunId> ids = {int64_t{0}, std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), std::string(),
                            "e11ff614af94fe743"};
  for (int i = 0; i < 300; ++i) {
    if (rng() % 3 == 0) {
      ids.emplace_back(static_cast<int64_t>(rng() % 7) - 3);
      continue;
    }
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>("ab\x7f\xc3\xa9z"[rng() % 6]);
    ids.emplace_back(std::move(s));
  }
  std::vector<StoredRun> stored(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(stored[i].ToRunId(), ids[i]);
    EXPECT_EQ(stored[i].is_inline(), ids[i].is_int() || ids[i].string_value().size() <= 22) << i;
    for (size_t j = 0; j < ids.size(); ++j) {
      ASSERT_EQ(stored[i] <=> stored[j], ids[i] <=> ids[j]) << i << " " << j;
      ASSERT_EQ(stored[i] == stored[j], ids[i] == ids[j]) << i << " " << j;
    }
  }
  // Copies, moves and self-assignment, of heap strings too.
  const std::string long_id(200, 'q');
  StoredRun a(long_id), b(int64_t{5});
  b = a;
  EXPECT_EQ(b.string_value(), long_id);
  StoredRun& alias = b;
  b = alias;
  EXPECT_EQ(b.string_value(), long_id);
  b = RunRef(b);  // from a view of its own bytes
  EXPECT_EQ(b.string_value(), long_id);
  StoredRun c(std::move(a));
  EXPECT_EQ(c.string_value(), long_id);
  EXPECT_TRUE(a.is_int());  // NOLINT(bugprone-use-after-move): a moved-from run is 0
  c = StoredRun("short");
  EXPECT_TRUE(c.is_inline());
  EXPECT_EQ(RunRef(c).s, "short");
  EXPECT_EQ(sizeof(Key), 32u);
}

// The blocks of one segment share one string per series name, read from the
// footer or recovered, and a refresh's new blocks share the earlier ones'.
TEST(FormatTest, BlocksOfASegmentShareTheirSeriesName) {
  TestSegment t;
  ASSERT_NE(t.sw, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(t.AddBlock());
    ASSERT_OK(t.sw->Commit(100 + i));
  }
  ASSERT_OK_AND_ASSIGN(auto file, t.env->NewRandomAccessFile("/seg.rss"));
  SegmentIndex idx;
  ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &idx));
  ASSERT_EQ(idx.blocks.size(), 3u);
  for (const BlockInfo& b : idx.blocks) {
    EXPECT_EQ(&b.header.name.str(), &idx.blocks[0].header.name.str());
    EXPECT_EQ(b.header.name, "x");
  }
  ASSERT_OK(t.AddBlock());
  ASSERT_OK(t.sw->Commit(200));
  ASSERT_OK(RefreshSegmentIndex(*file, "seg.rss", &idx));
  ASSERT_EQ(idx.blocks.size(), 4u);
  EXPECT_EQ(&idx.blocks[3].header.name.str(), &idx.blocks[0].header.name.str());
  ASSERT_OK(t.sw->Seal());
  SegmentIndex sealed;
  ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &sealed));
  ASSERT_TRUE(sealed.sealed);
  ASSERT_EQ(sealed.blocks.size(), 4u);
  for (const BlockInfo& b : sealed.blocks) {
    EXPECT_EQ(&b.header.name.str(), &sealed.blocks[0].header.name.str());
  }
}

// A large value's data checksummed in chunks of several sizes a reader may
// meet, with a last chunk that is shorter: checked whole (from memory, and by
// reading the file in pieces, which chunks of more than a piece span) and
// chunk by chunk, intact and with one damaged byte.
TEST(FormatTest, ValueChunksOfEverySizeCheckWholeAndOneByOne) {
  const int64_t n = (int64_t{3} << 17) + 3;  // 3 MiB + 24 bytes of float64
  std::vector<double> a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = 0.25 * static_cast<double>(i);
  const std::vector<int64_t> shape{n};
  const uint64_t bytes = a.size() * 8;
  for (const uint8_t shift : {kMinChunkShift, uint8_t{16}, uint8_t{20}, uint8_t{22}}) {
    SCOPED_TRACE(static_cast<int>(shift));
    std::unique_ptr<Env> env = NewMemEnv();
    BlockBuilder b{BlockSchema{"x", DType::kFloat64, false, {n}}};
    b.AddBorrowed(RunRef(int64_t{4}), 0, ValueRef::Array<double>(a.data(), shape));
    BlockHeader h;
    std::vector<std::string_view> pieces;
    b.Finish(&h, &pieces);
    {
      ASSERT_OK_AND_ASSIGN(
          auto sw, SegmentWriter::Create(env.get(), "/seg.rss", SegmentHeader{3, 1, 1, "w"}));
      const uint64_t run_hash = RunHash(RunRef(int64_t{4}));
      ASSERT_OK(sw->AddBlock(&h, pieces, {&run_hash, 1}, 3, /*header_last=*/true, shift));
      ASSERT_OK(sw->Commit(100));
      ASSERT_OK(sw->Seal());
    }
    ASSERT_OK_AND_ASSIGN(std::string f, ReadFileToString(env.get(), "/seg.rss"));
    ASSERT_OK_AND_ASSIGN(auto file, env->NewRandomAccessFile("/seg.rss"));
    SegmentIndex idx;
    ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &idx));
    ASSERT_EQ(idx.blocks.size(), 1u);
    const BlockInfo& info = idx.blocks[0];
    EXPECT_EQ(info.header.flags & kBlockValueChunks, kBlockValueChunks);
    EXPECT_EQ(info.header.chunk_shift, shift);
    auto payload = [&] {
      return std::string_view(f).substr(info.payload_offset, info.header.payload_len);
    };
    BlockView view;
    ASSERT_OK(view.Parse(info.header, payload()));
    const ValueChunks& c = *view.value_chunks();
    EXPECT_EQ(c.data_len, bytes);
    EXPECT_EQ(c.count, (bytes + (uint64_t{1} << shift) - 1) >> shift);
    EXPECT_EQ(std::memcmp(payload().data() + c.data_offset, a.data(), bytes), 0);
    EXPECT_OK(CheckPayload(payload(), info, "seg.rss"));
    EXPECT_OK(CheckPayloadByReading(*file, payload(), info, "seg.rss"));
    EXPECT_OK(CheckPayloadOutsideValue(payload(), info, "seg.rss", &view));
    EXPECT_OK(CheckValueChunks(payload(), view, 0, c.count, info, "seg.rss"));
    // Damage to the last byte of the value: its chunk, the last, and only it.
    const uint64_t at = info.payload_offset + c.data_offset + bytes - 1;
    f[at] = static_cast<char>(f[at] ^ 1);
    ASSERT_OK(env->RemoveFile("/seg.rss"));
    {
      ASSERT_OK_AND_ASSIGN(auto out, env->NewWritableFile("/seg.rss", true));
      ASSERT_OK(out->Append(f));
      ASSERT_OK(out->Close());
    }
    ASSERT_OK_AND_ASSIGN(file, env->NewRandomAccessFile("/seg.rss"));
    const std::string last =
        "seg.rss: offset " +
        std::to_string(info.payload_offset + c.data_offset + c.begin(c.count - 1)) +
        ": value chunk " + std::to_string(c.count - 1) + " of " + std::to_string(c.count) +
        " checksum mismatch (series 'x')";
    EXPECT_THAT(CheckPayload(payload(), info, "seg.rss"),
                StatusIsWith(StatusCode::kCorruption, last));
    EXPECT_THAT(CheckPayloadByReading(*file, payload(), info, "seg.rss"),
                StatusIsWith(StatusCode::kCorruption, last));
    EXPECT_OK(CheckPayloadOutsideValue(payload(), info, "seg.rss", &view));
    EXPECT_OK(CheckValueChunks(payload(), view, 0, c.count - 1, info, "seg.rss"));
    EXPECT_THAT(CheckValueChunks(payload(), view, c.count - 1, c.count, info, "seg.rss"),
                StatusIsWith(StatusCode::kCorruption, last));
  }
}

// Writer::Flush writes commit records without syncing: after a power cut any
// of them may be on disk while frames before them are not. Recovery checks
// every payload from the newest record that proves what precedes it synced
// (docs/format.md "Recovery", rules 6 and 7).
TEST(FormatTest, FlushedCommitsAreTornTailsUntilARecordProvesThemSynced) {
  TestSegment t;
  ASSERT_NE(t.sw, nullptr);
  auto& env = t.env;
  auto& sw = t.sw;
  // Commit 1 synced; 2, 3 and 4 flushed; 5 synced (making 2..4 durable); 6.
  const bool synced[] = {true, false, false, false, true, true};
  for (int c = 0; c < 6; ++c) {
    ASSERT_OK(t.AddBlock());
    ASSERT_OK(sw->Commit(100 * (c + 1), synced[c]));
  }
  ASSERT_OK_AND_ASSIGN(std::string clean, ReadFileToString(env.get(), "/seg.rss"));
  ASSERT_OK_AND_ASSIGN(auto file, env->NewRandomAccessFile("/seg.rss"));
  SegmentIndex idx;
  ASSERT_OK(LoadSegmentIndex(*file, "seg.rss", &idx));
  ASSERT_EQ(idx.commits.size(), 6u);
  ASSERT_EQ(idx.blocks.size(), 6u);
  // Set when the frames before the record's own were not all synced: after
  // a flush (commits 3, 4 and 5), not after a sync (2, and 6).
  const bool unsynced_before[] = {false, false, true, true, true, false};
  for (size_t c = 0; c < 6; ++c) EXPECT_EQ(idx.commits[c].unsynced_before, unsynced_before[c]);

  // Recovers `bytes` as a segment of its own, cut after commit `keep` (all
  // if 0), with the byte at `damage` flipped.
  auto recover = [&](size_t keep, uint64_t damage, SegmentIndex* out) {
    std::string bytes = clean.substr(0, keep ? idx.commits[keep - 1].end_offset : clean.size());
    bytes[damage] ^= 0x5a;
    const std::string path = "/damaged-" + std::to_string(keep) + "-" + std::to_string(damage);
    auto f = env->NewWritableFile(path, true);
    if (!f.ok()) return f.status();
    RUNSTORE_RETURN_IF_ERROR((*f)->Append(bytes));
    RUNSTORE_RETURN_IF_ERROR((*f)->Close());
    auto r = env->NewRandomAccessFile(path);
    if (!r.ok()) return r.status();
    return LoadSegmentIndex(**r, path, out);
  };
  auto payload = [&](size_t c) { return idx.blocks[c].payload_offset + 3; };
  auto frame = [&](size_t c) { return idx.blocks[c].frame_offset + 9; };
  SegmentIndex got;

  // The file as a power cut after commit 4 may leave it: the payload of
  // flush 3 torn while record 4 reached the disk. Flushes 3 and 4 are gone,
  // 1 and 2 are there.
  ASSERT_OK(recover(4, payload(2), &got));
  EXPECT_EQ(got.commits.size(), 2u);
  EXPECT_EQ(got.blocks.size(), 2u);
  // The payload of flush 2, the first after a sync: it is checked too.
  ASSERT_OK(recover(4, payload(1), &got));
  EXPECT_EQ(got.commits.size(), 1u);
  // A torn frame header of flush 3, records 3 and 4 behind it: a torn tail
  // (their records prove nothing synced), not corruption.
  ASSERT_OK(recover(4, frame(2), &got));
  EXPECT_EQ(got.commits.size(), 2u);
  // Commit 5 was synced; record 6 says so. Damage before commit 5's frames
  // is then damage of durable data, reported with the record that proves it.
  EXPECT_THAT(recover(0 + 6, frame(2), &got),
              StatusIsWith(StatusCode::kCorruption, "commit 6 at offset"));
  // Damage within commit 5's own frames is still its own torn write while
  // record 6 is not there.
  ASSERT_OK(recover(5, payload(4), &got));
  EXPECT_EQ(got.commits.size(), 4u);
}

// A block's records are checked against its header, whatever the columns'
// encoding: sequences (checked by stretches), plain, or mixed.
TEST(FormatTest, RecordsAreCheckedAgainstTheHeader) {
  for (int layout = 0; layout < 3; ++layout) {
    BlockBuilder b(BlockSchema{"x", DType::kFloat64, false, {}, Codec::kNone});
    for (int i = 0; i < 1000; ++i) {
      // 0: runs 0..9 of 100 steps each (both columns sequences); 1: keys
      // that fit no sequence (plain); 2: runs as sequences, steps plain.
      const int64_t run = layout == 1 ? (int64_t{i} * 2654435761) % 1000003 : i / 100;
      const int64_t step = layout == 0 ? i % 100 : (i * 31) % 97 + 1000 * i;
      const double v = double(i);
      b.Add(RunRef(run), step, ValueRef::Scalar(v));
    }
    BlockHeader h;
    std::vector<std::string_view> pieces;
    b.Finish(&h, &pieces);
    std::string raw;
    for (auto piece : pieces) raw.append(piece);
    h.payload_len = raw.size();
    EXPECT_EQ((h.flags & kBlockRunSequences) != 0, layout != 1) << "layout " << layout;
    EXPECT_EQ((h.flags & kBlockStepSequences) != 0, layout == 0) << "layout " << layout;
    BlockView v;
    ASSERT_OK(v.Parse(h, raw));
    EXPECT_OK(v.CheckRecords(h));
    BlockHeader lie = h;
    lie.max_step = h.max_step - 1;
    EXPECT_THAT(v.CheckRecords(lie), StatusIsWith(StatusCode::kCorruption, "outside"));
    lie = h;
    lie.min_key.step = h.min_key.step + 1;
    EXPECT_THAT(v.CheckRecords(lie), StatusIs(StatusCode::kCorruption)) << "layout " << layout;
    lie = h;
    lie.max_key = Key{RunId(h.max_key.run.int_value() - 1), h.max_key.step};
    EXPECT_THAT(v.CheckRecords(lie), StatusIs(StatusCode::kCorruption)) << "layout " << layout;
    if (!(h.flags & kBlockKeysAscending)) {
      lie = h;
      lie.flags |= kBlockKeysAscending;
      EXPECT_THAT(v.CheckRecords(lie), StatusIsWith(StatusCode::kCorruption, "ascending"));
    }
  }
}

// The footer's run index (version 4): what the writer writes (blocks of the
// same runs sharing one list), what earlier writers wrote (a list per
// block), and every way either section can be malformed, each a Corruption
// that names the file, with nothing allocated for a length the bytes cannot
// hold.
TEST(FormatTest, RunIndexSectionIsWrittenAndCheckedStrictly) {
  TestSegment t;
  ASSERT_NE(t.sw, nullptr);
  auto& env = t.env;
  ASSERT_OK(t.AddBlock());
  ASSERT_OK(t.sw->Commit(100));
  ASSERT_OK(t.AddBlock());
  ASSERT_OK(t.sw->Commit(200));
  ASSERT_OK(t.sw->Seal());
  ASSERT_OK_AND_ASSIGN(std::string clean, ReadFileToString(env.get(), "/seg.rss"));
  auto load = [&](const std::string& bytes, SegmentIndex* idx) -> Status {
    static int n = 0;
    const std::string path = "/ri-" + std::to_string(n++);
    RUNSTORE_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path, true));
    RUNSTORE_RETURN_IF_ERROR(f->Append(bytes));
    RUNSTORE_RETURN_IF_ERROR(f->Close());
    RUNSTORE_ASSIGN_OR_RETURN(auto r, env->NewRandomAccessFile(path));
    return LoadSegmentIndex(*r, "segments/w-00000001.rss", idx);
  };
  SegmentIndex idx;
  ASSERT_OK(load(clean, &idx));
  ASSERT_TRUE(idx.sealed);
  ASSERT_NE(idx.run_index, nullptr);
  std::vector<uint64_t> want;
  t.b.RunHashes(&want);
  ASSERT_EQ(want.size(), 10u);
  for (uint32_t b = 0; b < 2; ++b) {
    const auto got = idx.run_index->Of(b);
    EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.end()), want) << b;
  }
  // The two blocks hold the same runs: one list, held once.
  EXPECT_EQ(idx.run_index->list_count(), 1u);
  EXPECT_EQ(idx.run_index->Of(0).data(), idx.run_index->Of(1).data());
  // The hash of an integer run is of its little-endian bytes with seed 0.
  const int64_t seven = 7;
  EXPECT_EQ(RunHash(RunRef(seven)), XXH3_64bits_withSeed(&seven, 8, 0));
  EXPECT_EQ(RunHash(RunRef("e1")), XXH3_64bits_withSeed("e1", 2, 1));

  auto run_index = [](uint64_t blocks, const std::vector<uint64_t>& ends,
                      const std::vector<uint64_t>& hashes) {
    std::string b;
    PutFixed<uint64_t>(&b, blocks);
    for (uint64_t e : ends) PutFixed<uint64_t>(&b, e);
    for (uint64_t h : hashes) PutFixed<uint64_t>(&b, h);
    return EncodeFooterSection(kFooterSectionRunIndex, 0, b);
  };
  const std::vector<uint64_t> two = {want[0], want[1], want[2], want[3]};
  const std::string good = run_index(2, {2, 4}, two);
  // Well-formed variants read.
  ASSERT_OK(load(testing::WithFooterSections(clean, good), &idx));
  EXPECT_EQ(idx.run_index->Of(1).size(), 2u);
  // A block may be left unlisted (an empty list): readers read it.
  ASSERT_OK(load(testing::WithFooterSections(clean, run_index(2, {0, 4}, two)), &idx));
  EXPECT_EQ(idx.run_index->Of(0).size(), 0u);
  // A list per block, as earlier writers wrote it, is read into shared lists.
  ASSERT_OK(load(
      testing::WithFooterSections(clean, run_index(2, {2, 4}, {two[0], two[1], two[0], two[1]})),
      &idx));
  EXPECT_EQ(idx.run_index->list_count(), 1u);
  EXPECT_EQ(idx.run_index->Of(1).size(), 2u);
  EXPECT_EQ(idx.run_index->Of(0).data(), idx.run_index->Of(1).data());
  // The shared section: block_count, list_count, list_of, ends, hashes.
  auto shared = [](uint64_t blocks, const std::vector<uint64_t>& list_of,
                   const std::vector<uint64_t>& ends, const std::vector<uint64_t>& hashes,
                   uint32_t flags = kFooterSectionOptional) {
    std::string b;
    PutFixed<uint64_t>(&b, blocks);
    PutFixed<uint64_t>(&b, ends.size());
    for (uint64_t k : list_of) PutFixed<uint64_t>(&b, k);
    for (uint64_t e : ends) PutFixed<uint64_t>(&b, e);
    for (uint64_t h : hashes) PutFixed<uint64_t>(&b, h);
    return EncodeFooterSection(kFooterSectionSharedRunIndex, flags, b);
  };
  ASSERT_OK(load(testing::WithFooterSections(clean, shared(2, {1, 2}, {2, 4}, two)), &idx));
  EXPECT_EQ(idx.run_index->Of(1)[1], two[3]);
  ASSERT_OK(load(testing::WithFooterSections(clean, shared(2, {0, 1}, {1}, {two[2]}, 0)), &idx));
  EXPECT_TRUE(idx.run_index->Of(0).empty());
  EXPECT_EQ(idx.run_index->Of(1)[0], two[2]);
  // Each list ascends; the lists one after the other need not.
  ASSERT_OK(load(testing::WithFooterSections(
                     clean, shared(2, {1, 2}, {2, 4}, {two[2], two[3], two[0], two[1]})),
                 &idx));
  ASSERT_OK(
      load(testing::WithFooterSections(clean, ""), &idx));  // no run index: readers rebuild it
  EXPECT_EQ(idx.run_index, nullptr);
  ASSERT_OK(load(testing::WithFooterSections(
                     clean, good + EncodeFooterSection(99, kFooterSectionOptional, "later")),
                 &idx));
  ASSERT_OK(load(testing::WithFooterSections(
                     clean, good + EncodeFooterSection(kFooterSectionReplaces, 0, "abc")),
                 &idx));
  EXPECT_EQ(idx.footer_sections.at(kFooterSectionReplaces), "abc");

  std::string huge;  // a section header claiming 2^63 bytes
  PutFixed<uint32_t>(&huge, kFooterSectionRunIndex);
  PutFixed<uint32_t>(&huge, 0);
  PutFixed<uint64_t>(&huge, uint64_t{1} << 63);
  std::string huge_lists;  // two blocks and 2^40 lists claimed
  PutFixed<uint64_t>(&huge_lists, 2);
  PutFixed<uint64_t>(&huge_lists, uint64_t{1} << 40);
  PutFixed<uint64_t>(&huge_lists, 1);
  PutFixed<uint64_t>(&huge_lists, 1);
  huge_lists =
      EncodeFooterSection(kFooterSectionSharedRunIndex, kFooterSectionOptional, huge_lists);
  std::string bad_pad = good;
  bad_pad += EncodeFooterSection(99, kFooterSectionOptional, "abc");
  bad_pad[bad_pad.size() - 1] = 'x';
  const std::pair<std::string, std::string> cases[] = {
      {run_index(3, {2, 4, 4}, two), "different number of blocks"},
      {run_index(1 << 30, {}, {}), "different number of blocks"},
      {run_index(2, {3, 2}, two), "not ascending at block 1"},
      {run_index(2, {2, 5}, two), "bytes of hashes for 5 entries"},
      {run_index(2, {2, 3}, two), "bytes of hashes for 3 entries"},
      {run_index(2, {2, 4}, {two[1], two[0], two[2], two[3]}), "of block 0 are not ascending"},
      {run_index(2, {2, 4}, {two[0], two[1], two[2], two[2]}), "of block 1 are not ascending"},
      {good + good, "two run indexes"},
      {good + shared(2, {1, 1}, {2}, {two[0], two[1]}), "two run indexes"},
      {shared(3, {1, 1}, {2}, {two[0], two[1]}), "different number of blocks"},
      {shared(2, {1}, {}, {}), "shorter than its block and list tables"},
      {huge_lists, "shorter than its block and list tables"},
      {shared(2, {1, 3}, {2, 4}, two), "names list 3 for block 1 where at most list 2"},
      {shared(2, {2, 1}, {2, 4}, two), "names list 2 for block 0 where at most list 1"},
      {shared(2, {1, 1}, {2, 4}, two), "holds 2 lists and its blocks name 1"},
      {shared(2, {1, 2}, {2, 2}, two), "list 2 is empty"},
      {shared(2, {0, 1}, {0}, {}), "list 1 is empty"},
      {shared(2, {1, 2}, {2, 5}, two), "bytes of hashes for 5 entries"},
      {shared(2, {1, 2}, {2, 4}, {two[0], two[1], two[3], two[2]}), "of list 2 are not ascending"},
      {good + EncodeFooterSection(99, 0, "x"), "unknown section tag 99"},
      {good + EncodeFooterSection(99, 6, "x"), "unknown flags 6"},
      {good + EncodeFooterSection(kFooterSectionReplaces, 0, "") +
           EncodeFooterSection(kFooterSectionReplaces, 0, ""),
       "appears twice"},
      {good + huge, "damaged"},
      {good + "\x01\x00\x00", "damaged"},
      {bad_pad, "damaged"},
  };
  for (const auto& [sections, what] : cases) {
    EXPECT_THAT(load(testing::WithFooterSections(clean, sections), &idx),
                StatusIsWith(StatusCode::kCorruption, what))
        << what;
    EXPECT_THAT(load(testing::WithFooterSections(clean, sections), &idx),
                StatusIsWith(StatusCode::kCorruption, "segments/w-00000001.rss: offset "))
        << what;
  }
}

}  // namespace
}  // namespace runstore::format
