// Building a snapshot from loaded segments (series, their blocks, the resume
// markers), reading a block's payload once checked, and listing what a
// snapshot holds (reader.h: Snapshot).
#include "store/read/snapshot.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_set>

#include "store/read/segment_cache.h"
#include "store/read/snapshot_helpers.h"
#include "util/sort.h"

namespace runstore {

Status Snapshot::Verify(uint64_t* blocks_checked) const {
  VerifyReport r = VerifyAll();
  if (blocks_checked) *blocks_checked = r.blocks_checked;
  if (!r.problems.empty()) return r.problems.front();
  return r.unchecked.empty() ? Status::OK() : r.unchecked.front();
}

RunId ScanBatch::run(size_t i) const { return run_ref(i).ToRunId(); }

}  // namespace runstore

namespace runstore::read {

using format::BlockHeader;
using format::Key;

namespace {
// Uncompressed blocks at least this large are verified by reading rather than
// through the mapping (see ReadPayload).
constexpr uint64_t kVerifyByReadingBytes = uint64_t{1} << 20;
}  // namespace

LoadedSegment::LoadedSegment() = default;

LoadedSegment::~LoadedSegment() {
  if (admitted_.load(std::memory_order_acquire)) SegmentCache::Process().Forget(this);
}

bool LoadedSegment::KeepsFile() const {
  // Large values are checked by reading and chunked ones prefetched: only
  // those are read through the descriptor.
  return std::any_of(index.blocks.begin(), index.blocks.end(), [](const auto& b) {
    return b.header.payload_len >= kVerifyByReadingBytes ||
           (b.header.flags & format::kBlockValueChunks);
  });
}

Result<SegmentBytes> LoadedSegment::Open() const {
  bool new_map = false, new_file = false;
  SegmentBytes out;
  {
    MutexLock lock(&open_mu_);
    if (keeps_file_ < 0) keeps_file_ = KeepsFile() ? 1 : 0;
    const bool keeps_file = keeps_file_ == 1;
    if (map_ == nullptr || (keeps_file && file_ == nullptr)) {
      std::shared_ptr<const RandomAccessFile> f = file_;
      if (f == nullptr) {
        auto h = env->NewRandomAccessFile(path());
        if (!h.ok()) {
          if (h.status().code() != StatusCode::kNotFound) return h.status();
          return Status::NotFound(file +
                                  ": the segment was removed after this snapshot was taken "
                                  "(replaced by a compaction?); refresh and read again");
        }
        RUNSTORE_ASSIGN_OR_RETURN(const FileInfo now, (*h)->Info());
        if (info.inode != 0 && now.inode != 0 && now.inode != info.inode) {
          return Status::NotFound(file +
                                  ": the segment was replaced by another file after this "
                                  "snapshot was taken; refresh and read again");
        }
        // Committed bytes never change (invariant 4): a sealed segment keeps
        // its size, and one being written only grows.
        if (index.sealed ? now.size != index.file_size : now.size < index.committed_end) {
          return Status::Corruption(file + ": the " +
                                    (index.sealed ? std::string("sealed segment's size changed")
                                                  : std::string("segment shrank")) +
                                    " from " + std::to_string(index.file_size) + " to " +
                                    std::to_string(now.size) + " bytes since its index was read");
        }
        f = std::move(h).value();
      }
      if (map_ == nullptr) {
        RUNSTORE_ASSIGN_OR_RETURN(map_, f->Map(index.committed_end));
        mapped_.store(true, std::memory_order_release);
        new_map = true;
      }
      if (keeps_file && file_ == nullptr) {
        file_ = std::move(f);
        new_file = true;
      }
    }
    out = SegmentBytes{map_, file_};
  }
  // Marks for the budget's second chance (a store only when it changes: no
  // cache line bounces between readers of one segment).
  for (const int kind : {SegmentCache::kMapping, SegmentCache::kFile}) {
    if (!used_[kind].load(std::memory_order_relaxed)) {
      used_[kind].store(true, std::memory_order_relaxed);
    }
  }
  if (new_map || new_file) {
    // A segment not owned by a shared_ptr (a test's) is never dropped.
    if (std::shared_ptr<const LoadedSegment> self = weak_from_this().lock()) {
      admitted_.store(true, std::memory_order_release);
      if (new_map) SegmentCache::Process().Admit(SegmentCache::kMapping, self);
      if (new_file) SegmentCache::Process().Admit(SegmentCache::kFile, self);
    }
  }
  return out;
}

void LoadedSegment::Drop(int kind) const {
  std::shared_ptr<const MappedRegion> map;
  std::shared_ptr<const RandomAccessFile> f;
  {
    MutexLock lock(&open_mu_);
    if (kind == SegmentCache::kMapping) {
      map = std::move(map_);
      map_ = nullptr;
      mapped_.store(false, std::memory_order_release);
    } else {
      f = std::move(file_);
      file_ = nullptr;
    }
  }
  // Unmapped and closed here, outside the lock (unless a reader holds them).
}

void LoadedSegment::ReleasePages() const {
  std::shared_ptr<const MappedRegion> map;
  {
    MutexLock lock(&open_mu_);
    map = map_;
  }
  if (map) map->ReleasePages();
}

namespace {

using BlockRef = SnapshotImpl::BlockRef;
using SeriesEntry = SnapshotImpl::SeriesEntry;

bool ByWriter(const std::shared_ptr<const LoadedSegment>& a,
              const std::shared_ptr<const LoadedSegment>& b) {
  const format::SegmentHeader& x = a->index.header;
  const format::SegmentHeader& y = b->index.header;
  if (x.writer_id != y.writer_id) return x.writer_id < y.writer_id;
  return x.sequence < y.sequence;
}

// Appends the blocks of `seg`, ranked `rank`, to `out`.
void AppendBlocks(const LoadedSegment& seg, uint64_t rank, std::vector<BlockRef>* out) {
  const format::SegmentIndex& idx = seg.index;
  for (uint32_t bi = 0; bi < idx.blocks.size(); ++bi) {
    const format::BlockInfo& b = idx.blocks[bi];
    out->push_back(
        BlockRef{&seg, bi, CommitOrder{idx.commits[b.commit_index].time_ns, rank}, &b.header});
  }
}

void SortByCommit(std::vector<BlockRef>* blocks) {
  std::stable_sort(blocks->begin(), blocks->end(), [](const BlockRef& a, const BlockRef& b) {
    return std::tie(a.commit, a.block) < std::tie(b.commit, b.block);
  });
}

bool BySegmentThenBlock(const BlockRef& a, const BlockRef& b) {
  return std::tie(a.commit.segment_rank, a.block) < std::tie(b.commit.segment_rank, b.block);
}

// A series that block `b` defines, numbered `first_logged`.
std::shared_ptr<SeriesEntry> NewEntry(const BlockRef& b, uint64_t first_logged) {
  const BlockHeader& h = *b.header;
  auto e = std::make_shared<SeriesEntry>();
  e->info.name = h.name;
  e->info.dtype = h.dtype;
  e->info.variable_shape = h.variable_shape;
  e->info.shape = h.variable_shape ? std::vector<int64_t>{} : h.dims;
  e->info.first_logged = first_logged;
  e->defined = b.commit;
  return e;
}

bool SameType(const SeriesInfo& info, const BlockHeader& h) {
  return h.dtype == info.dtype && h.variable_shape == info.variable_shape &&
         (h.variable_shape || h.dims == info.shape);
}

// Ranks far enough apart that segments added between two of them (a
// writer's next segments, ranked a step past its last) rarely use the gap
// up; when they do, the snapshot is built anew and ranked again.
constexpr uint64_t kRankStep = uint64_t{1} << 32;

}  // namespace

// Held for every block of a store by every reader (docs/design.md#block-index-memory).
static_assert(sizeof(SnapshotImpl::BlockRef) <= 40, "a block reference grew");

void SnapshotImpl::RankSegments() {
  const uint64_t spacing = UINT64_MAX / (segments_.size() + 1);
  ranks_.resize(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) ranks_[i] = spacing * (i + 1);
}

bool SnapshotImpl::SharesSeriesWith(const SnapshotImpl& other, std::string_view name) const {
  auto a = series_.find(name);
  auto b = other.series_.find(name);
  return a != series_.end() && b != other.series_.end() && a->second == b->second;
}

std::shared_ptr<SnapshotImpl> SnapshotImpl::Extend(
    const SnapshotImpl& prev, std::vector<std::shared_ptr<const LoadedSegment>> added,
    const std::vector<const LoadedSegment*>& removed) {
  if (!prev.damaged_.empty()) return nullptr;
  std::sort(added.begin(), added.end(), ByWriter);
  auto holds_markers = [](const LoadedSegment& seg) {
    return std::ranges::any_of(seg.index.blocks, [](const format::BlockInfo& b) {
      return b.header.name == kResumeSeries;
    });
  };
  const bool markers_change =
      std::ranges::any_of(removed, [&](const LoadedSegment* s) { return holds_markers(*s); }) ||
      std::ranges::any_of(added, [&](const auto& s) { return holds_markers(*s); });
  std::shared_ptr<SnapshotImpl> snap(new SnapshotImpl());
  // The segments, merged by (writer id, sequence); an added segment takes
  // the rank of a removed one of its name (an unsealed segment read again:
  // its blocks keep their commit order), or one between its neighbours'.
  std::unordered_set<const LoadedSegment*> gone(removed.begin(), removed.end());
  const size_t n = prev.segments_.size() - removed.size() + added.size();
  snap->segments_.reserve(n);
  snap->ranks_.reserve(n);
  std::vector<BlockRef> fresh;  // the added segments' blocks
  size_t i = 0;                 // into prev
  for (size_t a = 0; a <= added.size(); ++a) {
    // prev's segments before added[a] (all of them after the last).
    uint64_t freed = 0;  // the rank of a removed segment of added[a]'s name
    while (i < prev.segments_.size() &&
           (a == added.size() || ByWriter(prev.segments_[i], added[a]) ||
            !ByWriter(added[a], prev.segments_[i]))) {
      const auto& seg = prev.segments_[i];
      const bool same_name =
          a < added.size() && !ByWriter(seg, added[a]) && !ByWriter(added[a], seg);
      if (!gone.contains(seg.get())) {
        if (same_name) return nullptr;  // added, yet not removed
        snap->segments_.push_back(seg);
        snap->ranks_.push_back(prev.ranks_[i]);
      } else if (same_name) {
        freed = prev.ranks_[i];
      }
      ++i;
    }
    if (a == added.size()) break;
    uint64_t rank = freed;
    if (rank == 0) {
      const uint64_t lo = snap->ranks_.empty() ? 0 : snap->ranks_.back();
      const uint64_t hi = i < prev.segments_.size() ? prev.ranks_[i] : UINT64_MAX;
      if (hi - lo < 2) return nullptr;  // no rank left between them
      rank = lo + std::min((hi - lo) / 2, kRankStep);
    }
    snap->segments_.push_back(added[a]);
    snap->ranks_.push_back(rank);
    AppendBlocks(*added[a], rank, &fresh);
  }
  if (snap->segments_.size() != n) return nullptr;  // a removed segment not in prev

  // The added blocks in commit order, placed in their series: an existing
  // series must have defined itself before them, with their type; a new
  // one must come after every series of prev (its number follows theirs).
  SortByCommit(&fresh);
  snap->blocks_placed_ = fresh.size();
  snap->series_ = prev.series_;
  snap->latest_definition_ = prev.latest_definition_;
  // The series the change touches are made anew: prev's blocks but those of
  // removed segments, merged with the added ones (both in (rank, block)
  // order); the others are prev's entries, shared.
  struct Touched {
    std::shared_ptr<SeriesEntry> entry;
    const SeriesEntry* before = nullptr;  // prev's, if the series was there
    std::vector<BlockRef> fresh;
  };
  std::map<std::string_view, Touched> touched;
  auto touch = [&](std::string_view name) -> Touched* {
    auto t = touched.find(name);
    if (t != touched.end()) return &t->second;
    auto it = snap->series_.find(name);
    if (it == snap->series_.end()) return nullptr;
    Touched to{std::make_shared<SeriesEntry>(), it->second.get(), {}};
    to.entry->info = it->second->info;
    to.entry->defined = it->second->defined;
    it->second = to.entry;
    return &touched.emplace(it->first, std::move(to)).first->second;
  };
  for (const LoadedSegment* seg : removed) {
    for (const format::BlockInfo& b : seg->index.blocks) touch(b.header.name.str());
  }
  for (const auto& [name, e] : prev.series_) {
    if (e->plan_failed.load(std::memory_order_acquire)) touch(name);  // read again, not shared
  }
  for (const BlockRef& b : fresh) {
    const BlockHeader& h = *b.header;
    Touched* t = touch(h.name.str());
    if (t == nullptr) {
      if (b.commit < snap->latest_definition_) return nullptr;
      auto made = NewEntry(b, snap->series_.size());
      auto it = snap->series_.emplace(h.name.str(), made).first;
      t = &touched.emplace(it->first, Touched{std::move(made), nullptr, {}}).first->second;
      snap->latest_definition_ = b.commit;
    } else if (b.commit < t->entry->defined || !SameType(t->entry->info, h)) {
      return nullptr;
    }
    t->fresh.push_back(b);
  }
  auto make = [&](Touched& t) {
    SeriesEntry& e = *t.entry;
    std::sort(t.fresh.begin(), t.fresh.end(), BySegmentThenBlock);
    const size_t before = t.before == nullptr ? 0 : t.before->blocks.size();
    e.blocks.reserve(before + t.fresh.size());
    auto kept = [&](const BlockRef& b) { return gone.empty() || !gone.contains(b.segment); };
    size_t f = 0;
    for (size_t k = 0; k < before; ++k) {
      const BlockRef& b = t.before->blocks[k];
      if (!kept(b)) continue;
      while (f < t.fresh.size() && BySegmentThenBlock(t.fresh[f], b)) {
        e.blocks.push_back(t.fresh[f++]);
      }
      e.blocks.push_back(b);
    }
    e.blocks.insert(e.blocks.end(), t.fresh.begin() + f, t.fresh.end());
    if (e.blocks.empty()) return false;  // a series gone: numbered anew
    e.info.stored_bytes = 0;
    for (const BlockRef& b : e.blocks) e.info.stored_bytes += b.header->payload_len;
    snap->blocks_placed_ += e.blocks.size() - t.fresh.size();
    return true;
  };
  for (auto& [name, t] : touched) {
    if (!make(t)) return nullptr;
  }
  snap->resume_ = prev.resume_;
  if (markers_change) {
    // The markers read again from the resume series made above (few blocks:
    // a marker per resumed run). Each series whose blocks may hold a run
    // whose markers changed is made again, its keys resolved at its next
    // read under the new markers; the others hold no such run, and keep
    // what they resolved.
    std::shared_ptr<const ResumeMap> now;
    if (auto it = snap->series_.find(kResumeSeries); it != snap->series_.end()) {
      auto read = snap->ReadMarkers(*it->second);
      if (!read.ok()) return nullptr;  // damage, or a resource: Build says which
      now = std::move(read).value();
    }
    const ResumeMap none;
    const ResumeMap& was = prev.resume_ ? *prev.resume_ : none;
    const ResumeMap& is = now ? *now : none;
    std::set<RunId, RunLess> changed;
    for (const auto& [run, m] : was) {
      auto f = is.find(run);
      if (f == is.end() || f->second.steps != m.steps || f->second.latest != m.latest) {
        changed.insert(run);
      }
    }
    for (const auto& [run, m] : is) {
      if (!was.contains(run)) changed.insert(run);
    }
    // Past this many runs, every series is made again rather than each
    // block's run range searched for them.
    constexpr size_t kRunsLookedFor = 64;
    auto may_hold = [&](const BlockRef& b) {
      auto c = changed.lower_bound(b.header->min_key.run);
      return c != changed.end() && !(b.header->max_key.run < *c);
    };
    std::vector<std::string_view> hidden;
    for (const auto& [name, e] : snap->series_) {
      if (name.starts_with('~') || touched.contains(name) || changed.empty()) continue;
      if (changed.size() > kRunsLookedFor || std::ranges::any_of(e->blocks, may_hold)) {
        hidden.push_back(name);
      }
    }
    for (std::string_view name : hidden) {
      if (!make(*touch(name))) return nullptr;
    }
    snap->resume_ = std::move(now);
  }
  snap->conflicts_ = prev.conflicts_;  // a new one was refused above: they stay in commit order
  return snap;
}

Result<std::shared_ptr<SnapshotImpl>> SnapshotImpl::Build(
    std::vector<std::shared_ptr<const LoadedSegment>> segments, std::vector<DamagedSegment> damaged,
    bool skip_damaged) {
  std::shared_ptr<SnapshotImpl> snap(new SnapshotImpl());
  if (skip_damaged) {
    // A segment whose resume markers cannot be read cannot be resolved: it is
    // left out whole, like one whose index cannot be read.
    // Running out of a resource is no damage: it fails the snapshot.
    Status exhausted;
    std::erase_if(segments, [&](const std::shared_ptr<const LoadedSegment>& seg) {
      for (const format::BlockInfo& b : seg->index.blocks) {
        if (b.header.name != kResumeSeries || !exhausted.ok()) continue;
        auto bytes = seg->Open();
        Status s = bytes.status();
        std::string_view stored;
        if (s.ok()) {
          const MappedRegion& map = *bytes->map;
          if (RangeWithin(b.payload_offset, b.header.payload_len, map.size())) {
            stored = std::string_view(map.data() + b.payload_offset, b.header.payload_len);
          }
          s = format::CheckPayload(stored, b, seg->file);
        }
        format::DecodedBlock decoded;
        if (s.ok()) s = format::DecodeBlock(stored, nullptr, bytes->map, b, seg->file, &decoded);
        if (s.code() == StatusCode::kResourceExhausted) {
          exhausted = s;
          return false;
        }
        if (!s.ok()) {
          damaged.push_back(DamagedSegment{seg->file, std::move(s)});
          return true;
        }
      }
      return false;
    });
    RUNSTORE_RETURN_IF_ERROR(exhausted);
  }
  snap->damaged_ = std::move(damaged);
  // Usually sorted already (segment file names sort so).
  if (!std::is_sorted(segments.begin(), segments.end(), ByWriter)) {
    std::sort(segments.begin(), segments.end(), ByWriter);
  }
  snap->segments_ = std::move(segments);
  snap->RankSegments();

  // Every block in commit order, so that the first definition of a series
  // (the earliest commit) fixes its schema.
  std::vector<BlockRef> all;
  for (uint32_t si = 0; si < snap->segments_.size(); ++si) {
    AppendBlocks(*snap->segments_[si], snap->ranks_[si], &all);
  }
  SortByCommit(&all);
  snap->blocks_placed_ = all.size();
  for (const BlockRef& b : all) {
    const BlockHeader& h = *b.header;
    auto it = snap->series_.find(h.name.str());
    if (it == snap->series_.end()) {
      it = snap->series_.emplace(h.name.str(), NewEntry(b, snap->series_.size())).first;
      snap->latest_definition_ = b.commit;
    }
    SeriesEntry& e = *it->second;
    if (!SameType(e.info, h)) {
      // Two writers created the series with different types at once; the
      // earlier commit's definition stands and this block is left out.
      snap->conflicts_.push_back(b.segment->file + ": offset " + std::to_string(b.offset()) +
                                 ": series '" + h.name.str() +
                                 "' conflicts with its first definition; block ignored");
      continue;
    }
    e.blocks.push_back(b);
    e.info.stored_bytes += h.payload_len;
  }
  std::vector<BlockRef>().swap(all);
  for (auto& [name, e] : snap->series_) {
    std::sort(e->blocks.begin(), e->blocks.end(), BySegmentThenBlock);
    // Held as long as the snapshot: without the slack of growing (a third
    // of a store's BlockRefs, on average).
    e->blocks.shrink_to_fit();
  }
  if (auto it = snap->series_.find(kResumeSeries); it != snap->series_.end()) {
    RUNSTORE_ASSIGN_OR_RETURN(snap->resume_, snap->ReadMarkers(*it->second));
  }
  return snap;
}

Result<std::shared_ptr<const SnapshotImpl::ResumeMap>> SnapshotImpl::ReadMarkers(
    const SeriesEntry& markers) const {
  std::map<RunId, std::vector<std::pair<int64_t, CommitOrder>>, RunLess> list_of;
  for (const BlockRef& b : markers.blocks) {
    RUNSTORE_ASSIGN_OR_RETURN(Payload p, ReadPayload(b));
    for (uint32_t r = 0; r < p.view.count(); ++r) {
      auto m = list_of.find(p.view.run(r));
      if (m == list_of.end()) m = list_of.emplace(p.view.run(r).ToRunId(), 0).first;
      m->second.emplace_back(p.view.step(r), b.commit);
    }
  }
  auto resume = std::make_shared<ResumeMap>();
  for (auto& [run, list] : list_of) {
    std::sort(list.begin(), list.end());
    RunMarkers& rm = (*resume)[run];
    rm.steps.reserve(list.size());
    rm.latest.reserve(list.size());
    for (const auto& [step, order] : list) {
      rm.steps.push_back(step);
      rm.latest.push_back(rm.latest.empty() ? order : std::max(rm.latest.back(), order));
    }
  }
  return std::shared_ptr<const ResumeMap>(std::move(resume));
}

void SnapshotImpl::SortByMinKey(const std::vector<BlockRef>& blocks, std::vector<uint32_t>* order) {
  // Sorted by a 64-bit prefix of each key first, with the full comparison
  // only between equal prefixes: comparing keys directly chases two pointers
  // and a string per comparison, the better part of building a key order.
  // The prefix orders as the key does: integer runs before string runs, an
  // integer run by its value, a string run by its first 8 bytes as unsigned
  // big-endian (what std::string's comparison orders by), zero-padded, so
  // that a prefix that differs decides and an equal one does not.
  struct Item {
    uint64_t prefix;
    uint32_t block;
    bool string_run;
  };
  std::vector<Item> items;
  items.reserve(order->size());
  for (uint32_t b : *order) {
    const format::StoredRun& run = blocks[b].header->min_key.run;
    Item it{0, b, run.is_string()};
    if (run.is_int()) {
      it.prefix = static_cast<uint64_t>(run.int_value()) ^ (uint64_t{1} << 63);
    } else {
      const std::string_view str = run.string_value();
      for (size_t i = 0; i < 8; ++i) {
        it.prefix = (it.prefix << 8) | (i < str.size() ? static_cast<uint8_t>(str[i]) : 0);
      }
    }
    items.push_back(it);
  }
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (a.string_run != b.string_run) return b.string_run;
    if (a.prefix != b.prefix) return a.prefix < b.prefix;
    return blocks[a.block].header->min_key < blocks[b.block].header->min_key;
  });
  for (size_t i = 0; i < items.size(); ++i) (*order)[i] = items[i].block;
}

