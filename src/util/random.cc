#include "util/random.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

namespace runstore {

namespace {

bool FromKernel(uint64_t* out) {
  // GRND_NONBLOCK: early in boot, before the pool is seeded, fail over to the
  // fallbacks instead of waiting (a name need not be secret, only unique).
  ssize_t n;
  do {
    n = getrandom(out, sizeof *out, GRND_NONBLOCK);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof *out);
}

bool FromDevice(uint64_t* out) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n;
  do {
    n = ::read(fd, out, sizeof *out);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof *out);
}

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t RandomU64() {
  uint64_t v;
  if (FromKernel(&v) || FromDevice(&v)) return v;
  static std::atomic<uint64_t> counter{0};
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t who = (static_cast<uint64_t>(::getpid()) << 32) ^
                       std::hash<std::thread::id>{}(std::this_thread::get_id());
  return Mix(now ^ Mix(who ^ Mix(counter.fetch_add(1, std::memory_order_relaxed))));
}

std::string RandomHex16() {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(RandomU64()));
  return buf;
}

}  // namespace runstore
