#include "env/page_cache.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>

#include "util/environment.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace runstore::page_cache {
namespace {

struct Range {
  std::shared_ptr<const std::string> path;
  uint64_t first;
  uint64_t end;
};

class Window {
 public:
  Mutex mu;
  std::deque<Range> ranges RUNSTORE_GUARDED_BY(mu);
  uint64_t kept RUNSTORE_GUARDED_BY(mu) = 0;
  uint64_t budget RUNSTORE_GUARDED_BY(mu) = 0;
  std::atomic<uint64_t> dropped{0};
  Status environment_status;  // set once, before the window is shared
};

Window* the_window = nullptr;

// A fork while another thread holds the lock would leave it held for ever in
// the child: it is taken around fork(2), as the segment budget's is.
// (Taken in one function and released in another: outside the analysis.)
void BeforeFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS { the_window->mu.Lock(); }
void AfterFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS { the_window->mu.Unlock(); }

Window& Process() {
  // Never deleted: files may be synced by threads still running at exit.
  static Window* const w = [] {
    auto* w = new Window;
    the_window = w;
    ::pthread_atfork(&BeforeFork, &AfterFork, &AfterFork);
    uint64_t budget = DefaultKeptBytes();
    auto n = WholeNumberFromEnvironment("RUNSTORE_CACHED_LARGE_VALUES", 0, uint64_t{1} << 50,
                                        "bytes of large values kept in the page cache");
    if (!n.ok()) {
      w->environment_status = n.status();
    } else if (*n) {
      budget = **n;
    }
    MutexLock lock(&w->mu);
    w->budget = budget;
    return w;
  }();
  return *w;
}

void Drop(const Range& r, const std::shared_ptr<const std::string>& own_path, int own_fd) {
#ifdef POSIX_FADV_DONTNEED
  int fd = r.path == own_path ? own_fd : -1;
  const bool opened = fd < 0;
  if (opened) fd = ::open(r.path->c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;  // removed or renamed since: nothing to do
  // Only a hint: a failure loses nothing.
  (void)::posix_fadvise(fd, static_cast<off_t>(r.first), static_cast<off_t>(r.end - r.first),
                        POSIX_FADV_DONTNEED);
  if (opened) ::close(fd);
#else
  (void)r;
  (void)own_path;
  (void)own_fd;
#endif
}

}  // namespace

uint64_t DefaultKeptBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t memory =
      pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return std::min<uint64_t>(memory / 16, uint64_t{1} << 30);
}

uint64_t KeptBytes() {
  Window& w = Process();
  MutexLock lock(&w.mu);
  return w.budget;
}

const Status& EnvironmentStatus() { return Process().environment_status; }

namespace {

// Adds `ranges` of `path` (none: only a new budget to meet), takes the oldest
// ranges beyond the budget out, and drops them outside the lock; `fd`, open
// on `path`, drops that file's own.
void AddAndTrim(const std::shared_ptr<const std::string>& path, int fd,
                const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                std::optional<uint64_t> budget) {
  Window& w = Process();
  std::vector<Range> victims;
  {
    MutexLock lock(&w.mu);
    if (budget) w.budget = *budget;
    for (const auto& [first, end] : ranges) {
      w.ranges.push_back(Range{path, first, end});
      w.kept += end - first;
    }
    while (w.kept > w.budget && !w.ranges.empty()) {
      w.kept -= w.ranges.front().end - w.ranges.front().first;
      victims.push_back(std::move(w.ranges.front()));
      w.ranges.pop_front();
    }
  }
  for (const Range& r : victims) {
    Drop(r, path, fd);
    w.dropped.fetch_add(r.end - r.first, std::memory_order_relaxed);
  }
}

}  // namespace

void SetKeptBytes(uint64_t bytes) { AddAndTrim(nullptr, -1, {}, bytes); }

void Keep(const std::shared_ptr<const std::string>& path, int fd,
          const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  AddAndTrim(path, fd, ranges, std::nullopt);
}

uint64_t DroppedBytes() { return Process().dropped.load(std::memory_order_relaxed); }

uint64_t KeptNowBytes() {
  Window& w = Process();
  MutexLock lock(&w.mu);
  return w.kept;
}

}  // namespace runstore::page_cache
