// The Snapshot implementation: the committed blocks of every segment,
// grouped by series, with lazily computed key resolution.
#ifndef RUNSTORE_STORE_READ_SNAPSHOT_H_
#define RUNSTORE_STORE_READ_SNAPSHOT_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/block.h"
#include "format/block_reader.h"
#include "format/segment_reader.h"
#include "runstore/env.h"
#include "runstore/reader.h"
#include "store/catalog.h"
#include "store/schema.h"
#include "util/mutex.h"

namespace runstore::read {

// A loaded segment's bytes, held for a read: the mapping of [0,
// index.committed_end), and the file where reads use it (large or chunked
// values are checked by reading and prefetched through it; null otherwise).
// Both stay valid while held, whatever the process's budget drops.
struct SegmentBytes {
  std::shared_ptr<const MappedRegion> map;
  std::shared_ptr<const RandomAccessFile> file;
};

// One segment as loaded: its index, and its bytes when a read wants them.
// Immutable once built (but for the mapping and the descriptor, made on
// demand and dropped by the process's budget) and shared by every snapshot
// that includes this state of the file.
struct LoadedSegment : std::enable_shared_from_this<LoadedSegment> {
  LoadedSegment();
  ~LoadedSegment();
  LoadedSegment(const LoadedSegment&) = delete;
  LoadedSegment& operator=(const LoadedSegment&) = delete;

  std::string file;  // "segments/<name>", for messages
  Env* env = nullptr;
  // The store's directory, shared by its segments; the file is path().
  std::shared_ptr<const std::string> root;
  std::string path() const { return *root + "/" + file; }
  format::SegmentIndex index;
  // Of the file when its index was read: a reopen must find the same file
  // (its inode, where the Env has inodes).
  FileInfo info;
  // Where the bytes that gave the index of a sealed segment lie, and their
  // hash (not the bytes): kept when the index came from the catalog (verify
  // compares the file with it) or the store may write a catalog (which reads
  // them again). Null otherwise.
  std::unique_ptr<const SegmentReadsDigest> reads;
  // The index came from the catalog, not the file: verify reads the file's
  // own and compares (the catalog is never trusted over a segment).
  bool from_catalog = false;

  // The segment's bytes for a read. Neither a sealed segment nor one being
  // written holds a descriptor or a mapping between reads that it was not
  // given by the process's budget (SegmentCache, docs/design.md#catalog):
  // the first read maps the file (and opens it again, if the budget dropped
  // it), so that a store of any number of segments needs a bounded number of
  // descriptors and mappings. NotFound (naming the file, "refresh and read
  // again") for a file removed or replaced since its index was read;
  // Corruption for one whose committed bytes are gone; ResourceExhausted
  // when the process is out of descriptors or mappings.
  Result<SegmentBytes> Open() const;
  // Whether the segment is mapped now (a hint: the budget may drop it).
  bool is_open() const { return mapped_.load(std::memory_order_acquire); }
  // Drops the resident pages of the mapping, if mapped.
  void ReleasePages() const;
  // `map->ReleasePages()`, as callers that free the pages of what they read
  // say it.
  struct PagesOf {
    const LoadedSegment* seg;
    const PagesOf* operator->() const { return this; }
    void ReleasePages() const { seg->ReleasePages(); }
  };
  const PagesOf map{this};

  // Checksums are verified once per block per loaded state, then trusted:
  // committed bytes never change (invariant 4).
  std::unique_ptr<std::atomic<bool>[]> verified;

  // A block with value chunks read lazily (Snapshot::GetLazy): its keys and
  // chunk table are checked, and `checked` has a bit per chunk checked.
  // Shared by every reader of this loaded state, like `verified`.
  struct LazyBlock {
    explicit LazyBlock(uint64_t chunks)
        : checked(std::make_unique<std::atomic<uint64_t>[]>((chunks + 63) / 64)),
          unchecked(chunks) {}
    std::unique_ptr<std::atomic<uint64_t>[]> checked;
    std::atomic<uint64_t> unchecked;
  };
  // The LazyBlock of `block`, made on first use; null if it has none yet and
  // `chunks` is 0.
  std::shared_ptr<LazyBlock> LazyBlockOf(uint32_t block, uint64_t chunks = 0) const;

  // For the budget (SegmentCache): whether the mapping (0) or the
  // descriptor (1) was used since the budget last asked, clearing the mark;
  // and dropping them.
  bool TakeUse(int kind) const { return used_[kind].exchange(false, std::memory_order_relaxed); }
  void Drop(int kind) const;

