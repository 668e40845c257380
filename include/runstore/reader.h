// reader.h: reading a store through snapshots.
//
// A Snapshot is the set of committed records of every segment at the moment
// it was taken; it never changes, so reads from it are repeatable. Values of
// uncompressed series are views into read-only mappings of the segment files
// (zero-copy); they stay valid while the Value (or a batch holding it) lives,
// even after the Snapshot and the Store are gone.
//
// Key resolution (docs/design.md#invariant-6, docs/format.md "Resolving keys"):
// when (run, name, step) was written more than once, the record of the later
// commit wins; a resume marker for (run, S) hides that run's records at
// steps >= S from commits ordered before the marker.
//
// Thread safety: a Snapshot is immutable and may be used by many threads. A
// SeriesScanner is used by one thread at a time.
#ifndef RUNSTORE_READER_H_
#define RUNSTORE_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore {

struct SeriesInfo {
  std::string name;
  DType dtype;
  bool variable_shape = false;
  std::vector<int64_t> shape;  // per record; empty for scalars or variable-shape
  uint64_t count = 0;          // visible records (after key resolution)
  uint64_t stored_bytes = 0;   // bytes of its blocks on disk
  // The series' rank among the snapshot's series by their first block in
  // commit order (0 first): the order they were first logged in, as a
  // writer flushes the blocks of a commit in the order its series were
  // created (docs/design.md#series-order).
  uint64_t first_logged = 0;
};

struct SegmentInfo {
  std::string file;  // path relative to the store
  std::string writer_id;
  uint64_t sequence = 0;
  bool sealed = false;
  uint64_t committed_bytes = 0;  // end of the last valid commit
  uint64_t file_bytes = 0;
  uint64_t commits = 0;
  uint64_t blocks = 0;
  int64_t created_ns = 0;
};

// One batch of a columnar scan: `count` records with their runs, steps and
// values, all valid while `owner` (or any copy of this batch) lives; string
// runs are views of the block they were read from, held by `owner` too.
//
// Runs: when run_is_string is empty every run is the integer int_runs[i];
// otherwise run_is_string[i] says whether it is int_runs[i] or
// string_runs[i]. For fixed-shape numeric series `values` has shape
// [count, *record_shape] and is a view into the mapped segment when the block
// is stored uncompressed and none of its records was hidden (zero-copy);
// otherwise it owns its bytes. For variable-shape, string and bytes series
// `records` holds one Value each and `values` is empty.
struct ScanBatch {
  size_t count = 0;
  std::span<const int64_t> int_runs;
  std::vector<uint8_t> run_is_string;
  std::vector<std::string_view> string_runs;
  std::span<const int64_t> steps;
  // int_runs and steps are views of the mapped segment (an uncompressed block
  // whose key columns are stored plainly), not gathered into owned memory.
  bool keys_zero_copy = false;
  Value values;
  std::vector<Value> records;
  std::shared_ptr<const void> owner;

  RunId run(size_t i) const;
  // Record i's run, borrowed: valid while this batch's views are.
  RunRef run_ref(size_t i) const {
    if (!run_is_string.empty() && run_is_string[i]) return RunRef(string_runs[i]);
    return RunRef(int_runs[i]);
  }
};

// A value whose bytes are checked as they are read (Snapshot::GetLazy).
//
// A large uncompressed numeric value carries a checksum per chunk of its data
// (docs/format.md "Value chunks"). Its bytes are checked by Check: before
// reading bytes [offset, offset + len) of value().data(), a reader checks the
// chunks they touch, each once, so that reading a slice of a large array reads
// and checks that slice rather than the whole array (docs/design.md#invariant-3:
// every byte read is checked). Any other value was checked whole when it was
// fetched, and Check returns OK at once.
//
// Thread-safe; copies share what has been checked. The bytes of value() that
// no Check has covered must not be read: they may be damaged.
class LazyValue {
 public:
  // Bytes [offset, offset + len) of value().data().
  struct Range {
    uint64_t offset;
    uint64_t len;
  };
  class Checker {
   public:
    virtual ~Checker() = default;
    virtual Status Check(std::span<const Range> ranges) const = 0;
    virtual bool all_checked() const = 0;
  };
  LazyValue() = default;
  LazyValue(Value value, std::shared_ptr<const Checker> checker)
      : value_(std::move(value)), checker_(std::move(checker)) {}

