#include "store/snapshot.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "codec/codec.h"
#include "util/coding.h"

namespace runstore {
namespace {

using format::BlockHeader;
using format::Key;

// Uncompressed blocks at least this large are verified by reading rather than
// through the mapping (see ReadPayload).
constexpr uint64_t kVerifyByReadingBytes = uint64_t{1} << 20;

int CompareRunRef(const RunRef& a, const RunId& b) {
  if (a.is_string != b.is_string()) return a.is_string ? 1 : -1;
  if (!a.is_string) return a.i < b.int_value() ? -1 : (a.i > b.int_value() ? 1 : 0);
  int c = a.s.compare(b.string_value());
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
int CompareRunRefs(const RunRef& a, const RunRef& b) {
  if (a.is_string != b.is_string) return a.is_string ? 1 : -1;
  if (!a.is_string) return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  int c = a.s.compare(b.s);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
// Compares (run, step) with a stored key.
int CompareKey(const RunRef& run, int64_t step, const Key& k) {
  if (int c = CompareRunRef(run, k.run); c != 0) return c;
  return step < k.step ? -1 : (step > k.step ? 1 : 0);
}

// Memory aligned for any dtype and for SIMD, shared by whoever needs it.
std::shared_ptr<char> AlignedBuffer(size_t n) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, AlignUp(n, 64)));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { std::free(q); });
}

}  // namespace

Status Snapshot::Verify(uint64_t* blocks_checked) const {
  VerifyReport r = VerifyAll();
  if (blocks_checked) *blocks_checked = r.blocks_checked;
  return r.problems.empty() ? Status::OK() : r.problems.front();
}

RunId ScanBatch::run(size_t i) const {
  if (!run_is_string.empty() && run_is_string[i]) return RunId(string_runs[i]);
  return RunId(int_runs[i]);
}