 private:
  // Whether reads use the descriptor: the segment holds a large value or one
  // with value chunks.
  bool KeepsFile() const;

  mutable Mutex open_mu_;
  mutable std::shared_ptr<const MappedRegion> map_ RUNSTORE_GUARDED_BY(open_mu_);
  mutable std::shared_ptr<const RandomAccessFile> file_ RUNSTORE_GUARDED_BY(open_mu_);
  mutable int8_t keeps_file_ RUNSTORE_GUARDED_BY(open_mu_) = -1;  // KeepsFile(), once known
  // LazyBlockOf's blocks, made with the first: most segments have none, and
  // a store of many segments holds one LoadedSegment each.
  mutable std::unique_ptr<std::unordered_map<uint32_t, std::shared_ptr<LazyBlock>>> lazy_blocks_
      RUNSTORE_GUARDED_BY(open_mu_);
  mutable std::atomic<bool> mapped_{false};
  mutable std::atomic<bool> admitted_{false};  // counted by the budget at some time
  mutable std::atomic<bool> used_[2] = {false, false};
};

// The order of a commit across all writers: commit time, then the segment's
// rank among all segments sorted by (writer id, sequence). Ranks only order:
// a snapshot gives its segments ranks spaced apart, so that one refreshed
// from it ranks new segments between them and keeps every other rank (and
// with them the blocks of the series no new segment touches).
struct CommitOrder {
  int64_t time_ns = 0;
  uint64_t segment_rank = 0;
  friend auto operator<=>(const CommitOrder&, const CommitOrder&) = default;
};

// A block's raw payload, parsed; keeps the bytes alive.
using Payload = format::DecodedBlock;

class SnapshotImpl final : public Snapshot {
 public:
  // Builds a snapshot of `segments`, sorted by (writer id, sequence), that
  // reports `damaged` as left out. With `skip_damaged`, a segment whose
  // resume markers cannot be read is left out too (and added to them);
  // otherwise that is an error.
  static Result<std::shared_ptr<SnapshotImpl>> Build(
      std::vector<std::shared_ptr<const LoadedSegment>> segments,
      std::vector<DamagedSegment> damaged = {}, bool skip_damaged = false);
  // The snapshot `prev` with the segments `added` (none of them in `prev`) and without `removed`
  // (segments of `prev`: an unsealed segment read again is removed and added), built in proportion
  // to the change: the series that no added or removed block belongs to are shared with `prev` as
  // they are, with their resolved keys. Resume markers added or removed make again the series
  // whose blocks may hold a run whose markers changed. Null when the change is not one it can make
  // so and give the snapshot that Build would (a series defined before the newest definition of
  // `prev`, a type conflict, ranks used up, damage, markers that cannot be read); the caller then
  // builds.
  static std::shared_ptr<SnapshotImpl> Extend(
      const SnapshotImpl& prev, std::vector<std::shared_ptr<const LoadedSegment>> added,
      const std::vector<const LoadedSegment*>& removed);

  Result<std::vector<SeriesInfo>> ListSeries(bool include_reserved) const override;
  Result<SeriesInfo> GetSeriesInfo(std::string_view name) const override;
  std::vector<SeriesInfo> ListSeriesTypes(bool include_reserved) const override;
  // Series `name`'s info but for its count (no key resolution), NotFound if
  // it has no block; and whether one of its blocks holds a string run id.
  Result<SeriesInfo> SeriesTypeOf(std::string_view name) const;
  Result<bool> SeriesHasStringRuns(std::string_view name) const;
  // The records the blocks of series `name` store (visible or not), from
  // their headers: what a scan of it reads at most. 0 for an unknown series.
  uint64_t StoredRecords(std::string_view name) const;
  Result<std::vector<RunId>> ListRuns() const override;
  Result<uint64_t> CountRuns() const override;
  std::vector<SegmentInfo> ListSegments() const override;
  const std::vector<DamagedSegment>& DamagedSegments() const override { return damaged_; }
  Result<Value> Get(RunRef run, std::string_view name, int64_t step) const override;
  Result<LazyValue> GetLazy(RunRef run, std::string_view name, int64_t step) const override;
  using Snapshot::Scan;
  Result<std::unique_ptr<SeriesScanner>> Scan(std::string_view name,
                                              const ScanOptions& options) const override;
  VerifyReport VerifyAll(const std::function<void(uint64_t, uint64_t)>& progress) const override;

  void ReleasePages() const override;

