// JoinedArrowStream: several series joined on the base's keys, read through
// the Arrow C stream interface as a consumer reads it, checked row by row
// against point lookups: nulls where a series lacks a key, every type,
// windows smaller than the table, the where filter with fills (the
// experiments table's status), and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runstore/arrow.h"
#include "runstore/store.h"
#include "testing/arrow_consumer.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::Consume;
using ::runstore::testing::Consumed;
using ::runstore::testing::HashedId;
using ::runstore::testing::Int;
using ::runstore::testing::Str;
using ::runstore::testing::TempDir;
using ::runstore::testing::Valid;

class ArrowJoinTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.path() + "/s"; }
  TempDir dir_;
};

double F64(const ArrowArray* a, int64_t i) { return static_cast<const double*>(a->buffers[1])[i]; }

TEST_F(ArrowJoinTest, SeriesJoinOnTheBasesKeysWithNullsWhereOneLacksAKey) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  constexpr int64_t kRuns = 4, kSteps = 3000;
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->DefineSeries("ragged", {.dtype = DType::kInt32, .variable_shape = true}));
    ASSERT_OK(w->DefineSeries("reward", {.codec = Codec::kZstd}));
    for (int64_t run = 0; run < kRuns; ++run) {
      for (int64_t step = 0; step < kSteps; ++step) {
        const double x = run * 10000.0 + step;
        ASSERT_OK(w->Append(run, "loss", step, x));
        if (step % 10 == 0) ASSERT_OK(w->Append(run, "reward", step, -x));
        if (step % 3 == 0) {
          const std::string note = "n" + std::to_string(step) + std::string(step % 5, 'x');
          ASSERT_OK(w->Append(run, "note", step, ValueRef::String(note)));
        }
        const float grid[2] = {float(x), float(step)};
        const int64_t shape[] = {2};
        if (step % 2 == 0) ASSERT_OK(w->Append(run, "grid", step, ValueRef::Array(grid, shape)));
        std::vector<int32_t> r(static_cast<size_t>(step % 4), static_cast<int32_t>(step));
        const int64_t rshape[] = {static_cast<int64_t>(r.size())};
        if (step % 7 == 0)
          ASSERT_OK(w->Append(run, "ragged", step, ValueRef::Array(r.data(), rshape)));
        ASSERT_OK(w->Append(run, "flag", step, step % 4 == 1));
        if (step % 500 == 499) ASSERT_OK(w->Commit());
      }
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ArrowJoin join{.base = "loss",
                 .columns = {{.series = "loss"},
                             {.series = "reward"},
                             {.series = "note"},
                             {.series = "grid"},
                             {.series = "ragged"},
                             {.series = "flag", .name = "is_flag"}},
                 .stream = {.batch_rows = 777},
                 .window_bytes = 1 << 20};  // windows of a few thousand rows: several
  ArrowArrayStream s;
  ASSERT_OK(JoinedArrowStream(snap, join, &s));
  Consumed c;
  Consume(&s, &c);
  s.release(&s);
  EXPECT_EQ(c.names, (std::vector<std::string>{"run", "step", "loss", "reward", "note", "grid",
                                               "ragged", "ragged.shape", "is_flag"}));
  EXPECT_EQ(c.formats,
            (std::vector<std::string>{"l", "l", "g", "g", "U", "+w:2", "+L", "+L", "b"}));
  int64_t rows = 0;
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (const ArrowArray& b : c.batches) {
    ASSERT_LE(b.length, 777);
    ASSERT_EQ(b.n_children, 9);
    for (int64_t i = 0; i < b.length; ++i, ++rows) {
      const int64_t run = Int(b.children[0], i), step = Int(b.children[1], i);
      ++seen[{run, step}];
      const double x = run * 10000.0 + step;
      EXPECT_TRUE(Valid(b.children[2], i));
      EXPECT_EQ(F64(b.children[2], i), x);
      ASSERT_EQ(Valid(b.children[3], i), step % 10 == 0) << run << "/" << step;
      if (step % 10 == 0) {
        EXPECT_EQ(F64(b.children[3], i), -x);
      }
      ASSERT_EQ(Valid(b.children[4], i), step % 3 == 0);
      if (step % 3 == 0) {
        EXPECT_EQ(Str(b.children[4], i), "n" + std::to_string(step) + std::string(step % 5, 'x'));
      } else {
        EXPECT_EQ(Str(b.children[4], i), "");  // a null is an empty slot
      }
      ASSERT_EQ(Valid(b.children[5], i), step % 2 == 0);
      const auto* grid = static_cast<const float*>(b.children[5]->children[0]->buffers[1]);
      if (step % 2 == 0) {
        EXPECT_EQ(grid[2 * i], float(x));
        EXPECT_EQ(grid[2 * i + 1], float(step));
      }
      ASSERT_EQ(Valid(b.children[6], i), step % 7 == 0);
      const auto* off = static_cast<const int64_t*>(b.children[6]->buffers[1]);
      const auto* elements = static_cast<const int32_t*>(b.children[6]->children[0]->buffers[1]);
      if (step % 7 == 0) {
        ASSERT_EQ(off[i + 1] - off[i], step % 4);
        for (int64_t e = off[i]; e < off[i + 1]; ++e) EXPECT_EQ(elements[e], step);
        const auto* dims_off = static_cast<const int64_t*>(b.children[7]->buffers[1]);
        const auto* dims = static_cast<const int64_t*>(b.children[7]->children[0]->buffers[1]);
        ASSERT_EQ(dims_off[i + 1] - dims_off[i], 1);
        EXPECT_EQ(dims[dims_off[i]], step % 4);
      } else {
        EXPECT_EQ(off[i + 1], off[i]);
      }
      const auto* bits = static_cast<const uint8_t*>(b.children[8]->buffers[1]);
      EXPECT_EQ(((bits[i / 8] >> (i % 8)) & 1) != 0, step % 4 == 1);
    }
  }
  EXPECT_EQ(rows, kRuns * kSteps);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRuns * kSteps)) << "each key once";
}