Result<std::shared_ptr<SnapshotImpl>> SnapshotImpl::Build(
    std::vector<std::shared_ptr<const LoadedSegment>> segments, std::vector<DamagedSegment> damaged,
    bool skip_damaged) {
  std::shared_ptr<SnapshotImpl> snap(new SnapshotImpl());
  if (skip_damaged) {
    // A segment whose resume markers cannot be read cannot be resolved: it is
    // left out whole, like one whose index cannot be read.
    std::erase_if(segments, [&](const std::shared_ptr<const LoadedSegment>& seg) {
      for (const format::BlockInfo& b : seg->index.blocks) {
        if (b.header.name != kResumeSeries) continue;
        const std::string_view stored =
            RangeWithin(b.payload_offset, b.header.payload_len, seg->map->size())
                ? std::string_view(seg->map->data() + b.payload_offset, b.header.payload_len)
                : std::string_view();
        Status s = format::CheckPayload(stored, b, seg->file);
        format::DecodedBlock decoded;
        if (s.ok()) s = format::DecodeBlock(stored, nullptr, seg->map, b, seg->file, &decoded);
        if (!s.ok()) {
          damaged.push_back(DamagedSegment{seg->file, std::move(s)});
          return true;
        }
      }
      return false;
    });
  }
  snap->damaged_ = std::move(damaged);
  std::sort(segments.begin(), segments.end(), [](const auto& a, const auto& b) {
    if (a->index.header.writer_id != b->index.header.writer_id) {
      return a->index.header.writer_id < b->index.header.writer_id;
    }
    return a->index.header.sequence < b->index.header.sequence;
  });
  snap->segments_ = std::move(segments);

  // Every block in commit order, so that the first definition of a series
  // (the earliest commit) fixes its schema.
  std::vector<BlockRef> all;
  for (uint32_t si = 0; si < snap->segments_.size(); ++si) {
    const auto& idx = snap->segments_[si]->index;
    for (uint32_t bi = 0; bi < idx.blocks.size(); ++bi) {
      const auto& b = idx.blocks[bi];
      all.push_back(BlockRef{si, bi, CommitOrder{idx.commits[b.commit_index].time_ns, si},
                             b.frame_offset, &b.header});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const BlockRef& a, const BlockRef& b) {
    return std::tie(a.commit, a.offset) < std::tie(b.commit, b.offset);
  });
  for (const BlockRef& b : all) {
    const BlockHeader& h = *b.header;
    auto it = snap->series_.find(h.name);
    if (it == snap->series_.end()) {
      auto e = std::make_unique<SeriesEntry>();
      e->info.name = h.name;
      e->info.dtype = h.dtype;
      e->info.variable_shape = h.variable_shape;
      e->info.shape = h.variable_shape ? std::vector<int64_t>{} : h.dims;
      it = snap->series_.emplace(h.name, std::move(e)).first;
    }
    SeriesEntry& e = *it->second;
    if (h.dtype != e.info.dtype || h.variable_shape != e.info.variable_shape ||
        (!h.variable_shape && h.dims != e.info.shape)) {
      // Two writers created the series with different types at once; the
      // earlier commit's definition stands and this block is left out.
      snap->conflicts_.push_back(snap->segments_[b.segment]->file + ": offset " +
                                 std::to_string(b.offset) + ": series '" + h.name +
                                 "' conflicts with its first definition; block ignored");
      continue;
    }
    e.blocks.push_back(b);
    e.info.stored_bytes += h.payload_len;
  }
  for (auto& [name, e] : snap->series_) {
    std::sort(e->blocks.begin(), e->blocks.end(), [](const BlockRef& a, const BlockRef& b) {
      return std::tie(a.segment, a.offset) < std::tie(b.segment, b.offset);
    });
    e->by_min_key.resize(e->blocks.size());
    for (uint32_t i = 0; i < e->blocks.size(); ++i) e->by_min_key[i] = i;
    std::sort(e->by_min_key.begin(), e->by_min_key.end(), [&](uint32_t a, uint32_t b) {
      return e->blocks[a].header->min_key < e->blocks[b].header->min_key;
    });
    e->prefix_max.reserve(e->blocks.size());
    for (uint32_t i : e->by_min_key) {
      const Key& mk = e->blocks[i].header->max_key;
      if (e->prefix_max.empty() || e->prefix_max.back() < mk) {
        e->prefix_max.push_back(mk);
      } else {
        e->prefix_max.push_back(e->prefix_max.back());
      }
    }
  }
  // Resume markers.
  if (auto it = snap->series_.find(kResumeSeries); it != snap->series_.end()) {
    std::map<RunId, std::vector<std::pair<int64_t, CommitOrder>>, RunLess> markers;
    for (const BlockRef& b : it->second->blocks) {
      RUNSTORE_ASSIGN_OR_RETURN(Payload p, snap->ReadPayload(b));
      for (uint32_t r = 0; r < p.view.count(); ++r) {
        auto m = markers.find(p.view.run(r));
        if (m == markers.end()) m = markers.emplace(p.view.run(r).ToRunId(), 0).first;
        m->second.emplace_back(p.view.step(r), b.commit);
      }
    }
    for (auto& [run, list] : markers) {
      std::sort(list.begin(), list.end());
      RunMarkers& rm = snap->resume_[run];
      rm.steps.reserve(list.size());
      rm.latest.reserve(list.size());
      for (const auto& [step, order] : list) {
        rm.steps.push_back(step);
        rm.latest.push_back(rm.latest.empty() ? order : std::max(rm.latest.back(), order));
      }
    }
  }
  return snap;
}

std::shared_ptr<LoadedSegment::LazyBlock> LoadedSegment::LazyBlockOf(uint32_t block,
                                                                     uint64_t chunks) const {
  std::lock_guard lk(lazy_mu);
  auto it = lazy_blocks.find(block);
  if (it != lazy_blocks.end()) return it->second;
  if (chunks == 0) return nullptr;
  return lazy_blocks.emplace(block, std::make_shared<LazyBlock>(chunks)).first->second;
}