void SnapshotImpl::EnsureKeyOrder(const SeriesEntry& e) {
  std::call_once(e.key_order_once, [&] {
    e.by_min_key.resize(e.blocks.size());
    for (uint32_t i = 0; i < e.blocks.size(); ++i) e.by_min_key[i] = i;
    SortByMinKey(e.blocks, &e.by_min_key);
    e.prefix_max.reserve(e.blocks.size());
    for (uint32_t i : e.by_min_key) {
      if (e.prefix_max.empty() ||
          e.blocks[e.prefix_max.back()].header->max_key < e.blocks[i].header->max_key) {
        e.prefix_max.push_back(i);
      } else {
        e.prefix_max.push_back(e.prefix_max.back());
      }
    }
    e.max_tree = MaxKeyTree(e.blocks, e.by_min_key);
  });
}

std::shared_ptr<LoadedSegment::LazyBlock> LoadedSegment::LazyBlockOf(uint32_t block,
                                                                     uint64_t chunks) const {
  MutexLock lk(&open_mu_);
  if (lazy_blocks_ != nullptr) {
    auto it = lazy_blocks_->find(block);
    if (it != lazy_blocks_->end()) return it->second;
  }
  if (chunks == 0) return nullptr;
  if (lazy_blocks_ == nullptr) {
    lazy_blocks_ = std::make_unique<std::unordered_map<uint32_t, std::shared_ptr<LazyBlock>>>();
  }
  return lazy_blocks_->emplace(block, std::make_shared<LazyBlock>(chunks)).first->second;
}

