#include "store/read/segment_cache.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "runstore/store.h"
#include "store/read/snapshot.h"
#include "util/environment.h"

namespace runstore::read {

namespace {
SegmentCache* the_cache = nullptr;
}  // namespace

// A fork while another thread holds the budget's lock would leave it held
// for ever in the child (a Python multiprocessing worker forked from a
// process that reads a store): the lock is taken around fork(2).
void SegmentCache::BeforeFork() { the_cache->mu_.Lock(); }
void SegmentCache::AfterFork() { the_cache->mu_.Unlock(); }

SegmentCache& SegmentCache::Process() {
  // Never deleted: segments may be destroyed by threads still running at exit.
  static SegmentCache* const cache = [] {
    auto* c = new SegmentCache;
    the_cache = c;
    ::pthread_atfork(&BeforeFork, &AfterFork, &AfterFork);
    Limits l;
    // A process started with few descriptors (ulimit -n 64) keeps most of
    // them for itself: an eighth at most, and at least 4.
    struct rlimit rl;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      l.files = std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur) / 8, 4, l.files);
    }
    // Half of the system's limit on a process's mappings (vm.max_map_count,
    // 65,530 by default): the rest is the process's own (its heap, its
    // libraries, Python's arenas). Remapping a segment costs a few
    // microseconds, so the more a store's readers may keep, the better.
    if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
      unsigned long long n = 0;
      if (std::fscanf(f, "%llu", &n) == 1 && n >= 2048) l.mappings = static_cast<size_t>(n / 2);
      std::fclose(f);
    }
    // Set by the environment, for any front end.
    for (auto [name, limit] : {std::pair{"RUNSTORE_SEGMENT_MAPPINGS", &l.mappings},
                               std::pair{"RUNSTORE_SEGMENT_FILES", &l.files}}) {
      auto n = WholeNumberFromEnvironment(name, 1, uint64_t{1} << 32,
                                          limit == &l.mappings ? "the segment budget's mappings"
                                                               : "the segment budget's open files");
      if (!n.ok()) {
        c->environment_status_ = n.status();
      } else if (*n) {
        *limit = static_cast<size_t>(**n);
      }
    }
    c->SetLimits(l);
    return c;
  }();
  return *cache;
}

void SegmentCache::RemoveAt(Ring* ring, size_t i) {
  ring->at.erase(ring->entries[i].seg);
  if (i + 1 != ring->entries.size()) {
    ring->entries[i] = std::move(ring->entries.back());
    ring->at[ring->entries[i].seg] = i;
  }
  ring->entries.pop_back();
}

void SegmentCache::Admit(Kind kind, const std::shared_ptr<const LoadedSegment>& seg) {
  std::vector<std::shared_ptr<const LoadedSegment>> victims;
  // Every segment the hand looks at is held until the lock is released: the
  // last reference to one may be the hand's, and its destructor calls Forget.
  std::vector<std::shared_ptr<const LoadedSegment>> seen;
  {
    MutexLock lock(&mu_);
    Ring& ring = rings_[kind];
    if (ring.at.contains(seg.get())) return;
    ring.at.emplace(seg.get(), ring.entries.size());
    ring.entries.push_back(Entry{seg.get(), seg});
    const size_t limit = kind == kMapping ? limits_.mappings : limits_.files;
    // Second chance: a segment used since the hand last passed is spared
    // once. Readers may mark segments again meanwhile, so after two full
    // turns the hand takes what it finds.
    size_t steps = 0;
    while (ring.entries.size() > limit) {
      if (ring.hand >= ring.entries.size()) ring.hand = 0;
      const Entry& e = ring.entries[ring.hand];
      std::shared_ptr<const LoadedSegment> held = e.weak.lock();
      if (held == nullptr) {  // being destroyed: its mapping goes with it
        RemoveAt(&ring, ring.hand);
        continue;
      }
      const bool spare = held == seg || (steps < 2 * ring.entries.size() && held->TakeUse(kind));
      ++steps;
      if (spare) {
        ++ring.hand;
        seen.push_back(std::move(held));
        continue;
      }
      RemoveAt(&ring, ring.hand);
      victims.push_back(std::move(held));
    }
  }
  // Outside the lock: dropping takes the segment's own lock, and the last
  // reference to a victim may go here, whose destructor calls Forget.
  for (const auto& v : victims) v->Drop(kind);
}

void SegmentCache::Forget(const LoadedSegment* seg) {
  MutexLock lock(&mu_);
  for (Ring& ring : rings_) {
    if (auto it = ring.at.find(seg); it != ring.at.end()) RemoveAt(&ring, it->second);
  }
}

size_t SegmentCache::held(Kind kind) {
  MutexLock lock(&mu_);
  return rings_[kind].entries.size();
}

SegmentCache::Limits SegmentCache::limits() {
  MutexLock lock(&mu_);
  return limits_;
}

void SegmentCache::SetLimits(Limits limits) {
  MutexLock lock(&mu_);
  limits_.mappings = std::max<size_t>(limits.mappings, 1);
  limits_.files = std::max<size_t>(limits.files, 1);
}

}  // namespace runstore::read

namespace runstore {

using read::SegmentCache;

SegmentBudget GetSegmentBudget() {
  const SegmentCache::Limits l = SegmentCache::Process().limits();
  return SegmentBudget{l.mappings, l.files};
}

Status SetSegmentBudget(const SegmentBudget& budget) {
  if (budget.mappings == 0 || budget.files == 0) {
    return Status::InvalidArgument("a segment budget of " + std::to_string(budget.mappings) +
                                   " mappings and " + std::to_string(budget.files) +
                                   " open files: each must be at least 1");
  }
  SegmentCache::Process().SetLimits({budget.mappings, budget.files});
  return Status::OK();
}

}  // namespace runstore
