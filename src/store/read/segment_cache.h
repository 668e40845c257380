// The process's budget of segment mappings and descriptors
// (docs/design.md#catalog, "Opening many segments"), after leveldb's table
// cache: a segment is mapped by its first read, and opened again when a read
// needs its descriptor, and keeps them while it is among the segments read
// most recently; beyond the budget, the least recently read lose theirs
// (second chance, a clock over each kind). What a reader holds (a value, a
// block being read) keeps its own reference, so dropping one only makes the
// next read map or open the file again.
//
// So a process that opens stores of any number of segments, and reads all
// of them, holds at most `Limits::files` descriptors and `Limits::mappings`
// mappings of segments (plus those its readers hold at the moment), below
// the system's limits (RLIMIT_NOFILE, 1,024 soft on Linux, and
// vm.max_map_count, 65,530).
//
// Thread safety: every method may be called from any thread.
#ifndef RUNSTORE_STORE_READ_SEGMENT_CACHE_H_
#define RUNSTORE_STORE_READ_SEGMENT_CACHE_H_

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runstore/status.h"
#include "util/mutex.h"

namespace runstore::read {

struct LoadedSegment;

class SegmentCache {
 public:
  enum Kind { kMapping = 0, kFile = 1 };
  // The process's defaults: half of vm.max_map_count (32,765 of Linux's
  // 65,530) mappings, where /proc says it, else 16,384; 32 descriptors, or
  // an eighth of RLIMIT_NOFILE's soft limit where that is lower (at least 4).
  struct Limits {
    size_t mappings = 16384;
    size_t files = 32;
  };

  // The one budget of the process.
  static SegmentCache& Process();

  // Counts the mapping or descriptor `seg` has just made (it holds it now),
  // and makes the least recently used others drop theirs while the process
  // holds more than its limit. Never drops `seg`'s own.
  void Admit(Kind kind, const std::shared_ptr<const LoadedSegment>& seg);
  // Stops counting what `seg` holds (it is being destroyed).
  void Forget(const LoadedSegment* seg);

  // Held now, by the count (for tests and figures).
  size_t held(Kind kind);
  Limits limits();
  // Each limit at least 1; takes effect at the next Admit.
  void SetLimits(Limits limits);
  // OK, or InvalidArgument naming a RUNSTORE_SEGMENT_MAPPINGS or
  // RUNSTORE_SEGMENT_FILES that is not a whole number from 1 to 2^32 (the
  // default stays): what opening a store reports.
  const Status& environment_status() const { return environment_status_; }

 private:
  struct Entry {
    const LoadedSegment* seg;
    std::weak_ptr<const LoadedSegment> weak;
  };
  struct Ring {
    std::vector<Entry> entries;
    std::unordered_map<const LoadedSegment*, size_t> at;  // index into entries
    size_t hand = 0;
  };
  void RemoveAt(Ring* ring, size_t i) RUNSTORE_REQUIRES(mu_);
  // Around fork(2): the lock held across it, so that the child's is free.
  static void BeforeFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS;
  static void AfterFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS;

  Status environment_status_;  // set once, before the cache is shared
  Mutex mu_;
  Ring rings_[2] RUNSTORE_GUARDED_BY(mu_);
  Limits limits_ RUNSTORE_GUARDED_BY(mu_);
};

}  // namespace runstore::read

#endif  // RUNSTORE_STORE_READ_SEGMENT_CACHE_H_