Result<Payload> SnapshotImpl::ReadPayload(const BlockRef& b, Check check) const {
  payload_reads_.fetch_add(1, std::memory_order_relaxed);
  const LoadedSegment& seg = *b.segment;
  const format::BlockInfo& info = seg.index.blocks[b.block];
  const BlockHeader& h = info.header;
  RUNSTORE_ASSIGN_OR_RETURN(const SegmentBytes bytes, seg.Open());
  if (!RangeWithin(info.payload_offset, h.payload_len, bytes.map->size())) {
    return Status::Corruption(format::AtOffset(seg.file, info.payload_offset) +
                              "block payload extends past the committed end");
  }
  std::string_view stored(bytes.map->data() + info.payload_offset, h.payload_len);
  const bool unverified = !seg.verified[b.block].load(std::memory_order_acquire);
  bool now_verified = false;  // this call checks the whole block
  if (unverified) {
    if (check == Check::kAllButValue && (h.flags & format::kBlockValueChunks) &&
        seg.LazyBlockOf(b.block) != nullptr) {
      // Its keys and chunk table were checked by an earlier GetLazy.
    } else if (check == Check::kAllButValue && (h.flags & format::kBlockValueChunks)) {
      // The value data is checked chunk by chunk as it is read (GetLazy).
      // Ask for the pages of the keys and of the chunk table first: touched
      // cold through the mapping, each would make the kernel read around it,
      // megabytes of the value and of its neighbours.
      if (bytes.file) {
        const uint64_t tail = std::min<uint64_t>(
            h.payload_len, 8 * ((h.payload_len >> h.chunk_shift) + 1) + 2 * format::kFrameAlign);
        bytes.file->WillNeed(info.payload_offset, std::min<uint64_t>(h.payload_len, 4096));
        bytes.file->WillNeed(info.payload_offset + h.payload_len - tail, tail);
      }
      format::BlockView view;
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayloadOutsideValue(stored, info, seg.file, &view));
      seg.LazyBlockOf(b.block, view.value_chunks()->count);
    } else if (h.codec == Codec::kNone && h.payload_len >= kVerifyByReadingBytes && bytes.file) {
      // A large uncompressed block goes to the caller as a view of the
      // mapping, of which it may touch little (a strided sample of an array):
      // verify it by reading, so that the check neither maps all of its pages
      // nor makes the mapping's readahead pull in the blocks after it.
      // Everything else is read whole anyway, and is hashed where it lies.
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayloadByReading(*bytes.file, stored, info, seg.file));
      now_verified = true;
    } else {
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayload(stored, info, seg.file));
      now_verified = true;
    }
  }
  Payload p;
  RUNSTORE_RETURN_IF_ERROR(format::DecodeBlock(stored, nullptr, bytes.map, info, seg.file, &p));
  if (unverified) {
    // Text is checked once per block too, so that no reader (a Python str)
    // meets bytes that are not UTF-8; only then is the block trusted.
    Status t = p.view.CheckRecords(h);
    if (!t.ok()) return t.WithContext(format::AtOffset(seg.file, info.payload_offset));
    if (now_verified) seg.verified[b.block].store(true, std::memory_order_release);
  }
  return p;
}

