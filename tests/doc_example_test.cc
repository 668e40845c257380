// The C++ examples of the docs (the top of include/runstore/store.h, the
// README's C++ section), compiled from the documents' own text
// (CMakeLists.txt makes each a function below) and run on fresh stores.
#include <gtest/gtest.h>

#include <string>

#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {

Status StoreHeaderExample(const std::string& dir);
Status ReadmeCppExample(const std::string& dir);

namespace {

// What every example writes: run 42's loss 0.25 at step 0, there for another
// reader.
void ExpectTheExamplesRecord(const std::string& dir) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir, {}));
  ASSERT_OK_AND_ASSIGN(Value v, store->GetSnapshot()->Get(42, "loss", 0));
  ASSERT_EQ(v.as<double>().size(), 1u);
  EXPECT_EQ(v.as<double>()[0], 0.25);
}

TEST(DocExampleTest, TheExampleAtTheTopOfStoreHRunsOnAFreshStore) {
  testing::TempDir dir;
  EXPECT_OK(StoreHeaderExample(dir.path() + "/sweep"));
  ExpectTheExamplesRecord(dir.path() + "/sweep");
}

TEST(DocExampleTest, TheReadmesCppExampleRunsOnAFreshStore) {
  testing::TempDir dir;
  EXPECT_OK(ReadmeCppExample(dir.path() + "/sweep"));
  ExpectTheExamplesRecord(dir.path() + "/sweep");
}

}  // namespace
}  // namespace runstore