Result<Payload> SnapshotImpl::ReadPayload(const BlockRef& b, Check check) const {
  const LoadedSegment& seg = *segments_[b.segment];
  const format::BlockInfo& info = seg.index.blocks[b.block];
  const BlockHeader& h = info.header;
  if (!RangeWithin(info.payload_offset, h.payload_len, seg.map->size())) {
    return Status::Corruption(format::AtOffset(seg.file, info.payload_offset) +
                              "block payload extends past the committed end");
  }
  std::string_view stored(seg.map->data() + info.payload_offset, h.payload_len);
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
      if (seg.handle) {
        const uint64_t tail = std::min<uint64_t>(
            h.payload_len, 8 * ((h.payload_len >> h.chunk_shift) + 1) + 2 * format::kFrameAlign);
        seg.handle->WillNeed(info.payload_offset, std::min<uint64_t>(h.payload_len, 4096));
        seg.handle->WillNeed(info.payload_offset + h.payload_len - tail, tail);
      }
      format::BlockView view;
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayloadOutsideValue(stored, info, seg.file, &view));
      seg.LazyBlockOf(b.block, view.value_chunks()->count);
    } else if (h.codec == Codec::kNone && h.payload_len >= kVerifyByReadingBytes && seg.handle) {
      // A large uncompressed block goes to the caller as a view of the
      // mapping, of which it may touch little (a strided sample of an array):
      // verify it by reading, so that the check neither maps all of its pages
      // nor makes the mapping's readahead pull in the blocks after it.
      // Everything else is read whole anyway, and is hashed where it lies.
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayloadByReading(*seg.handle, stored, info, seg.file));
      now_verified = true;
    } else {
      RUNSTORE_RETURN_IF_ERROR(format::CheckPayload(stored, info, seg.file));
      now_verified = true;
    }
  }
  Payload p;
  RUNSTORE_RETURN_IF_ERROR(format::DecodeBlock(stored, nullptr, seg.map, info, seg.file, &p));
  if (unverified) {
    // Text is checked once per block too, so that no reader (a Python str)
    // meets bytes that are not UTF-8; only then is the block trusted.
    Status t = p.view.CheckRecords(h);
    if (!t.ok()) return t.WithContext(format::AtOffset(seg.file, info.payload_offset));
    if (now_verified) seg.verified[b.block].store(true, std::memory_order_release);
  }
  return p;
}

bool SnapshotImpl::RunLess::operator()(const RunId& a, const RunRef& b) const {
  return CompareRunRef(b, a) > 0;
}
bool SnapshotImpl::RunLess::operator()(const RunRef& a, const RunId& b) const {
  return CompareRunRef(a, b) < 0;
}

bool SnapshotImpl::RunMarkers::Hides(int64_t step, const CommitOrder& order) const {
  const size_t at = std::upper_bound(steps.begin(), steps.end(), step) - steps.begin();
  return at > 0 && order < latest[at - 1];
}

bool SnapshotImpl::HiddenByResume(const RunRef& run, int64_t step, const CommitOrder& order) const {
  if (resume_.empty()) return false;
  auto it = resume_.find(run);
  return it != resume_.end() && it->second.Hides(step, order);
}

bool SnapshotImpl::BlockMayBeHidden(const BlockRef& b) const {
  if (resume_.empty()) return false;
  const BlockHeader& h = *b.header;
  // Each run with markers in the block's run range could hold records of
  // the block. Past as many such runs as the block has records, looking
  // further costs more than resolving the block record by record, which a
  // "may be hidden" leads to: a block's cost stays O(count log markers).
  uint64_t looked = 0;
  for (auto it = resume_.lower_bound(h.min_key.run);
       it != resume_.end() && !(h.max_key.run < it->first); ++it) {
    if (++looked > h.count) return true;
    if (it->second.Hides(h.max_step, b.commit)) return true;
  }
  return false;
}

namespace {

// A block's keys as int columns when its runs are ints (the sequences
// expanded), else read through the view.
struct KeyCursor {
  const format::BlockView* view;
  std::vector<int64_t> runs, steps;  // empty when runs are not all ints

  explicit KeyCursor(const format::BlockView& v) : view(&v) {
    if (v.run_encoding() == format::RunEncoding::kInt) {
      runs.resize(v.count());
      steps.resize(v.count());
      v.CopyIntRuns(runs.data());
      v.CopySteps(steps.data());
    }
  }
  RunRef run(uint32_t r) const { return runs.empty() ? view->run(r) : RunRef(runs[r]); }
  int64_t step(uint32_t r) const { return steps.empty() ? view->step(r) : steps[r]; }
};

}  // namespace

