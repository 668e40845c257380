// Scans (Snapshot::Scan): the visible records of a series, batch by batch,
// filtered by runs and steps.
#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"
#include "util/mutex.h"

namespace runstore {

using read::CompareRunRef;

// The runs sorted, for the key ranges of blocks, and by hash: an open
// addressing table, in which a record's run is found with one probe or a few
// (its run compared only where the hashes agree), and the hashes sorted, as
// the footers' run index lists them.
struct RunSet::Index {
  static constexpr uint32_t kEmpty = UINT32_MAX;
  std::vector<RunId> sorted;
  std::vector<std::pair<uint64_t, uint32_t>> table;  // (hash, position in sorted) or kEmpty
  std::vector<uint64_t> hashes;                      // sorted, each once

  // One bit per 16 runs' worth of the hash space, set for each run's hash: a
  // run not in the set is told apart by one bit in most cases (1 in 16 looks
  // further), in a table of a few bytes per run that stays in the cache while
  // a scan looks up every run a block lists.
  std::vector<uint64_t> bits;
  int bits_shift = 63;

  size_t Slot(uint64_t h) const { return (h * 0x9E3779B97F4A7C15ull) >> shift; }
  bool MayHold(uint64_t h) const {
    const uint64_t bit = h >> bits_shift;
    return (bits[bit >> 6] >> (bit & 63)) & 1;
  }
  int shift = 63;

  // Whether each run list of a footer's run index that a scan looked at
  // holds one of the runs. The series of one log_many share their lists
  // (docs/format.md, "Shared run index"), so the scans of several series
  // with one set (read_aligned) look each list up once. A list is known by
  // where it lies in the snapshot the answers are of (its serial): the
  // snapshot a scan reads is alive, and with it its lists, so no address is
  // reused while its answer is trusted; a scan of another snapshot starts
  // the memo again.
  struct Seen {
    size_t size;
    bool holds;
  };
  mutable Mutex memo_mu;
  mutable uint64_t memo_serial RUNSTORE_GUARDED_BY(memo_mu) = 0;
  mutable std::unordered_map<const uint64_t*, Seen> memo RUNSTORE_GUARDED_BY(memo_mu);
};

RunSet::RunSet(std::vector<RunId> runs) {
  auto index = std::make_shared<Index>();
  std::sort(runs.begin(), runs.end());
  runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
  index->sorted = std::move(runs);
  const size_t n = index->sorted.size();
  size_t slots = 2;
  while (slots < 2 * n) slots *= 2;
  index->shift = 64 - std::countr_zero(slots);
  index->table.assign(slots, {0, Index::kEmpty});
  const size_t bits = std::max<size_t>(64, 8 * slots);  // 16 per run, or more
  index->bits_shift = 64 - std::countr_zero(bits);
  index->bits.assign(bits / 64, 0);
  index->hashes.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t h = format::RunHash(RunRef(index->sorted[i]));
    size_t at = index->Slot(h);
    while (index->table[at].second != Index::kEmpty) at = (at + 1) & (slots - 1);
    index->table[at] = {h, i};
    const uint64_t bit = h >> index->bits_shift;
    index->bits[bit >> 6] |= uint64_t{1} << (bit & 63);
    index->hashes.push_back(h);
  }
  std::sort(index->hashes.begin(), index->hashes.end());
  index->hashes.erase(std::unique(index->hashes.begin(), index->hashes.end()), index->hashes.end());
  index_ = std::move(index);
}

size_t RunSet::size() const { return index_->sorted.size(); }

bool RunSet::Holds(const RunRef& run) const { return HoldsHash(format::RunHash(run), &run); }

bool RunSet::HoldsHash(uint64_t h, const RunRef* run) const {
  const Index& x = *index_;
  if (!x.MayHold(h)) return false;
  const size_t mask = x.table.size() - 1;
  for (size_t at = x.Slot(h); x.table[at].second != Index::kEmpty; at = (at + 1) & mask) {
    if (x.table[at].first != h) continue;
    if (run == nullptr || CompareRunRef(*run, x.sorted[x.table[at].second]) == 0) return true;
  }
  return false;
}

