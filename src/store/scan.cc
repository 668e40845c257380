// Scans (Snapshot::Scan): the visible records of a series, batch by batch,
// filtered by runs and steps.
#include <algorithm>
#include <cstring>
#include <optional>

#include "store/snapshot.h"
#include "store/snapshot_helpers.h"

namespace runstore {

using format::BlockHeader;
using format::Key;

namespace {

// The runs a scan is restricted to, sorted for lookups.
class RunFilter {
 public:
  explicit RunFilter(std::vector<RunId> runs) : runs_(std::move(runs)) {
    std::sort(runs_.begin(), runs_.end());
  }
  // Whether a wanted run lies in [lo, hi].
  bool Overlaps(const RunRef& lo, const RunRef& hi) const {
    auto it = std::lower_bound(runs_.begin(), runs_.end(), lo, [](const RunId& a, const RunRef& b) {
      return CompareRunRef(b, a) > 0;
    });
    return it != runs_.end() && CompareRunRef(hi, *it) >= 0;
  }
  bool Holds(const RunRef& run) const {
    auto it =
        std::lower_bound(runs_.begin(), runs_.end(), run,
                         [](const RunId& a, const RunRef& b) { return CompareRunRef(b, a) > 0; });
    return it != runs_.end() && CompareRunRef(run, *it) == 0;
  }

 private:
  std::vector<RunId> runs_;
};

class ScannerImpl final : public SeriesScanner {
 public:
  ScannerImpl(const SnapshotImpl* snap, const SnapshotImpl::SeriesEntry* e,
              const ScanOptions& options)
      : snap_(snap), e_(e), keys_(options.keys), steps_(options.steps) {
    if (options.runs) {
      filter_.emplace(*options.runs);
      for (const RunId& r : *options.runs) filter_hashes_.push_back(format::RunHash(RunRef(r)));
      std::sort(filter_hashes_.begin(), filter_hashes_.end());
    }
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
      if (filter_ && !snap_->MayHoldRuns(e_->blocks[item.block], filter_hashes_)) continue;
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
  std::optional<RunFilter> filter_;
  std::vector<uint64_t> filter_hashes_;  // RunHash of the filter's runs, sorted
  std::vector<uint32_t> selected_;       // the rows of a block that the filter keeps
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

}  // namespace runstore
