// The example at the top of include/runstore/store.h, compiled from the
// header's own text (CMakeLists.txt makes it the function below) and run.
#include <gtest/gtest.h>

#include <string>

#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {

Status StoreHeaderExample(const std::string& dir);

namespace {

TEST(HeaderExampleTest, TheExampleAtTheTopOfStoreHRunsOnAFreshStore) {
  testing::TempDir dir;
  EXPECT_OK(StoreHeaderExample(dir.path() + "/sweep"));
  // What it wrote is there for another reader.
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/sweep", {}));
  ASSERT_OK_AND_ASSIGN(Value v, store->GetSnapshot()->Get(42, "loss", 0));
  ASSERT_EQ(v.as<double>().size(), 1u);
  EXPECT_EQ(v.as<double>()[0], 0.25);
}

}  // namespace
}  // namespace runstore
