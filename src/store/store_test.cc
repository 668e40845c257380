#include "runstore/store.h"

#include <cstring>
#include <numeric>
#include <random>

#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(StoreOptions o = {}) {
    auto s = Store::Open(dir_.path() + "/store", o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }
  TempDir dir_;
};

TEST_F(StoreTest, ScalarRoundTripThroughSeal) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  for (int run = 0; run < 100; ++run) {
    ASSERT_OK(w->Append(run, "loss", 0, 0.5 * run));
    ASSERT_OK(w->Append(run, "count", 0, int32_t{run}));
  }
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(42, "loss", 0));
  EXPECT_EQ(v.dtype(), DType::kFloat64);
  EXPECT_EQ(v.scalar<double>(), 21.0);
  EXPECT_TRUE(v.zero_copy());
  ASSERT_OK_AND_ASSIGN(auto series, snap->ListSeries());
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].name, "count");
  EXPECT_EQ(series[0].count, 100u);
  ASSERT_OK_AND_ASSIGN(auto runs, snap->ListRuns());
  EXPECT_EQ(runs.size(), 100u);
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("loss"));
  ScanBatch b;
  size_t total = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
    if (!more) break;
    auto vals = b.values.as<double>();
    for (size_t i = 0; i < b.count; ++i) EXPECT_EQ(vals[i], 0.5 * b.int_runs[i]);
    total += b.count;
  }
  EXPECT_EQ(total, 100u);
  EXPECT_THAT(snap->Get(1000, "loss", 0), StatusIs(StatusCode::kNotFound));
}

}  // namespace
}  // namespace runstore