  const Value& value() const { return value_; }
  // Corruption naming the file and offset if a chunk the bytes touch is
  // damaged; the bytes outside that chunk stay readable.
  Status Check(uint64_t offset, uint64_t len) const {
    const Range r{offset, len};
    return Check(std::span<const Range>(&r, 1));
  }
  // Checks several ranges at once: the chunks of all of them are asked of the
  // file system together (at most 64 MiB ahead of the hashing), so that a
  // sample spread over a large array is read in parallel requests rather than
  // one after another.
  Status Check(std::span<const Range> ranges) const {
    return checker_ ? checker_->Check(ranges) : Status::OK();
  }
  Status CheckAll() const { return Check(0, value_.nbytes()); }
  // Whether every byte of value() has been checked.
  bool all_checked() const { return !checker_ || checker_->all_checked(); }

 private:
  Value value_;
  std::shared_ptr<const Checker> checker_;  // null: checked whole
};

// A segment a snapshot left out because it could not be read
// (StoreOptions::on_damaged = OnDamaged::kSkip).
struct DamagedSegment {
  std::string file;  // path relative to the store
  Status status;     // Corruption naming the offset, or the IOError
};

// What Snapshot::VerifyAll found.
struct VerifyReport {
  uint64_t segments = 0;
  uint64_t blocks_checked = 0;
  uint64_t bytes_checked = 0;
  // Every problem found, each a Corruption naming the file and the offset
  // (an IOError for a segment file that cannot be read).
  std::vector<Status> problems;
  // Segments that could not be checked because the process ran out of a
  // resource (ResourceExhausted naming the file: out of descriptors or
  // memory). Not problems of the store: checked again with more of it.
  std::vector<Status> unchecked;
};

namespace read {
class SnapshotImpl;  // src/store/read/snapshot.h
}  // namespace read

// The runs a scan is restricted to: made once from a list (in any order;
// repeats count once) and shared by its copies, so that one set prepared for
// many runs serves the scans of many series.
class RunSet {
 public:
  RunSet(std::vector<RunId> runs);  // NOLINT: ScanOptions{.runs = {...}} reads as a list
  size_t size() const;
  bool Holds(const RunRef& run) const;
  // Whether one of the runs lies in [lo, hi].
  bool Overlaps(const RunRef& lo, const RunRef& hi) const;

 private:
  friend class read::SnapshotImpl;  // reads the runs' hashes, which the footers' run index lists
  struct Index;
  // Whether a run of hash `h` is in the set (and is `run`, unless null).
  bool HoldsHash(uint64_t h, const RunRef* run) const;
  std::shared_ptr<const Index> index_;
};

// What a scan returns besides the values, and which records.
struct ScanOptions {
  // Fill ScanBatch's int_runs, steps, run_is_string and string_runs. Without
  // them a scan of keys stored as sequences builds nothing it does not need.
  bool keys = true;
  // Only the records of these runs (in any order; an empty list selects
  // none); every run when unset. A block whose run range holds none of them
  // is not read, and one that holds only wanted runs is returned whole, so
  // reading one run of a store written run by run costs that run's blocks.
  std::optional<RunSet> runs;
  // Only the records whose step is in [first, last] (both included); every
  // step when unset. A block whose steps all lie outside is not read.
  struct StepRange {
    int64_t first;
    int64_t last;
  };
  std::optional<StepRange> steps;
  // "Not read" is the scan's own reading. Resolving keys reads, once per
  // snapshot, every block whose key range overlaps another's (several runs
  // logged step by step, keys written twice): in such a series the filters
  // save the copying of the other records, not their reading.
};