TEST_F(ArrowJoinTest, RunsAndStepsFilterTheRowsAndTheOtherSeriesFollow) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int64_t run = 0; run < 5; ++run) {
      for (int64_t step = 0; step < 2000; ++step) {
        ASSERT_OK(w->Append(run, "a", step, double(run * 1e6 + step)));
        ASSERT_OK(w->Append(run, "b", step, int64_t(run * 7 + step)));
      }
      ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ArrowJoin join{
      .base = "a",
      .columns = {{.series = "b"}},
      .step_field = "",
      .stream = {.runs = RunSet({RunId(int64_t{3})}), .steps = ScanOptions::StepRange{100, 199}}};
  ArrowArrayStream s;
  ASSERT_OK(JoinedArrowStream(snap, join, &s));
  Consumed c;
  Consume(&s, &c);
  s.release(&s);
  EXPECT_EQ(c.names, (std::vector<std::string>{"run", "b"}));
  int64_t rows = 0;
  for (const ArrowArray& b : c.batches) {
    for (int64_t i = 0; i < b.length; ++i, ++rows) {
      EXPECT_EQ(Int(b.children[0], i), 3);
      EXPECT_EQ(Int(b.children[1], i), 3 * 7 + 100 + rows);
    }
  }
  EXPECT_EQ(rows, 100);
}