bool RunSet::Overlaps(const RunRef& lo, const RunRef& hi) const {
  const auto& sorted = index_->sorted;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), lo, [](const RunId& a, const RunRef& b) {
    return CompareRunRef(b, a) > 0;
  });
  return it != sorted.end() && CompareRunRef(hi, *it) >= 0;
}

}  // namespace runstore

namespace runstore::read {

using format::BlockHeader;
using format::Key;

bool SnapshotImpl::MayHoldRuns(const BlockRef& b, const RunSet& runs) const {
  const auto& ri = b.segment->index.run_index;
  if (!ri) return true;
  const auto listed = ri->Of(b.block);
  if (listed.empty()) return true;
  const RunSet::Index& x = *runs.index_;
  {
    MutexLock lock(&x.memo_mu);
    if (x.memo_serial != serial_) {
      x.memo.clear();
      x.memo_serial = serial_;
    }
    auto it = x.memo.find(listed.data());
    if (it != x.memo.end() && it->second.size == listed.size()) return it->second.holds;
  }
  // A block's few runs are looked up in the set's table; a set of fewer runs
  // than the block lists is searched in the block's sorted list.
  run_lists_searched_.fetch_add(1, std::memory_order_relaxed);
  const bool holds = listed.size() <= runs.size()
                         ? std::any_of(listed.begin(), listed.end(),
                                       [&](uint64_t h) { return runs.HoldsHash(h, nullptr); })
                         : MayHoldRuns(b, x.hashes);
  MutexLock lock(&x.memo_mu);
  if (x.memo_serial == serial_) x.memo[listed.data()] = {listed.size(), holds};
  return holds;
}

namespace {

class ScannerImpl final : public SeriesScanner {
 public:
  ScannerImpl(const SnapshotImpl* snap, const SnapshotImpl::SeriesEntry* e,
              const ScanOptions& options)
      : snap_(snap), e_(e), keys_(options.keys), steps_(options.steps) {
    if (options.runs) filter_.emplace(*options.runs);
  }

  Result<bool> Next(ScanBatch* batch) override {
    *batch = ScanBatch();
    while (pos_ < e_->plan.size()) {
      const SnapshotImpl::PlanItem& item = e_->plan[pos_++];
      const BlockHeader& h = *e_->blocks[item.block].header;
      // Keys are ordered by run first, so a block's runs lie between those
      // of its smallest and largest keys; its header also has its step range.
      const bool one_run = h.min_key.run == h.max_key.run;
      if (filter_ && !filter_->Overlaps(h.min_key.run, h.max_key.run)) continue;
      // Hashed ids spread every block's key range over the whole key space, so
      // the range alone rules out none: the footer's run index does.
      if (filter_ && !snap_->MayHoldRuns(e_->blocks[item.block], *filter_)) continue;
      if (steps_ && (h.max_step < steps_->first || h.min_step > steps_->last)) continue;
      RUNSTORE_ASSIGN_OR_RETURN(Payload p, snap_->ReadPayload(e_->blocks[item.block]));
      const bool steps_within =
          !steps_ || (h.min_step >= steps_->first && h.max_step <= steps_->last);
      if ((!filter_ || one_run) && steps_within) {
        return Fill(h, p, item.all_rows, item.rows, batch);
      }
      selected_.clear();
      const uint32_t n = item.all_rows ? p.view.count() : static_cast<uint32_t>(item.rows.size());
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t r = item.all_rows ? i : item.rows[i];
        if (filter_ && !filter_->Holds(p.view.run(r))) continue;
        if (steps_ && (p.view.step(r) < steps_->first || p.view.step(r) > steps_->last)) continue;
        selected_.push_back(r);
      }
      if (selected_.empty()) continue;
      const bool all = item.all_rows && selected_.size() == n;
      return Fill(h, p, all, selected_, batch);
    }
    return false;
  }