bool SnapshotImpl::AscendingBlocksShareNoKey(const std::vector<Payload>& payloads) {
  // Writers that each take some of the runs (ranks of a sweep, workers of a
  // pool) write blocks whose keys ascend but whose key ranges interleave. In
  // such a block each run's records are one piece with ascending steps; two
  // blocks share a key only if pieces of the same run overlap in steps.
  struct Piece {
    RunRef run;  // borrowed from the payloads
    int64_t first_step, last_step;
  };
  std::vector<Piece> pieces;
  for (const Payload& p : payloads) {
    const KeyCursor c(p.view);
    const uint32_t n = p.view.count();
    for (uint32_t r = 0; r < n;) {
      uint32_t end = r + 1;
      while (end < n && CompareRunRefs(c.run(end), c.run(r)) == 0) ++end;
      pieces.push_back(Piece{c.run(r), c.step(r), c.step(end - 1)});
      r = end;
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    if (int c = CompareRunRefs(a.run, b.run); c != 0) return c < 0;
    return a.first_step < b.first_step;
  });
  for (size_t k = 1; k < pieces.size(); ++k) {
    if (CompareRunRefs(pieces[k - 1].run, pieces[k].run) == 0 &&
        pieces[k - 1].last_step >= pieces[k].first_step) {
      return false;
    }
  }
  return true;
}

bool SnapshotImpl::StepMajorBlocksShareNoKey(const std::vector<Payload>& payloads) {
  // Several runs logged step by step by one writer: each block's keys ascend
  // by (step, run), and the blocks follow one another in that order. Blocks
  // whose (step, run) spans do not overlap share no key, whatever their runs.
  auto less = [](int64_t sa, const RunRef& ra, int64_t sb, const RunRef& rb) {
    return sa != sb ? sa < sb : CompareRunRefs(ra, rb) < 0;
  };
  struct Span {
    int64_t first_step, last_step;
    RunRef first_run, last_run;  // borrowed from the payloads
  };
  std::vector<Span> spans;
  for (const Payload& p : payloads) {
    const KeyCursor c(p.view);
    const uint32_t n = p.view.count();
    if (n == 0) continue;
    for (uint32_t r = 1; r < n; ++r) {
      if (!less(c.step(r - 1), c.run(r - 1), c.step(r), c.run(r))) return false;
    }
    spans.push_back(Span{c.step(0), c.step(n - 1), p.view.run(0), p.view.run(n - 1)});
  }
  std::sort(spans.begin(), spans.end(), [&](const Span& a, const Span& b) {
    return less(a.first_step, a.first_run, b.first_step, b.first_run);
  });
  for (size_t k = 1; k < spans.size(); ++k) {
    if (!less(spans[k - 1].last_step, spans[k - 1].last_run, spans[k].first_step,
              spans[k].first_run)) {
      return false;
    }
  }
  return true;
}

Status SnapshotImpl::EnsurePlan(const SeriesEntry& e) const {
  std::call_once(e.plan_once, [&] { e.plan_status = ComputePlan(e); });
  return e.plan_status;
}

