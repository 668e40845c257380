// Shared helpers for runstore's tests.
#ifndef RUNSTORE_TESTS_TESTING_TEST_UTIL_H_
#define RUNSTORE_TESTS_TESTING_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runstore/reader.h"
#include "runstore/status.h"
#include "runstore/types.h"

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

// A record as the sweep tests model a store's expected contents.
struct RecordKey {
  std::string series;
  RunId run;
  int64_t step = 0;
  friend bool operator<(const RecordKey& a, const RecordKey& b) {
    return std::tie(a.series, a.run, a.step) < std::tie(b.series, b.run, b.step);
  }
  friend bool operator==(const RecordKey&, const RecordKey&) = default;
};

struct RecordValue {
  DType dtype = DType::kFloat64;
  std::vector<int64_t> shape;
  std::string bytes;
  friend bool operator==(const RecordValue&, const RecordValue&) = default;
};

using Contents = std::map<RecordKey, RecordValue>;

// The value of record i of a scan batch, whether the batch holds one column
// of fixed-shape values or one Value per record.
RecordValue RecordValueAt(const ScanBatch& b, size_t i);

// Every visible record of the given series (every series, reserved ones
// included, when `series` is null), through Scan. A key that a scan returns
// twice is a Corruption of its own.
Result<Contents> ScanAll(const Snapshot& snap, const std::set<std::string>* series = nullptr);
inline Result<Contents> ScanAll(const Snapshot& snap, const std::set<std::string>& series) {
  return ScanAll(snap, &series);
}

// How `actual` differs from `expected`, for a message (empty if equal): at
// most 8 keys.
std::string DiffContents(const Contents& expected, const Contents& actual);

// "(run, 'series', step)" for messages.
inline std::string KeyString(const RecordKey& k) {
  return "(" + k.run.ToString() + ", '" + k.series + "', " + std::to_string(k.step) + ")";
}

// The problems found in one case of a sweep (corruption, crash points).
struct Problems {
  std::vector<std::string> list;
  void Check(bool ok, const std::string& what) {
    if (!ok) list.push_back(what);
  }
  bool empty() const { return list.empty(); }
};

// Failing cases of a sweep, grouped by kind (the first problem with its
// numbers blanked), so that thousands of failures print as a few lines.
class FailureSummary {
 public:
  explicit FailureSummary(size_t detailed) : detailed_(detailed) {}
  // Records a failing case; reports it in full if it is among the first.
  void Add(const std::string& where, const Problems& p) {
    if (p.empty()) return;
    ++failing_;
    std::string all;
    for (const std::string& s : p.list) all += "\n  " + s;
    if (failing_ <= detailed_) ADD_FAILURE() << where << ":" << all;
    // The kind of failure: the first problem with its numbers blanked.
    std::string kind;
    for (char c : p.list.front().substr(0, 120)) {
      if (!(c >= '0' && c <= '9'))
        kind += c;
      else if (kind.empty() || kind.back() != '#')
        kind += '#';
    }
    auto [it, inserted] = kinds_.emplace(kind, std::make_pair(0, where + ":" + all));
    ++it->second.first;
  }
  size_t failing() const { return failing_; }
  void Print(const std::string& title) const {
    for (const auto& [kind, v] : kinds_) {
      std::printf("[ failures ] %s: %d case(s) of this kind; the first: %s\n", title.c_str(),
                  v.first, v.second.c_str());
    }
    std::fflush(stdout);
  }

 private:
  size_t detailed_;
  size_t failing_ = 0;
  std::map<std::string, std::pair<int, std::string>> kinds_;
};

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

// Resident pages of this process's mappings of `dir`'s segment files, in
// KiB (/proc/self/smaps: the pages this process has mapped, not the page
// cache).
long MappedSegmentKib(const std::string& dir);

// An experiment id as runstore's experiments layer makes them by default:
// 'e' and 16 hex digits of a hash (of i).
std::string HashedId(uint64_t i);

}  // namespace runstore::testing

#endif  // RUNSTORE_TESTS_TESTING_TEST_UTIL_H_
