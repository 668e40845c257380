// Lazy values (Snapshot::GetLazy): a large array whose chunks are checked as
// its reader reaches them.
#include <algorithm>

#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"

namespace runstore::read {

using format::BlockHeader;
using format::Key;

namespace {

// Checks the chunks of a value as its reader reaches them, each once.
class ChunkChecker final : public LazyValue::Checker {
 public:
  ChunkChecker(std::shared_ptr<const LoadedSegment> seg, uint32_t block, const Payload& p)
      : seg_(std::move(seg)),
        block_(block),
        mapping_(p.mapping),
        stored_(p.bytes),
        view_(p.view),
        state_(seg_->LazyBlockOf(block, chunks().count)) {}

  Status Check(std::span<const LazyValue::Range> ranges) const override {
    if (all_checked()) return Status::OK();
    // The runs [first, last) of chunks not checked yet, merged.
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    for (const LazyValue::Range& r : ranges) {
      if (r.len == 0) continue;
      const uint64_t last =
          std::min(chunks().count, ((r.offset + r.len - 1) >> chunks().shift) + 1);
      for (uint64_t i = r.offset >> chunks().shift; i < last; ++i) {
        if (IsChecked(i)) continue;
        if (!runs.empty() && runs.back().second == i) {
          ++runs.back().second;
        } else {
          runs.emplace_back(i, i + 1);
        }
      }
    }
    if (runs.empty()) return Status::OK();
    std::sort(runs.begin(), runs.end());
    size_t kept = 0;
    for (size_t k = 1; k < runs.size(); ++k) {
      if (runs[k].first <= runs[kept].second) {
        runs[kept].second = std::max(runs[kept].second, runs[k].second);
      } else {
        runs[++kept] = runs[k];
      }
    }
    runs.resize(kept + 1);
    // Ask for them before hashing them (through the mapping), so that the
    // file system reads them in parallel; and ask for exactly them: a page
    // fault's read-around would also read the blocks next to them. At most
    // kAhead bytes are asked for ahead of the hashing, so that checking a
    // range larger than memory does not fill the page cache with pages that
    // are evicted before they are hashed. Runs are cut to kPiece bytes.
    constexpr uint64_t kAhead = uint64_t{64} << 20, kPiece = uint64_t{8} << 20;
    const uint64_t piece_chunks = std::max<uint64_t>(1, kPiece >> chunks().shift);
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    for (const auto& [first, last] : runs) {
      for (uint64_t at = first; at < last; at += piece_chunks) {
        pieces.emplace_back(at, std::min(last, at + piece_chunks));
      }
    }
    const format::BlockInfo& info = seg_->index.blocks[block_];
    auto bytes = [&](const std::pair<uint64_t, uint64_t>& p) {
      return chunks().end(p.second - 1) - chunks().begin(p.first);
    };
    // The file, for the hints (none if the budget cannot give it now).
    std::shared_ptr<const RandomAccessFile> file;
    if (auto bytes = seg_->Open(); bytes.ok()) file = bytes->file;
    size_t asked = 0;
    uint64_t ahead = 0;  // bytes asked for and not yet hashed
    for (size_t k = 0; k < pieces.size(); ++k) {
      while (asked < pieces.size() && (asked <= k || ahead + bytes(pieces[asked]) <= kAhead)) {
        if (file) {
          file->WillNeed(
              info.payload_offset + chunks().data_offset + chunks().begin(pieces[asked].first),
              bytes(pieces[asked]));
        }
        ahead += bytes(pieces[asked++]);
      }
      RUNSTORE_RETURN_IF_ERROR(CheckRun(pieces[k].first, pieces[k].second));
      ahead -= bytes(pieces[k]);
    }
    return Status::OK();
  }

  bool all_checked() const override {
    return seg_->verified[block_].load(std::memory_order_acquire);
  }

 private:
  const format::ValueChunks& chunks() const { return *view_.value_chunks(); }

  bool IsChecked(uint64_t i) const {
    return (state_->checked[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
  }

  Status CheckRun(uint64_t first, uint64_t last) const {
    const format::BlockInfo& info = seg_->index.blocks[block_];
    RUNSTORE_RETURN_IF_ERROR(
        format::CheckValueChunks(stored_, view_, first, last, info, seg_->file));
    uint64_t newly = 0;
    for (uint64_t i = first; i < last; ++i) {
      const uint64_t bit = uint64_t{1} << (i % 64);
      if (!(state_->checked[i / 64].fetch_or(bit, std::memory_order_acq_rel) & bit)) ++newly;
    }
    if (newly != 0 && state_->unchecked.fetch_sub(newly, std::memory_order_acq_rel) == newly) {
      seg_->verified[block_].store(true, std::memory_order_release);
    }
    return Status::OK();
  }

  std::shared_ptr<const LoadedSegment> seg_;
  uint32_t block_;
  std::shared_ptr<const MappedRegion> mapping_;  // keeps stored_ alive
  std::string_view stored_;
  format::BlockView view_;
  std::shared_ptr<LoadedSegment::LazyBlock> state_;  // what is checked
};

}  // namespace

Result<LazyValue> SnapshotImpl::GetLazy(RunRef run, std::string_view name, int64_t step) const {
  RUNSTORE_ASSIGN_OR_RETURN(Found f, Find(run, name, step, Check::kAllButValue));
  const BlockRef& b = *f.block;
  Value value = MakeRecordValue(*b.header, f.payload, f.row);
  std::shared_ptr<const LoadedSegment> seg = b.segment->shared_from_this();
  if (seg->verified[b.block].load(std::memory_order_acquire))
    return LazyValue(std::move(value), nullptr);
  if (f.payload.view.value_chunks()->count == 0) {
    seg->verified[b.block].store(true, std::memory_order_release);  // no value data
    return LazyValue(std::move(value), nullptr);
  }
  return LazyValue(std::move(value), std::make_shared<ChunkChecker>(seg, b.block, f.payload));
}

}  // namespace runstore::read