// The experiments table's shape: hashed ids, a status written for some
// experiments only, fills for those without one, and a filter on it.
TEST_F(ArrowJoinTest, TheWhereFilterKeepsTheRowsOfAStatusWithFillsForThoseWithout) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  constexpr int kN = 20000;
  auto state_of = [](int i) -> std::string {
    return i % 5 == 0 ? "failed" : i % 5 == 1 ? "" : i % 2 ? "done" : "running";
  };
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int i = 0; i < kN; ++i) {
      const std::string id = HashedId(static_cast<uint64_t>(i));
      ASSERT_OK(w->Append(RunRef(id), "row", 0, int64_t{i}));
      ASSERT_OK(w->Append(RunRef(id), "x", 0, double(i) / 2));
    }
    ASSERT_OK(w->Commit());
    // The status in another order (the workers finish as they finish), none
    // for the experiments whose state is "" (never started).
    for (int i = kN - 1; i >= 0; --i) {
      if (state_of(i).empty()) continue;
      const std::string id = HashedId(static_cast<uint64_t>(i));
      ASSERT_OK(w->Append(RunRef(id), "state", 0, ValueRef::String(state_of(i))));
      ASSERT_OK(w->Append(RunRef(id), "attempt", 0, int64_t{1 + i % 3}));
      const std::string error = state_of(i) == "failed" ? "E" + std::to_string(i) : "";
      ASSERT_OK(w->Append(RunRef(id), "error", 0, ValueRef::String(error)));
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  std::map<std::string, int> index;
  for (int i = 0; i < kN; ++i) index[HashedId(static_cast<uint64_t>(i))] = i;
  for (const std::vector<std::string>& states :
       {std::vector<std::string>{"failed", "pending"}, std::vector<std::string>{"done"},
        std::vector<std::string>{}}) {
    ArrowJoin join{.base = "row",
                   .columns = {{.series = "x"},
                               {.series = "state", .fill = std::string("pending")},
                               {.series = "attempt", .fill = int64_t{0}},
                               {.series = "error", .empty_is_null = true},
                               {.series = "host", .missing_dtype = DType::kString}},
                   .run_field = "experiment",
                   .step_field = "",
                   .where_series = "state",
                   .where_values = states,
                   .where_fill = "pending",
                   .stream = {.batch_rows = 4096},
                   .window_bytes = 1 << 20};
    ArrowArrayStream s;
    ASSERT_OK(JoinedArrowStream(snap, join, &s));
    Consumed c;
    Consume(&s, &c);
    s.release(&s);
    ASSERT_EQ(c.names,
              (std::vector<std::string>{"experiment", "x", "state", "attempt", "error", "host"}));
    EXPECT_EQ(c.formats, (std::vector<std::string>{"U", "g", "U", "l", "U", "U"}));
    int expected = 0;
    for (int i = 0; i < kN; ++i) {
      const std::string st = state_of(i).empty() ? "pending" : state_of(i);
      expected += std::find(states.begin(), states.end(), st) != states.end();
    }
    int rows = 0;
    for (const ArrowArray& b : c.batches) {
      for (int64_t r = 0; r < b.length; ++r, ++rows) {
        const auto it = index.find(Str(b.children[0], r));
        ASSERT_NE(it, index.end());
        const int i = it->second;
        const std::string st = state_of(i).empty() ? "pending" : state_of(i);
        EXPECT_EQ(F64(b.children[1], r), double(i) / 2);
        EXPECT_TRUE(Valid(b.children[2], r));
        EXPECT_EQ(Str(b.children[2], r), st);
        EXPECT_TRUE(Valid(b.children[3], r));
        EXPECT_EQ(Int(b.children[3], r), state_of(i).empty() ? 0 : 1 + i % 3);
        ASSERT_EQ(Valid(b.children[4], r), st == "failed") << st;
        if (st == "failed") {
          EXPECT_EQ(Str(b.children[4], r), "E" + std::to_string(i));
        }
        EXPECT_FALSE(Valid(b.children[5], r)) << "no host series: every row null";
      }
    }
    EXPECT_EQ(rows, expected) << states.size();
  }
}