  // The schema of every series, for writers' conflict checks.
  StoreSchema Schema() const;
  // How many searches of a run's resume markers the reads of this snapshot
  // made: one per record or block checked against them, each a binary
  // search (docs/design.md#invariant-6). For tests that count, rather than
  // time, that resolution is not quadratic in the number of markers.
  uint64_t marker_searches() const { return marker_searches_.load(std::memory_order_relaxed); }
  // Blocks read (ReadPayload calls) through this snapshot (tests).
  uint64_t payload_reads() const { return payload_reads_.load(std::memory_order_relaxed); }
  // Footer run lists that filtered scans looked for a RunSet's runs in,
  // rather than taking the set's answer for a list it had seen (tests).
  uint64_t run_lists_searched() const {
    return run_lists_searched_.load(std::memory_order_relaxed);
  }
  // Records that key resolution sorted among the records of other blocks
  // (tests: a group of listed blocks sorts only the records of runs that
  // more than one of its blocks holds).
  uint64_t records_sorted_across_blocks() const {
    return records_sorted_across_blocks_.load(std::memory_order_relaxed);
  }
  const std::vector<std::shared_ptr<const LoadedSegment>>& segments() const { return segments_; }
  // Block references a build of this snapshot made (tests: a refresh that
  // adds one segment makes that segment's, not the store's).
  uint64_t blocks_placed() const { return blocks_placed_; }
  // Whether series `name` is the very entry of `other`'s, with what its
  // reads resolved (tests).
  bool SharesSeriesWith(const SnapshotImpl& other, std::string_view name) const;

  // 40 bytes, held for every block of the store. Within a segment, blocks
  // are indexed in the order of their frames, so the index orders the
  // blocks of a commit (the later frame wins).
  struct BlockRef {
    const LoadedSegment* segment;  // one of segments_, alive with them
    uint32_t block;                // index into its index.blocks
    CommitOrder commit;
    const format::BlockHeader* header;
    uint64_t offset() const { return segment->index.blocks[block].frame_offset; }
  };
  // A visible subset of one block's records, in block order.
  struct PlanItem {
    uint32_t block;  // index into SeriesEntry::blocks
    bool all_rows = true;
    std::vector<uint32_t> rows;  // when !all_rows
  };
  struct SeriesEntry {
    SeriesInfo info;
    CommitOrder defined;           // of the block that defined it (the earliest)
    std::vector<BlockRef> blocks;  // sorted by (segment rank, block)
    // The blocks by key, for lookups and key resolution: built on the first
    // read of the series (EnsureKeyOrder), not when the snapshot is built,
    // so that opening or refreshing a store of many segments does not sort
    // every series' blocks; then shared by every reader of the snapshot.
    mutable std::once_flag key_order_once;
    mutable std::vector<uint32_t> by_min_key;  // block indices sorted by min key
    // The block of largest max key among by_min_key[0..i]: where the ranges
    // do not nest, the few blocks before a key that reach it.
    mutable std::vector<uint32_t> prefix_max;
    mutable std::vector<uint32_t> max_tree;  // MaxKeyTree(by_min_key): where they do
    mutable std::once_flag plan_once;
    mutable Status plan_status;
    // The plan failed (damage, or a resource that ran out): a refreshed
    // snapshot makes the entry anew rather than share the failure.
    mutable std::atomic<bool> plan_failed{false};
    mutable std::vector<PlanItem> plan;
    // Which blocks hold a run, for lookups whose key ranges cannot narrow
    // the blocks down (hashed run ids spread every block's range over most
    // of the key space): built on the first such lookup (EnsureRunIndex),
    // from every block's run column, then shared by every lookup of the
    // snapshot. Entries are (RunHash(run), block index), sorted; a hash that
    // two runs share only adds a candidate, which is then compared exactly.
    mutable std::once_flag run_index_once;
    mutable std::vector<std::pair<uint64_t, uint32_t>> run_index;
    // Blocks the run index cannot name: blocks of integer runs in order,
    // which a sealed segment's footer does not list, and blocks whose
    // payload could not be read when the index was built (so that the lookup
    // reads them and reports their damage as it would without the index).
    // Sorted by min key; their key ranges decide (unindexed_tree).
    mutable std::vector<uint32_t> unindexed;
    mutable std::vector<uint32_t> unindexed_tree;  // MaxKeyTree(unindexed)
  };