 private:
  // Fills *batch with rows `rows` of a block (every row when `all_rows`).
  Result<bool> Fill(const BlockHeader& h, const Payload& p, bool all_rows,
                    const std::vector<uint32_t>& rows, ScanBatch* batch) {
    const auto& v = p.view;
    const size_t n = all_rows ? v.count() : rows.size();
    auto row = [&](size_t i) { return all_rows ? static_cast<uint32_t>(i) : rows[i]; };
    batch->count = n;
    const bool fixed = !IsVarLength(h.dtype) && !h.variable_shape;
    // Key columns are views of the payload where they are stored plainly and
    // every row is wanted; the others are gathered into one owned buffer.
    const bool gather_keys = keys_ && (!all_rows || v.run_encoding() != format::RunEncoding::kInt ||
                                       v.steps_data() == nullptr || v.int_runs_data() == nullptr);
    if (!gather_keys) {
      batch->owner = p.owner;
      if (keys_) {
        batch->keys_zero_copy = p.mapping != nullptr;
        batch->steps = {reinterpret_cast<const int64_t*>(v.steps_data()), n};
        batch->int_runs = {reinterpret_cast<const int64_t*>(v.int_runs_data()), n};
      }
    }
    std::shared_ptr<char> keys;
    if (gather_keys) {
      keys = AlignedBuffer(16 * n);
      auto* ir = reinterpret_cast<int64_t*>(keys.get());
      auto* st = ir + n;
      const bool strings = v.run_encoding() != format::RunEncoding::kInt;
      if (strings) {
        batch->run_is_string.resize(n);
        batch->string_runs.resize(n);
      }
      if (all_rows && !strings) {
        v.CopyIntRuns(ir);  // whole columns: a copy, or the sequences expanded
        v.CopySteps(st);
      } else {
        for (size_t i = 0; i < n; ++i) {
          const uint32_t r = row(i);
          st[i] = v.step(r);
          if (strings && v.run_is_string(r)) {
            ir[i] = 0;
            batch->run_is_string[i] = 1;
            batch->string_runs[i] = v.run_string(r);
          } else {
            ir[i] = v.run_int(r);
          }
        }
      }
      batch->int_runs = {ir, n};
      batch->steps = {st, n};
    }
    if (fixed) {
      std::vector<int64_t> shape{static_cast<int64_t>(n)};
      shape.insert(shape.end(), h.dims.begin(), h.dims.end());
      const size_t rb = v.record_bytes();
      if (all_rows) {
        batch->values = PayloadValue(p, h.dtype, std::move(shape), v.fixed_values(), rb * n);
      } else {
        auto buf = AlignedBuffer(rb * n);
        for (size_t i = 0; i < n; ++i)
          std::memcpy(buf.get() + i * rb, v.fixed_values() + row(i) * rb, rb);
        const char* data = buf.get();
        batch->values = Value(h.dtype, std::move(shape), data, rb * n, std::move(buf), false);
      }
    } else {
      batch->records.reserve(n);
      for (size_t i = 0; i < n; ++i) batch->records.push_back(MakeRecordValue(h, p, row(i)));
    }
    if (keys) {
      // The batch owns the gathered keys and, through the values, the payload.
      struct Both {
        std::shared_ptr<const void> a, b;
      };
      batch->owner = std::make_shared<Both>(Both{p.owner, keys});
    }
    return true;
  }

  const SnapshotImpl* snap_;
  const SnapshotImpl::SeriesEntry* e_;
  const bool keys_;  // ScanOptions::keys
  const std::optional<ScanOptions::StepRange> steps_;
  std::optional<RunSet> filter_;
  std::vector<uint32_t> selected_;  // the rows of a block that the filter keeps
  size_t pos_ = 0;
};

}  // namespace

Result<std::unique_ptr<SeriesScanner>> SnapshotImpl::Scan(std::string_view name,
                                                          const ScanOptions& options) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  RUNSTORE_RETURN_IF_ERROR(EnsurePlan(*it->second));
  return std::unique_ptr<SeriesScanner>(new ScannerImpl(this, it->second.get(), options));
}

}  // namespace runstore::read