// Rows in the order of the base's values (the experiments' definition
// order), over several windows: values written shuffled, sparse, with ties.
TEST_F(ArrowJoinTest, OrderedByTheBasesValuesWindowByWindow) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  constexpr int kN = 30000;
  // Experiment i has the value (i / 2) * 1000 - 7,000,000: sparse, negative
  // at first, each value twice (ties); written in a shuffled order, in two
  // commits, its outcome in another order still.
  std::vector<int> order(kN);
  for (int i = 0; i < kN; ++i) order[i] = i;
  std::mt19937 rng(11);
  std::shuffle(order.begin(), order.end(), rng);
  auto value_of = [](int i) { return int64_t{i / 2} * 1000 - 7'000'000; };
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int k = 0; k < kN; ++k) {
      const int i = order[k];
      ASSERT_OK(w->Append(RunRef(HashedId(static_cast<uint64_t>(i))), "row", 0, value_of(i)));
      if (k == kN / 2) ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Commit());
    for (int i = kN - 1; i >= 0; --i) {
      if (i % 3 == 0) continue;  // no outcome
      ASSERT_OK(w->Append(RunRef(HashedId(static_cast<uint64_t>(i))), "y", 0, double(i)));
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  std::map<std::string, int> index;
  for (int i = 0; i < kN; ++i) index[HashedId(static_cast<uint64_t>(i))] = i;
  for (const bool filtered : {false, true}) {
    ArrowJoin join{.base = "row",
                   .columns = {{.series = "row"}, {.series = "y"}},
                   .step_field = "",
                   .order_by_base_value = true,
                   .stream = {.batch_rows = 1000},
                   .window_bytes = 1 << 20};
    if (filtered) join.stream.runs = RunSet({RunId(HashedId(7)), RunId(HashedId(29998))});
    ArrowArrayStream s;
    ASSERT_OK(JoinedArrowStream(snap, join, &s));
    Consumed c;
    Consume(&s, &c);
    s.release(&s);
    ASSERT_EQ(c.names, (std::vector<std::string>{"run", "row", "y"}));
    std::vector<int> got;
    int64_t last = std::numeric_limits<int64_t>::min();
    for (const ArrowArray& b : c.batches) {
      for (int64_t r = 0; r < b.length; ++r) {
        const auto it = index.find(Str(b.children[0], r));
        ASSERT_NE(it, index.end());
        const int i = it->second;
        EXPECT_EQ(Int(b.children[1], r), value_of(i));
        EXPECT_LE(last, value_of(i)) << "rows in the order of their values";
        last = value_of(i);
        ASSERT_EQ(Valid(b.children[2], r), i % 3 != 0);
        if (i % 3 != 0) {
          EXPECT_EQ(F64(b.children[2], r), double(i));
        }
        got.push_back(i);
      }
    }
    if (filtered) {
      EXPECT_EQ(got, (std::vector<int>{7, 29998}));
      continue;
    }
    ASSERT_EQ(got.size(), static_cast<size_t>(kN));
    // Ties (experiments 2j and 2j+1) come in the order they were scanned.
    std::map<int, size_t> scanned;
    for (int k = 0; k < kN; ++k) scanned[order[k]] = static_cast<size_t>(k);
    for (size_t r = 0; r + 1 < got.size(); ++r) {
      if (value_of(got[r]) == value_of(got[r + 1])) {
        EXPECT_LT(scanned[got[r]], scanned[got[r + 1]]);
      }
    }
  }
  ArrowArrayStream s;
  EXPECT_EQ(JoinedArrowStream(snap, {.base = "y", .order_by_base_value = true}, &s).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ArrowJoinTest, ErrorsNameWhatWasWrong) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->Append(1, "a", 0, 1.0));
    ASSERT_OK(w->Append(1, "s", 0, ValueRef::String("x")));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ArrowArrayStream s;
  EXPECT_EQ(JoinedArrowStream(snap, {.base = "nope"}, &s).code(), StatusCode::kNotFound);
  EXPECT_EQ(JoinedArrowStream(snap, {.base = "a", .columns = {{.series = "a", .name = "run"}}}, &s)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinedArrowStream(
                snap, {.base = "a", .columns = {{.series = "a", .fill = std::string("x")}}}, &s)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinedArrowStream(snap, {.base = "a", .where_series = "a"}, &s).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinedArrowStream(snap, {.base = "a", .stream = {.batch_rows = 0}}, &s).code(),
            StatusCode::kInvalidArgument);
  const Status small = JoinedArrowStream(snap, {.base = "a", .window_bytes = 10}, &s);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("window_bytes"), std::string::npos) << small.ToString();
  // A where series the snapshot lacks: every row takes the fill.
  ASSERT_OK(JoinedArrowStream(
      snap, {.base = "a", .where_series = "gone", .where_values = {"p"}, .where_fill = "p"}, &s));
  Consumed c;
  Consume(&s, &c);
  s.release(&s);
  ASSERT_EQ(c.batches.size(), 1u);
  EXPECT_EQ(c.batches[0].length, 1);
}

}  // namespace
}  // namespace runstore
