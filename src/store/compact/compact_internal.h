// The parts of compaction (docs/design.md#compaction), one file each: the
// planner (compact_plan.cc), the merge (compact_merge.cc), the lease and the
// leftovers of other compactions (compact_lease.cc); compact.cc runs them.
#ifndef RUNSTORE_STORE_COMPACT_COMPACT_INTERNAL_H_
#define RUNSTORE_STORE_COMPACT_COMPACT_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "format/replaces.h"
#include "store/compact/compact.h"
#include "util/mutex.h"

namespace runstore::compact {

inline constexpr char kSegmentsDir[] = "segments";
inline constexpr std::string_view kLeaseSuffix = ".lease";
inline constexpr std::string_view kTempSuffix = ".tmp";
inline constexpr std::string_view kClaimSuffix = ".claim";

// A commit's place in the order of docs/format.md "Keys and resolving them":
// time, then the segment's (writer id, sequence).
struct Order {
  int64_t time_ns = 0;
  std::string_view writer_id;
  uint64_t sequence = 0;
  friend auto operator<=>(const Order&, const Order&) = default;
};

// The planner's decision.
struct Plan {
  std::vector<uint32_t> inputs;    // indices into the snapshot's segments()
  std::vector<uint32_t> excluded;  // candidates left out by the conflict rule
  // Candidates left out because they hold a commit that may be ordered
  // after a commit still in some node's staging (`staged_not_before`).
  std::vector<uint32_t> held_back;
  int64_t time_ns = 0;  // the compacted commit's time
};

// Which of the snapshot's segments (`candidates`, indices into segments())
// can be merged into one commit at the greatest time among them, with writer
// id `writer_id`, without changing what any key resolves to: the conflict
// rule's fixpoint (docs/design.md#compaction, "Commit order"). Segments
// that may still be staged, unpublished, somewhere (docs/design.md
// #compaction-and-staging) are unknown in their runs and commits but for a
// bound: none of their commits is ordered at or before `staged_not_before`
// (INT64_MAX: none is staged). So only candidates whose commits are all at
// or before it are merged, and C sorts before every staged commit.
Result<Plan> PlanCompaction(const read::SnapshotImpl& snap, const std::vector<uint32_t>& candidates,
                            const std::string& writer_id, uint32_t min_inputs,
                            int64_t staged_not_before = INT64_MAX);

// Writes the resolved records of `inputs` into temporary parts named
// `<writer_id>-<seq>.rss.tmp` in `segments_dir`, each sealed with one commit
// at `time_ns` and `replaces` (whose part_count it sets) in its footer, and
// the adopted section when `adopted` (its unsealed inputs) is not empty.
struct MergeResult {
  std::vector<std::string> temp_names;  // in segments_dir, part 1 first
  std::vector<uint64_t> part_bytes;
  uint64_t input_records = 0;
  uint64_t output_records = 0;
};
Status MergeSegments(Env* env, const std::string& segments_dir,
                     const std::vector<std::shared_ptr<const read::LoadedSegment>>& inputs,
                     const std::string& writer_id, int64_t time_ns, format::Replaces replaces,
                     std::vector<format::SegmentId> replaced_earlier,
                     const std::vector<format::AdoptedSegment>& adopted,
                     const CompactOptions& options, MergeResult* result);

// The running compaction's lease: the file `compact.<token>.lease`, whose
// contents a thread rewrites every refresh_s, so that another compaction can
// tell that this one's temporaries and claims are in use.
class Lease {
 public:
  static Result<std::unique_ptr<Lease>> Start(Env* env, const std::string& segments_dir,
                                              const std::string& token, double refresh_s);
  ~Lease();
  // The first error of a rewrite (a lease that may look stale to others).
  Status status();
  // Stops the thread and removes the file.
  Status Remove();

 private:
  Lease(Env* env, std::string path) : env_(env), path_(std::move(path)) {}
  Status Write(uint64_t n);
  void StopThread();
  void Loop(double refresh_s);

  Env* const env_;
  const std::string path_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ RUNSTORE_GUARDED_BY(mu_) = false;
  Status error_ RUNSTORE_GUARDED_BY(mu_);
  std::thread thread_;
};

// The token of a compaction's file (lease, temporary, part), or empty.
std::string TokenOfName(std::string_view name);

// Of `tokens`, those whose lease is missing or does not change while this
// process waits `expiry_s`: compactions that are no longer running.
Result<std::set<std::string>> StaleTokens(Env* env, const std::string& segments_dir,
                                          const std::set<std::string>& tokens, double expiry_s);

}  // namespace runstore::compact

#endif  // RUNSTORE_STORE_COMPACT_COMPACT_INTERNAL_H_