// Key resolution (docs/format.md "Resolving keys"). Blocks that no resume
// marker can touch pass through whole (and zero-copy) when no key can appear
// twice among them: a block whose key range overlaps no other block's and
// whose keys strictly ascend (its header says so), or a group of overlapping
// blocks whose keys are read and proved to share none (layouts that
// AscendingBlocksShareNoKey and StepMajorBlocksShareNoKey recognise). The
// others are resolved record by record.
Status SnapshotImpl::ComputePlan(const SeriesEntry& e) const {
  // Resume markers hide user records only: runstore's own '~' series (the
  // markers themselves, experiment designs and status) are never hidden.
  const bool reserved = !e.info.name.empty() && e.info.name[0] == '~';
  std::vector<PlanItem> plan;
  uint64_t count = 0;
  const size_t n = e.by_min_key.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    Key group_max = e.blocks[e.by_min_key[i]].header->max_key;
    while (j < n && !(group_max < e.blocks[e.by_min_key[j]].header->min_key)) {
      const Key& mk = e.blocks[e.by_min_key[j]].header->max_key;
      if (group_max < mk) group_max = mk;
      ++j;
    }
    const uint32_t first = e.by_min_key[i];
    const BlockRef& fb = e.blocks[first];
    if (j == i + 1 && (fb.header->flags & format::kBlockKeysAscending) &&
        (reserved || !BlockMayBeHidden(fb))) {
      plan.push_back(PlanItem{first, true, {}});
      count += fb.header->count;
      i = j;
      continue;
    }
    // The group's keys are needed: each payload is read once, for the proof
    // that no key repeats and, failing it, for the slow path.
    std::vector<Payload> payloads(j - i);
    bool may_be_hidden = false;
    bool run_major = true;  // every header says its keys ascend by (run, step)
    for (size_t k = i; k < j; ++k) {
      const BlockRef& b = e.blocks[e.by_min_key[k]];
      RUNSTORE_ASSIGN_OR_RETURN(payloads[k - i], ReadPayload(b));
      may_be_hidden = may_be_hidden || (!reserved && BlockMayBeHidden(b));
      run_major = run_major && (b.header->flags & format::kBlockKeysAscending);
    }
    if (!may_be_hidden &&
        (run_major ? AscendingBlocksShareNoKey(payloads) : StepMajorBlocksShareNoKey(payloads))) {
      for (size_t k = i; k < j; ++k) {
        plan.push_back(PlanItem{e.by_min_key[k], true, {}});
        count += e.blocks[e.by_min_key[k]].header->count;
      }
      i = j;
      continue;
    }
    // Slow path: every record of the group, latest (commit, offset, row) wins.
    struct Entry {
      RunRef run;
      int64_t step;
      uint32_t block;
      uint32_t row;
    };
    std::vector<Entry> entries;
    for (size_t k = i; k < j; ++k) {
      const auto& v = payloads[k - i].view;
      for (uint32_t r = 0; r < v.count(); ++r) {
        entries.push_back(Entry{v.run(r), v.step(r), e.by_min_key[k], r});
      }
    }
    auto order_less = [&](const Entry& a, const Entry& b) {
      const BlockRef& x = e.blocks[a.block];
      const BlockRef& y = e.blocks[b.block];
      return std::tie(x.commit, x.offset, a.row) < std::tie(y.commit, y.offset, b.row);
    };
    std::sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
      int c = CompareRunRefs(a.run, b.run);
      if (c != 0) return c < 0;
      if (a.step != b.step) return a.step < b.step;
      return order_less(a, b);
    });
    std::map<uint32_t, std::vector<uint32_t>> chosen;
    for (size_t k = 0; k < entries.size(); ++k) {
      const bool last_of_key = k + 1 == entries.size() ||
                               CompareRunRefs(entries[k].run, entries[k + 1].run) != 0 ||
                               entries[k].step != entries[k + 1].step;
      if (!last_of_key) continue;
      const Entry& w = entries[k];
      if (!reserved && HiddenByResume(w.run, w.step, e.blocks[w.block].commit)) continue;
      chosen[w.block].push_back(w.row);
    }
    for (auto& [bi, rows] : chosen) {
      std::sort(rows.begin(), rows.end());
      count += rows.size();
      const bool all = rows.size() == e.blocks[bi].header->count;
      plan.push_back(PlanItem{bi, all, all ? std::vector<uint32_t>{} : std::move(rows)});
    }
    i = j;
  }
  std::sort(plan.begin(), plan.end(),
            [](const PlanItem& a, const PlanItem& b) { return a.block < b.block; });
  e.plan = std::move(plan);
  const_cast<SeriesEntry&>(e).info.count = count;
  return Status::OK();
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

Result<SeriesInfo> SnapshotImpl::GetSeriesInfo(std::string_view name) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  RUNSTORE_RETURN_IF_ERROR(EnsurePlan(*it->second));
  return it->second->info;
}