  // Which blocks' key ranges hold a key, in O((k + 1) log n) for k of them,
  // however the ranges nest (one block whose range spans many runs, under
  // the blocks of each: a compacted segment and the segments written after
  // it). `order` holds block indices sorted by min key; the tree has
  // 2 * bit_ceil(n) nodes (1 is the root, leaves from bit_ceil(n) in
  // `order`'s order), each naming the block of largest max key below it
  // (kNoBlock for none), so a key past that max is in no block below.
  static constexpr uint32_t kNoBlock = UINT32_MAX;
  // Builds by_min_key, prefix_max and max_tree of `e`, once.
  static void EnsureKeyOrder(const SeriesEntry& e);
  // `order` (block indices) sorted by their blocks' min keys.
  static void SortByMinKey(const std::vector<BlockRef>& blocks, std::vector<uint32_t>* order);
  static std::vector<uint32_t> MaxKeyTree(const std::vector<BlockRef>& blocks,
                                          const std::vector<uint32_t>& order);
  // Appends to `out` the blocks among order[0, end) whose max key is at
  // least (run, step); false as soon as there are more than `limit`.
  static bool BlocksReaching(const std::vector<BlockRef>& blocks,
                             const std::vector<uint32_t>& order, const std::vector<uint32_t>& tree,
                             size_t end, const RunRef& run, int64_t step, size_t limit,
                             std::vector<uint32_t>* out);

  // What ReadPayload checks of a block not yet verified: everything, or, for
  // a block with value chunks, everything but the value data (GetLazy).
  enum class Check { kAll, kAllButValue };
  Result<Payload> ReadPayload(const BlockRef& b, Check check = Check::kAll) const;
  // False when the footer of b's sealed segment lists b's runs and none of
  // them has a hash in `run_hashes` (sorted; docs/format.md "Run index"): b
  // holds no record of those runs. True for a block not listed (integer runs
  // in order: its key range decides), or in a segment without a run index
  // (open, or of an older version). Get and a scan filtered to runs both ask
  // it, so they leave out the same blocks.
  bool MayHoldRuns(const BlockRef& b, std::span<const uint64_t> run_hashes) const;
  bool MayHoldRuns(const BlockRef& b, const RunSet& runs) const;
  // Every visible run of the non-reserved series, block by block (a run may
  // come more than once): to `hashes` the run-index lists of whole blocks
  // that have one, when `hashes` is set; each other run to `run`.
  Status ForEachRun(const std::function<void(std::span<const uint64_t>)>& hashes,
                    const std::function<void(const RunRef&)>& run) const;
  Status EnsurePlan(const SeriesEntry& e) const;
  // True when no key appears twice among the blocks of these payloads, for
  // the layouts they recognise (false otherwise, which proves nothing):
  // blocks whose keys each ascend by (run, step), none sharing a run over
  // overlapping steps; blocks whose keys each ascend by (step, run) over
  // (step, run) spans that do not overlap.
  static bool AscendingBlocksShareNoKey(const std::vector<Payload>& payloads);
  static bool StepMajorBlocksShareNoKey(const std::vector<Payload>& payloads);

 private:
  SnapshotImpl() = default;
  bool HiddenByResume(const RunRef& run, int64_t step, const CommitOrder& order) const;
  bool BlockMayBeHidden(const BlockRef& b) const;
  Status ComputePlan(const SeriesEntry& e) const;
  // Whether the blocks by_min_key[i..j) of `e`, whose run lists are
  // `lists`, provably share no key by the footers' run indexes alone: none
  // repeats a key (its keys ascend, or it has a run per record), none may be
  // hidden by a resume marker (unless `reserved`), and no run hash is in two
  // of them.
  bool GroupSharesNoRun(const SeriesEntry& e, size_t i, size_t j, bool reserved,
                        const std::vector<std::span<const uint64_t>>& lists,
                        const std::vector<uint64_t>& shared) const;
  // What the run lists of a group hold together: the hashes that more than
  // one of them lists (ascending) and how many distinct hashes they list.
  struct ListsTogether {
    std::vector<uint64_t> shared;
    // Whether at most a quarter of the runs are in several lists: the group
    // is then resolved block by block (ResolveListedGroup).
    bool by_lists = false;
    // With by_lists, of each list in order, its hashes that are in `shared`.
    std::vector<std::vector<uint64_t>> shared_of;
  };
  // Merged once per distinct sequence of lists and kept: the series of one
  // log_many (a sweep's status fields) have the same lists, one per commit.
  std::shared_ptr<const ListsTogether> Together(
      const std::vector<std::span<const uint64_t>>& lists) const;
  // The run lists of the blocks by_min_key[i..j) of `e`, or false if one
  // has none (a segment still being written, an older format).
  bool GroupRunLists(const SeriesEntry& e, size_t i, size_t j,
                     std::vector<std::span<const uint64_t>>* lists) const;
  // Resolves a group of blocks that all have run lists, one block at a
  // time: a record whose run no other block of the group holds competes only
  // with its own block's records (the later row wins), and only the records
  // of runs that several blocks hold are sorted together. Appends the plan
  // items of the group to `plan`.
  // `together`: what the blocks' lists hold together (Together(lists)).
  Status ResolveListedGroup(const SeriesEntry& e, size_t i, size_t j, bool reserved,
                            const std::vector<std::span<const uint64_t>>& lists,
                            const ListsTogether& together, std::vector<PlanItem>* plan,
                            uint64_t* count) const;
  // The block and row of the visible record under (run, name, step), its
  // payload read with `check`.
  struct Found {
    const BlockRef* block;
    uint32_t row;
    Payload payload;
  };
  Result<Found> Find(RunRef run, std::string_view name, int64_t step, Check check) const;
  void EnsureRunIndex(const SeriesEntry& e) const;

