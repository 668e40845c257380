// The page cache a process's large values leave behind (docs/design.md
// #large-values-leave-the-page-cache-once-durable). A large value (a piece of
// 1 MiB or more, written straight from the caller's memory) is written once
// and seldom read soon, and a page cache that grows with every GiB written
// costs the kernel far more per byte than one that reuses its pages; but a
// value read right after it was written (a job's results, loaded by the next
// step) should not come from the disk. So the durable large values a process
// wrote last stay cached up to a budget, process-wide, and older ones leave
// the cache (POSIX_FADV_DONTNEED: clean pages only, never those a process has
// mapped, so nothing is lost).
#ifndef RUNSTORE_ENV_PAGE_CACHE_H_
#define RUNSTORE_ENV_PAGE_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runstore/status.h"

namespace runstore::page_cache {

// The budget's default: a sixteenth of the machine's memory, at most 1 GiB.
uint64_t DefaultKeptBytes();
// The budget: RUNSTORE_CACHED_LARGE_VALUES (bytes, 0 drops every large value
// once durable) when set, else the default. A malformed value is reported by
// EnvironmentStatus and the default used.
uint64_t KeptBytes();
const Status& EnvironmentStatus();
// Sets the budget (tests), dropping at once the oldest ranges beyond it.
void SetKeptBytes(uint64_t bytes);

// Hands the whole-page ranges [first, end) of the file at `path`, durable
// now, to the budget, newest last; drops the oldest of every file beyond it.
// `fd`, open on `path`, drops this file's own ranges without opening it
// again; others are dropped through their path (a file renamed or removed
// since is skipped: the drop is only a hint).
void Keep(const std::shared_ptr<const std::string>& path, int fd,
          const std::vector<std::pair<uint64_t, uint64_t>>& ranges);
// The bytes Keep has dropped in this process, and those it holds (tests).
uint64_t DroppedBytes();
uint64_t KeptNowBytes();

}  // namespace runstore::page_cache

#endif  // RUNSTORE_ENV_PAGE_CACHE_H_