Result<std::vector<RunId>> SnapshotImpl::ListRuns() const {
  std::call_once(runs_once_, [&] {
    // Deduplicated as it goes, so memory follows distinct runs, not records.
    std::vector<RunId> runs;
    size_t unique = 0;
    auto add = [&](RunId r) {
      runs.push_back(std::move(r));
      if (runs.size() >= std::max<size_t>(1 << 16, 2 * unique)) {
        std::sort(runs.begin(), runs.end());
        runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
        unique = runs.size();
      }
    };
    for (const auto& [name, e] : series_) {
      if (name[0] == '~') continue;
      runs_status_ = EnsurePlan(*e);
      if (!runs_status_.ok()) return;
      for (const PlanItem& item : e->plan) {
        const BlockRef& b = e->blocks[item.block];
        // A block of one run (the common case of long runs) needs no payload.
        if (item.all_rows && b.header->min_key.run == b.header->max_key.run) {
          add(b.header->min_key.run);
          continue;
        }
        auto p = ReadPayload(b);
        if (!p.ok()) {
          runs_status_ = p.status();
          return;
        }
        const size_t n = item.all_rows ? p->view.count() : item.rows.size();
        for (size_t i = 0; i < n; ++i) {
          const uint32_t r = item.all_rows ? static_cast<uint32_t>(i) : item.rows[i];
          if (i > 0 && item.all_rows && (b.header->flags & format::kBlockKeysAscending) &&
              CompareRunRefs(p->view.run(r), p->view.run(r - 1)) == 0) {
            continue;  // ascending keys: runs come in groups
          }
          add(p->view.run(r).ToRunId());
        }
      }
    }
    std::sort(runs.begin(), runs.end());
    runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
    runs_ = std::move(runs);
  });
  if (!runs_status_.ok()) return runs_status_;
  return runs_;
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

namespace {

// Bytes of a payload as a Value: a view of the mapping, or kept alive by the
// payload's decompressed buffer.
Value PayloadValue(const Payload& p, DType dtype, std::vector<int64_t> shape, const char* data,
                   size_t n) {
  if (p.mapping) return Value(dtype, std::move(shape), data, n, p.mapping);
  return Value(dtype, std::move(shape), data, n, p.owner, false);
}

Value MakeRecordValue(const BlockHeader& h, const Payload& p, uint32_t row) {
  std::string_view bytes = p.view.value_bytes(row);
  return PayloadValue(p, h.dtype, p.view.value_shape(row), bytes.data(), bytes.size());
}

}  // namespace

Result<SnapshotImpl::Found> SnapshotImpl::Find(RunRef run, std::string_view name, int64_t step,
                                               Check check) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  const SeriesEntry& e = *it->second;
  auto not_found = [&] {
    return Status::NotFound("no record for run " + run.ToRunId().ToString() + ", series '" +
                            std::string(name) + "', step " + std::to_string(step));
  };
  // Candidates: blocks with min_key <= key, scanning back while the running
  // maximum of max_key still reaches the key.
  size_t ub = std::partition_point(e.by_min_key.begin(), e.by_min_key.end(),
                                   [&](uint32_t b) {
                                     return CompareKey(run, step, e.blocks[b].header->min_key) >= 0;
                                   }) -
              e.by_min_key.begin();
  const BlockRef* best = nullptr;
  uint32_t best_row = 0;
  Payload best_payload;
  for (size_t k = ub; k-- > 0;) {
    if (CompareKey(run, step, e.prefix_max[k]) > 0) break;
    const BlockRef& b = e.blocks[e.by_min_key[k]];
    const BlockHeader& h = *b.header;
    if (CompareKey(run, step, h.max_key) > 0 || step < h.min_step || step > h.max_step) continue;
    if (best && std::tie(b.commit, b.offset) < std::tie(best->commit, best->offset)) continue;
    RUNSTORE_ASSIGN_OR_RETURN(Payload p, ReadPayload(b, check));
    const auto& v = p.view;
    int64_t found = -1;
    auto cmp = [&](uint32_t r) {
      int c = CompareRunRefs(v.run(r), run);
      if (c != 0) return c;
      return v.step(r) < step ? -1 : (v.step(r) > step ? 1 : 0);
    };
    if (h.flags & format::kBlockKeysAscending) {
      uint32_t lo = 0, hi = v.count();
      while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cmp(mid) < 0)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < v.count() && cmp(lo) == 0) found = lo;
    } else {
      for (uint32_t r = v.count(); r-- > 0;) {
        if (cmp(r) == 0) {
          found = r;
          break;
        }
      }
    }
    if (found < 0) continue;
    best = &b;
    best_row = static_cast<uint32_t>(found);
    best_payload = std::move(p);
  }
  if (!best) return not_found();
  if (name[0] != '~' && HiddenByResume(run, step, best->commit)) return not_found();
  return Found{best, best_row, std::move(best_payload)};
}

Result<Value> SnapshotImpl::Get(RunRef run, std::string_view name, int64_t step) const {
  RUNSTORE_ASSIGN_OR_RETURN(Found f, Find(run, name, step, Check::kAll));
  return MakeRecordValue(*f.block->header, f.payload, f.row);
}

