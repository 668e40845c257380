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

}  // namespace runstore::testing