  // Gives every segment a rank, spaced apart (Extend ranks between them).
  void RankSegments();
  std::vector<std::shared_ptr<const LoadedSegment>> segments_;  // by (writer id, sequence)
  std::vector<uint64_t> ranks_;                                 // of segments_[i], ascending
  std::vector<DamagedSegment> damaged_;
  // Shared with the snapshots refreshed from this one while no block of the
  // series changes (Extend): never changed once built (but for what reads
  // resolve lazily, once).
  std::map<std::string, std::shared_ptr<SeriesEntry>, std::less<>> series_;
  // The latest commit that first defined a series: a series that a later
  // refresh finds defined before it would be numbered otherwise
  // (SeriesInfo::first_logged), which Extend leaves to Build.
  CommitOrder latest_definition_;
  uint64_t blocks_placed_ = 0;
  // The resume markers of one run, sorted by step, with the latest commit
  // order of the markers at or below each step: a record is hidden when a
  // marker at a step <= its own has a later commit, one binary search
  // whatever the number of markers (docs/format.md "Resolving keys").
  struct RunMarkers {
    std::vector<int64_t> steps;
    std::vector<CommitOrder> latest;  // latest[i]: max order of markers 0..i
    // True when a marker at a step <= `step` comes after `order`.
    bool Hides(int64_t step, const CommitOrder& order) const;
  };
  // Orders RunIds and RunRefs alike, so that a lookup by a borrowed run id
  // needs no copy.
  struct RunLess {
    using is_transparent = void;
    bool operator()(const RunId& a, const RunId& b) const { return a < b; }
    bool operator()(const RunId& a, const RunRef& b) const;
    bool operator()(const RunRef& a, const RunId& b) const;
  };
  using ResumeMap = std::map<RunId, RunMarkers, RunLess>;
  // Null without markers; shared with the snapshots refreshed from this one
  // while their markers stay the same.
  std::shared_ptr<const ResumeMap> resume_;
  // The markers of the blocks of `markers` (the resume series), read through
  // this snapshot.
  Result<std::shared_ptr<const ResumeMap>> ReadMarkers(const SeriesEntry& markers) const;
  mutable std::atomic<uint64_t> marker_searches_{0};
  mutable std::atomic<uint64_t> run_lists_searched_{0};
  // Tells this snapshot from every other of the process, also one made
  // later where this one was (a RunSet's memo of run lists, scan.cc).
  const uint64_t serial_ = NextSerial();
  static uint64_t NextSerial() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  mutable std::atomic<uint64_t> payload_reads_{0};
  mutable std::atomic<uint64_t> records_sorted_across_blocks_{0};
  mutable Mutex together_mu_;
  // Keyed by the lists' data pointers and sizes (the footers' lists, alive
  // with the snapshot's segments).
  mutable std::map<std::vector<std::pair<const uint64_t*, size_t>>,
                   std::shared_ptr<const ListsTogether>>
      together_ RUNSTORE_GUARDED_BY(together_mu_);
  std::vector<std::string> conflicts_;
  mutable std::once_flag runs_once_;
  mutable Status runs_status_;
  mutable std::vector<RunId> runs_;
};

}  // namespace runstore::read

#endif  // RUNSTORE_STORE_READ_SNAPSHOT_H_