namespace {

// Checks the chunks of a value as its reader reaches them, each once.
class ChunkChecker final : public LazyValue::Checker {
 public:
  ChunkChecker(std::shared_ptr<const LoadedSegment> seg, uint32_t block, const Payload& p)
      : seg_(std::move(seg)),
        block_(block),
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
    size_t asked = 0;
    uint64_t ahead = 0;  // bytes asked for and not yet hashed
    for (size_t k = 0; k < pieces.size(); ++k) {
      while (asked < pieces.size() && (asked <= k || ahead + bytes(pieces[asked]) <= kAhead)) {
        if (seg_->handle) {
          seg_->handle->WillNeed(
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

  std::shared_ptr<const LoadedSegment> seg_;  // keeps the mapping of stored_ alive
  uint32_t block_;
  std::string_view stored_;
  format::BlockView view_;
  std::shared_ptr<LoadedSegment::LazyBlock> state_;  // what is checked
};

}  // namespace

Result<LazyValue> SnapshotImpl::GetLazy(RunRef run, std::string_view name, int64_t step) const {
  RUNSTORE_ASSIGN_OR_RETURN(Found f, Find(run, name, step, Check::kAllButValue));
  const BlockRef& b = *f.block;
  Value value = MakeRecordValue(*b.header, f.payload, f.row);
  const auto& seg = segments_[b.segment];
  if (seg->verified[b.block].load(std::memory_order_acquire))
    return LazyValue(std::move(value), nullptr);
  if (f.payload.view.value_chunks()->count == 0) {
    seg->verified[b.block].store(true, std::memory_order_release);  // no value data
    return LazyValue(std::move(value), nullptr);
  }
  return LazyValue(std::move(value), std::make_shared<ChunkChecker>(seg, b.block, f.payload));
}

namespace {

// The runs a scan is restricted to, sorted for lookups.
class RunFilter {
 public:
  explicit RunFilter(std::vector<RunId> runs) : runs_(std::move(runs)) {
    std::sort(runs_.begin(), runs_.end());
  }
  // Whether a wanted run lies in [lo, hi].
  bool Overlaps(const RunId& lo, const RunId& hi) const {
    auto it = std::lower_bound(runs_.begin(), runs_.end(), lo);
    return it != runs_.end() && *it <= hi;
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
            batch->string_runs[i] = std::string(v.run_string(r));
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

VerifyReport SnapshotImpl::VerifyAll(
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  VerifyReport report;
  for (const DamagedSegment& d : damaged_) report.problems.push_back(d.status);
  uint64_t total = 0;
  for (const auto& seg : segments_) {
    for (const auto& info : seg->index.blocks) total += info.header.payload_len;
  }
  for (uint32_t si = 0; si < segments_.size(); ++si) {
    const LoadedSegment& seg = *segments_[si];
    ++report.segments;
    for (uint32_t bi = 0; bi < seg.index.blocks.size(); ++bi) {
      const format::BlockInfo& info = seg.index.blocks[bi];
      const std::string at = seg.file + ": offset " + std::to_string(info.frame_offset) + ": ";
      // The frame header in the file: a sealed segment is read through the
      // footer's copy, so only Verify looks at this one.
      format::FramePrefix prefix;
      if (!RangeWithin(info.frame_offset, info.header_len, seg.map->size()) ||
          !format::CheckFrameHeader(
               std::string_view(seg.map->data() + info.frame_offset, info.header_len), &prefix)
               .ok() ||
          prefix.payload_checksum != info.header.payload_checksum) {
        report.problems.push_back(Status::Corruption(at + "block frame header is damaged"));
      }
      Status s;
      if (!RangeWithin(info.payload_offset, info.header.payload_len, seg.map->size())) {
        s = Status::Corruption(at + "block payload extends past the committed end");
      } else {
        // Checked again even if a read already verified it.
        s = format::CheckPayload(
            std::string_view(seg.map->data() + info.payload_offset, info.header.payload_len), info,
            seg.file);
        if (s.ok()) s = ReadPayload(BlockRef{si, bi, {}, info.frame_offset, &info.header}).status();
      }
      if (!s.ok()) report.problems.push_back(s);
      ++report.blocks_checked;
      report.bytes_checked += info.header.payload_len;
      if (progress) progress(report.bytes_checked, total);
    }
  }
  for (const auto& c : conflicts_) report.problems.push_back(Status::Corruption(c));
  return report;
}

void SnapshotImpl::ReleasePages() const {
  for (const auto& seg : segments_) seg->map->ReleasePages();
}

StoreSchema SnapshotImpl::Schema() const {
  StoreSchema s;
  for (const auto& [name, e] : series_) {
    s[name] = SeriesSchema{e->info.dtype, e->info.variable_shape, e->info.shape};
  }
  return s;
}

}  // namespace runstore