Result<std::vector<SeriesInfo>> SnapshotImpl::ListSeries(bool include_reserved) const {
  std::vector<SeriesInfo> out;
  for (const auto& [name, e] : series_) {
    if (!include_reserved && !name.empty() && name[0] == '~') continue;
    RUNSTORE_RETURN_IF_ERROR(EnsurePlan(*e));
    if (e->info.count == 0) continue;
    out.push_back(e->info);
  }
  return out;
}

namespace {
// A series' info but for its count, field by field: count is written by the
// series' key resolution, which another thread may be making.
SeriesInfo TypeOf(const SeriesInfo& info) {
  SeriesInfo i;
  i.name = info.name;
  i.dtype = info.dtype;
  i.variable_shape = info.variable_shape;
  i.shape = info.shape;
  i.stored_bytes = info.stored_bytes;
  i.first_logged = info.first_logged;
  return i;
}
}  // namespace

std::vector<SeriesInfo> SnapshotImpl::ListSeriesTypes(bool include_reserved) const {
  std::vector<SeriesInfo> out;
  for (const auto& [name, e] : series_) {
    if (!include_reserved && !name.empty() && name[0] == '~') continue;
    out.push_back(TypeOf(e->info));
  }
  return out;
}

Result<SeriesInfo> SnapshotImpl::SeriesTypeOf(std::string_view name) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  return TypeOf(it->second->info);
}

