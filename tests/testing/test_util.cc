#include "testing/test_util.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace runstore::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/runstore-test-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

uint64_t TestSeed() {
  const char* env = std::getenv("RUNSTORE_SEED");
  uint64_t seed =
      env ? std::strtoull(env, nullptr, 10)
          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                static_cast<uint64_t>(getpid());
  std::printf("[ seed     ] RUNSTORE_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

RecordValue RecordValueAt(const ScanBatch& b, size_t i) {
  RecordValue v;
  if (b.records.empty()) {
    const size_t rb = b.values.nbytes() / b.count;
    v.dtype = b.values.dtype();
    v.shape.assign(b.values.shape().begin() + 1, b.values.shape().end());
    v.bytes.assign(b.values.data() + i * rb, rb);
  } else {
    const Value& r = b.records[i];
    v.dtype = r.dtype();
    v.shape = r.shape();
    v.bytes.assign(r.data(), r.nbytes());
  }
  return v;
}

}  // namespace runstore::testing