class SeriesScanner {
 public:
  virtual ~SeriesScanner() = default;
  // Fills *batch with the next records; returns false at the end. Records come
  // segment by segment, block by block; use Snapshot::Get for key order.
  virtual Result<bool> Next(ScanBatch* batch) = 0;
};

class Snapshot {
 public:
  virtual ~Snapshot() = default;

  // Every series with a visible record, sorted by name. Reserved '~' series
  // are listed only with include_reserved.
  virtual Result<std::vector<SeriesInfo>> ListSeries(bool include_reserved = false) const = 0;
  virtual Result<SeriesInfo> GetSeriesInfo(std::string_view name) const = 0;
  // Every series that has a block, sorted by name, with everything but its
  // count, which is left 0: what the snapshot's index says, without the key
  // resolution that counting takes (which reads the blocks of series whose
  // keys may repeat). A series whose every record is hidden or overwritten
  // is listed here and not by ListSeries. For callers that need the types.
  virtual std::vector<SeriesInfo> ListSeriesTypes(bool include_reserved = false) const = 0;
  // Every run id with at least one visible record in a non-reserved series,
  // sorted (integers first).
  virtual Result<std::vector<RunId>> ListRuns() const = 0;
  // How many runs ListRuns would list, without listing them: the runs of a
  // block its sealed segment's run index lists (docs/format.md "Run index")
  // are counted by their 64-bit hashes, without reading the block, so a
  // store of hashed experiment ids is counted from its footers. Two runs
  // whose hashes collide count once (for a million runs, a chance of about
  // 3 in 10^8).
  virtual Result<uint64_t> CountRuns() const = 0;
  virtual std::vector<SegmentInfo> ListSegments() const = 0;
  // The segments left out because they could not be read (empty unless the
  // store was opened with OnDamaged::kSkip): their records are not in this
  // snapshot, and keys they overwrote or hid resolve as if they never were.
  virtual const std::vector<DamagedSegment>& DamagedSegments() const = 0;

  // The visible record under (run, name, step). NotFound if there is none (or
  // it is hidden by a resume marker).
  virtual Result<Value> Get(RunRef run, std::string_view name, int64_t step) const = 0;
  // The same record, with its bytes checked as they are read instead of
  // before Get returns: for reading part of a large array (LazyValue).
  virtual Result<LazyValue> GetLazy(RunRef run, std::string_view name, int64_t step) const = 0;

  // Scans the visible records of a series (every one, or those of
  // options.runs and options.steps). NotFound for an unknown series.
  virtual Result<std::unique_ptr<SeriesScanner>> Scan(std::string_view name,
                                                      const ScanOptions& options) const = 0;
  Result<std::unique_ptr<SeriesScanner>> Scan(std::string_view name) const {
    return Scan(name, ScanOptions());
  }

  // Reads every block of every segment and checks every checksum, frame
  // header and payload layout, continuing past problems; the segments left
  // out as damaged are problems too. A segment loaded from the catalog is
  // checked by its file's own index, and an entry that differs from the file
  // is a problem of the catalog, never of the segment. A segment that cannot
  // be checked for want of a resource is listed in `unchecked`. `progress`,
  // if set,
  // is called after each block with the payload bytes checked so far and the
  // total. Thread-compatible: call from one thread.
  virtual VerifyReport VerifyAll(
      const std::function<void(uint64_t done_bytes, uint64_t total_bytes)>& progress = {})
      const = 0;
  // Drops the pages of this snapshot's mapped segments from the process's
  // resident memory (MappedRegion::ReleasePages); Values stay valid. Call it
  // between the parts of a read that streams through a large store, so that
  // the resident set does not grow with the store.
  virtual void ReleasePages() const = 0;

  // VerifyAll, returning its first problem (a Corruption naming file and
  // offset), else its first unchecked segment's ResourceExhausted, or OK;
  // *blocks_checked counts the blocks read.
  Status Verify(uint64_t* blocks_checked = nullptr) const;
};

}  // namespace runstore

#endif  // RUNSTORE_READER_H_
