// Key resolution (docs/format.md "Resolving keys"): which records of a
// series are visible, later commits winning and resume markers hiding.
#include <algorithm>
#include <map>

#include "store/snapshot.h"
#include "store/snapshot_helpers.h"

namespace runstore {

using format::BlockHeader;
using format::Key;

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
  if (it == resume_.end()) return false;
  marker_searches_.fetch_add(1, std::memory_order_relaxed);
  return it->second.Hides(step, order);
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
    marker_searches_.fetch_add(1, std::memory_order_relaxed);
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
bool SnapshotImpl::GroupSharesNoRun(const SeriesEntry& e, size_t i, size_t j, bool reserved) const {
  std::vector<std::span<const uint64_t>> lists;
  for (size_t k = i; k < j; ++k) {
    const BlockRef& b = e.blocks[e.by_min_key[k]];
    const auto& ri = segments_[b.segment]->index.run_index;
    if (!ri || (!reserved && BlockMayBeHidden(b))) return false;
    const auto listed = ri->Of(b.block);
    if (listed.empty()) return false;  // not listed
    // No key twice inside the block: its keys ascend, or each record has a
    // run of its own (one record per experiment, in any order).
    if (!(b.header->flags & format::kBlockKeysAscending) && listed.size() != b.header->count) {
      return false;
    }
    lists.push_back(listed);
  }
  // A hash that two runs share only makes this answer no: the blocks are then
  // read and their keys compared. Each list ascends: merged, not sorted.
  const std::vector<uint64_t> hashes = MergeAscending(lists);
  return std::adjacent_find(hashes.begin(), hashes.end()) == hashes.end();
}

Status SnapshotImpl::ComputePlan(const SeriesEntry& e) const {
  // Resume markers hide user records only: runstore's own '~' series (the
  // markers themselves, experiment designs and status) are never hidden.
  const bool reserved = !e.info.name.empty() && e.info.name[0] == '~';
  EnsureKeyOrder(e);
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
    // The footers' run indexes may prove without reading a block that no
    // key repeats: blocks that share no run share no key (hashed ids, whose
    // blocks' ranges all overlap, are the case).
    if (GroupSharesNoRun(e, i, j, reserved)) {
      for (size_t k = i; k < j; ++k) {
        plan.push_back(PlanItem{e.by_min_key[k], true, {}});
        count += e.blocks[e.by_min_key[k]].header->count;
      }
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

}  // namespace runstore
