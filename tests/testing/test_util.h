// Shared helpers for runstore's tests.
#ifndef RUNSTORE_TESTS_TESTING_TEST_UTIL_H_
#define RUNSTORE_TESTS_TESTING_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runstore/status.h"

namespace runstore::testing {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const Result<T>& r) {
  return r.status();
}

// Matches a Status (or Result) whose code is `code`:
//   EXPECT_THAT(writer->Append(...), StatusIs(StatusCode::kInvalidArgument));
MATCHER_P(StatusIs, code, std::string("has status code ") + std::string(StatusCodeName(code))) {
  const Status& s = GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  return s.code() == code;
}
// Matches a status whose code is `code` and whose message contains `needle`.
MATCHER_P2(StatusIsWith, code, needle,
           std::string("has status code ") + std::string(StatusCodeName(code)) +
               " and a message containing '" + needle + "'") {
  const Status& s = GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  return s.code() == code && s.message().find(needle) != std::string::npos;
}

#define ASSERT_OK(expr)                                                    \
  do {                                                                     \
    /* A copy: `expr` may be a temporary Result whose status() dangles. */ \
    const ::runstore::Status _rs_s = ::runstore::testing::GetStatus(expr); \
    ASSERT_TRUE(_rs_s.ok()) << _rs_s.ToString();                           \
  } while (0)
#define EXPECT_OK(expr)                                                    \
  do {                                                                     \
    /* A copy: `expr` may be a temporary Result whose status() dangles. */ \
    const ::runstore::Status _rs_s = ::runstore::testing::GetStatus(expr); \
    EXPECT_TRUE(_rs_s.ok()) << _rs_s.ToString();                           \
  } while (0)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                          \
  auto RUNSTORE_CONCAT_(_rs_r_, __LINE__) = (expr);              \
  ASSERT_TRUE(RUNSTORE_CONCAT_(_rs_r_, __LINE__).ok())           \
      << RUNSTORE_CONCAT_(_rs_r_, __LINE__).status().ToString(); \
  lhs = std::move(RUNSTORE_CONCAT_(_rs_r_, __LINE__)).value()

// A fresh directory under $TMPDIR (or /tmp), removed with its contents when
// the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The seed for a randomised test: $RUNSTORE_SEED if set, else time-based.
// Printed so that a failure can be replayed.
uint64_t TestSeed();

}  // namespace runstore::testing

#endif  // RUNSTORE_TESTS_TESTING_TEST_UTIL_H_