uint64_t SnapshotImpl::StoredRecords(std::string_view name) const {
  auto it = series_.find(name);
  if (it == series_.end()) return 0;
  uint64_t n = 0;
  for (const BlockRef& b : it->second->blocks) n += b.header->count;
  return n;
}

Result<bool> SnapshotImpl::SeriesHasStringRuns(std::string_view name) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  // Integer ids sort before strings: a block holds a string id when its
  // largest key's run is one.
  for (const BlockRef& b : it->second->blocks) {
    if (b.header->max_key.run.is_string()) return true;
  }
  return false;
}

Result<SeriesInfo> SnapshotImpl::GetSeriesInfo(std::string_view name) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  RUNSTORE_RETURN_IF_ERROR(EnsurePlan(*it->second));
  return it->second->info;
}

Status SnapshotImpl::ForEachRun(const std::function<void(std::span<const uint64_t>)>& hashes,
                                const std::function<void(const RunRef&)>& run) const {
  PageReleaser pages;
  for (const auto& [name, e] : series_) {
    if (name[0] == '~') continue;
    RUNSTORE_RETURN_IF_ERROR(EnsurePlan(*e));
    for (const PlanItem& item : e->plan) {
      const BlockRef& b = e->blocks[item.block];
      // A block of one run (the common case of long runs) needs no payload.
      if (item.all_rows && b.header->min_key.run == b.header->max_key.run) {
        run(b.header->min_key.run);
        continue;
      }
      // Nor does one its segment's footer lists the runs of, by their hashes.
      if (hashes && item.all_rows) {
        if (const auto& ri = b.segment->index.run_index; ri) {
          if (const auto listed = ri->Of(b.block); !listed.empty()) {
            hashes(listed);
            continue;
          }
        }
      }
      pages.WillRead(b.segment);
      RUNSTORE_ASSIGN_OR_RETURN(Payload p, ReadPayload(b));
      const size_t n = item.all_rows ? p.view.count() : item.rows.size();
      for (size_t i = 0; i < n; ++i) {
        const uint32_t r = item.all_rows ? static_cast<uint32_t>(i) : item.rows[i];
        if (i > 0 && item.all_rows && (b.header->flags & format::kBlockKeysAscending) &&
            CompareRunRefs(p.view.run(r), p.view.run(r - 1)) == 0) {
          continue;  // ascending keys: runs come in groups
        }
        run(p.view.run(r));
      }
    }
  }
  return Status::OK();
}

namespace {

// Run hashes deduplicated as they come, so that memory follows the distinct
// runs, not the records.
class DistinctHashes {
 public:
  void Add(uint64_t h) {
    values_.push_back(h);
    if (values_.size() >= std::max<size_t>(1 << 16, 2 * unique_)) Compact();
  }
  // The distinct hashes, ascending.
  std::vector<uint64_t> Take() {
    Compact();
    return std::move(values_);
  }

 private:
  void Compact() {
    SortDistinctUint64(&values_);
    unique_ = values_.size();
  }
  std::vector<uint64_t> values_;
  size_t unique_ = 0;
};

// Distinct run ids as they come, looked up by their hash (format::RunHash)
// before one is copied: each series lists every run again, and copying each
// record's id (a string of a hashed id is past the small-string buffer) to
// sort them all was most of `runstore ls --runs` (8 s at 1,000,000
// experiments). Ids of one hash are told apart by comparing them.
class DistinctRuns {
 public:
  void Add(const RunRef& r) {
    const uint64_t h = format::RunHash(r);
    if (2 * (runs_.size() + 1) > slots_.size()) Grow();
    for (size_t k = Slot(h);; k = (k + 1) & (slots_.size() - 1)) {
      const uint32_t i = slots_[k];
      if (i == kEmpty) {
        slots_[k] = static_cast<uint32_t>(runs_.size());
        runs_.push_back(r.ToRunId());
        hashes_.push_back(h);
        return;
      }
      if (hashes_[i] == h && CompareRunRefs(RunRef(runs_[i]), r) == 0) return;
    }
  }
  // The runs, sorted.
  std::vector<RunId> Take() {
    std::sort(runs_.begin(), runs_.end());
    return std::move(runs_);
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  size_t Slot(uint64_t h) const { return (h * 0x9e3779b97f4a7c15ull >> 20) & (slots_.size() - 1); }
  void Grow() {
    slots_.assign(std::max<size_t>(1024, 2 * slots_.size()), kEmpty);
    for (uint32_t i = 0; i < runs_.size(); ++i) {
      size_t k = Slot(hashes_[i]);
      while (slots_[k] != kEmpty) k = (k + 1) & (slots_.size() - 1);
      slots_[k] = i;
    }
  }
  std::vector<RunId> runs_;
  std::vector<uint64_t> hashes_;  // of runs_[i]
  std::vector<uint32_t> slots_;   // indexes into runs_, open-addressed by hash
};

}  // namespace

Result<std::vector<RunId>> SnapshotImpl::ListRuns() const {
  std::call_once(runs_once_, [&] {
    DistinctRuns runs;
    runs_status_ = ForEachRun(nullptr, [&](const RunRef& r) { runs.Add(r); });
    if (runs_status_.ok()) runs_ = runs.Take();
  });
  if (!runs_status_.ok()) return runs_status_;
  return runs_;
}

Result<uint64_t> SnapshotImpl::CountRuns() const {
  // The footers' lists, each ascending, are merged rather than sorted (a list
  // that blocks of several series share, once); the runs of blocks read are
  // deduplicated as they come, then join them.
  std::vector<std::span<const uint64_t>> lists;
  std::unordered_set<const uint64_t*> seen;
  DistinctHashes read;
  RUNSTORE_RETURN_IF_ERROR(ForEachRun(
      [&](std::span<const uint64_t> listed) {
        if (seen.insert(listed.data()).second) lists.push_back(listed);
      },
      [&](const RunRef& r) { read.Add(format::RunHash(r)); }));
  const std::vector<uint64_t> from_blocks = read.Take();
  lists.push_back(from_blocks);
  const std::vector<uint64_t> all = MergeAscending(lists);
  uint64_t distinct = 0;
  for (size_t i = 0; i < all.size(); ++i) distinct += i == 0 || all[i] != all[i - 1];
  return distinct;
}

std::vector<SegmentInfo> SnapshotImpl::ListSegments() const {
  std::vector<SegmentInfo> out;
  for (const auto& s : segments_) {
    SegmentInfo i;
    i.file = s->file;
    i.writer_id = s->index.header.writer_id;
    i.sequence = s->index.header.sequence;
    i.sealed = s->index.sealed;
    i.committed_bytes = s->index.committed_end;
    i.file_bytes = s->index.file_size;
    i.commits = s->index.commits.size();
    i.blocks = s->index.blocks.size();
    i.created_ns = s->index.header.created_ns;
    out.push_back(std::move(i));
  }
  return out;
}

void SnapshotImpl::ReleasePages() const {
  for (const auto& seg : segments_) {
    seg->ReleasePages();
  }
}

StoreSchema SnapshotImpl::Schema() const {
  StoreSchema s;
  for (const auto& [name, e] : series_) {
    s[name] = SeriesSchema{e->info.dtype, e->info.variable_shape, e->info.shape};
  }
  return s;
}

}  // namespace runstore::read
