// Key resolution (docs/format.md "Resolving keys"): which records of a
// series are visible, later commits winning and resume markers hiding.
#include <algorithm>
#include <map>

#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"

namespace runstore::read {

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
  if (resume_ == nullptr) return false;
  auto it = resume_->find(run);
  if (it == resume_->end()) return false;
  marker_searches_.fetch_add(1, std::memory_order_relaxed);
  return it->second.Hides(step, order);
}

bool SnapshotImpl::BlockMayBeHidden(const BlockRef& b) const {
  if (resume_ == nullptr) return false;
  const BlockHeader& h = *b.header;
  // Each run with markers in the block's run range could hold records of
  // the block. Past as many such runs as the block has records, looking
  // further costs more than resolving the block record by record, which a
  // "may be hidden" leads to: a block's cost stays O(count log markers).
  uint64_t looked = 0;
  for (auto it = resume_->lower_bound(h.min_key.run);
       it != resume_->end() && !(h.max_key.run < it->first); ++it) {
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
  std::call_once(e.plan_once, [&] {
    e.plan_status = ComputePlan(e);
    if (!e.plan_status.ok()) e.plan_failed.store(true, std::memory_order_release);
  });
  return e.plan_status;
}

// Key resolution (docs/format.md "Resolving keys"). Blocks that no resume
// marker can touch pass through whole (and zero-copy) when no key can appear
// twice among them: a block whose key range overlaps no other block's and
// whose keys strictly ascend (its header says so), or a group of overlapping
// blocks whose keys are read and proved to share none (layouts that
// AscendingBlocksShareNoKey and StepMajorBlocksShareNoKey recognise). The
// others are resolved record by record.
namespace {

// No key twice inside the block: its keys ascend, or each record has a run
// of its own (one record per experiment, in any order).
bool KeysDistinctIn(const BlockHeader& h, std::span<const uint64_t> listed) {
  return (h.flags & format::kBlockKeysAscending) || listed.size() == h.count;
}

// The values of `list` that are in `shared` (both ascending, and so the
// result). A block's list is far shorter than a group's shared runs: each
// value is searched from where the last one was found, in steps that double
// (O(|list| log(|shared| / |list|)) in all).
std::vector<uint64_t> SharedOf(std::span<const uint64_t> list,
                               const std::vector<uint64_t>& shared) {
  std::vector<uint64_t> out;
  size_t from = 0;
  for (uint64_t h : list) {
    from = GallopTo(shared, from, h);
    if (from == shared.size()) break;
    if (shared[from] == h) out.push_back(h);
  }
  return out;
}

}  // namespace

bool SnapshotImpl::GroupRunLists(const SeriesEntry& e, size_t i, size_t j,
                                 std::vector<std::span<const uint64_t>>* lists) const {
  lists->clear();
  for (size_t k = i; k < j; ++k) {
    const BlockRef& b = e.blocks[e.by_min_key[k]];
    const auto& ri = b.segment->index.run_index;
    if (!ri) return false;
    const auto listed = ri->Of(b.block);
    if (listed.empty()) return false;  // not listed
    lists->push_back(listed);
  }
  return true;
}

bool SnapshotImpl::GroupSharesNoRun(const SeriesEntry& e, size_t i, size_t j, bool reserved,
                                    const std::vector<std::span<const uint64_t>>& lists,
                                    const std::vector<uint64_t>& shared) const {
  // A hash that two runs share only makes this answer no: the blocks are then
  // read and their keys compared.
  if (!shared.empty()) return false;
  for (size_t k = i; k < j; ++k) {
    const BlockRef& b = e.blocks[e.by_min_key[k]];
    if ((!reserved && BlockMayBeHidden(b)) || !KeysDistinctIn(*b.header, lists[k - i])) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const SnapshotImpl::ListsTogether> SnapshotImpl::Together(
    const std::vector<std::span<const uint64_t>>& lists) const {
  std::vector<std::pair<const uint64_t*, size_t>> key;
  key.reserve(lists.size());
  for (const auto& l : lists) key.emplace_back(l.data(), l.size());
  {
    MutexLock lock(&together_mu_);
    if (auto it = together_.find(key); it != together_.end()) return it->second;
  }
  // Each list ascends: merged, not sorted.
  const std::vector<uint64_t> hashes = MergeAscending(lists);
  auto t = std::make_shared<ListsTogether>();
  size_t distinct = 0;
  for (size_t k = 0; k < hashes.size(); ++k) {
    if (k == 0 || hashes[k] != hashes[k - 1]) {
      ++distinct;
    } else if (t->shared.empty() || t->shared.back() != hashes[k]) {
      t->shared.push_back(hashes[k]);
    }
  }
  t->by_lists = t->shared.size() * 4 <= distinct;
  if (t->by_lists) {
    t->shared_of.reserve(lists.size());
    for (const auto& l : lists) t->shared_of.push_back(SharedOf(l, t->shared));
  }
  MutexLock lock(&together_mu_);
  return together_.emplace(std::move(key), std::move(t)).first->second;
}

Status SnapshotImpl::ResolveListedGroup(const SeriesEntry& e, size_t i, size_t j, bool reserved,
                                        const std::vector<std::span<const uint64_t>>& lists,
                                        const ListsTogether& together, std::vector<PlanItem>* plan,
                                        uint64_t* count) const {
  // The records of runs that several blocks hold, with their own copy of the
  // run (the payloads are not kept).
  struct Across {
    format::StoredRun run;
    int64_t step;
    uint32_t block;
    uint32_t row;
  };
  std::vector<Across> across;
  std::map<uint32_t, std::vector<uint32_t>> merged_rows;  // blocks with records in `across`
  auto add = [&](uint32_t block, std::vector<uint32_t> rows) {
    if (rows.empty()) return;
    *count += rows.size();
    const bool all = rows.size() == e.blocks[block].header->count;
    plan->push_back(PlanItem{block, all, all ? std::vector<uint32_t>{} : std::move(rows)});
  };
  // The blocks read here are small and far apart (a series of the many that
  // one commit holds): their pages are dropped as it goes, so that resolving
  // a series costs no more memory than its records' order.
  PageReleaser pages;
  for (size_t k = i; k < j; ++k) {
    const uint32_t bi = e.by_min_key[k];
    const BlockRef& b = e.blocks[bi];
    const bool hidden = !reserved && BlockMayBeHidden(b);
    const bool distinct = KeysDistinctIn(*b.header, lists[k - i]);
    // The block's runs that other blocks hold too (by hash): few, looked up
    // row by row.
    const std::vector<uint64_t>& shared_here = together.shared_of[k - i];
    const bool any_shared = !shared_here.empty();
    if (distinct && !hidden && !any_shared) {
      plan->push_back(PlanItem{bi, true, {}});
      *count += b.header->count;
      continue;
    }
    pages.WillRead(b.segment);
    RUNSTORE_ASSIGN_OR_RETURN(Payload p, ReadPayload(b));
    const KeyCursor c(p.view);
    const uint32_t n = p.view.count();
    std::vector<uint32_t> own;
    own.reserve(n);
    for (uint32_t r = 0; r < n; ++r) {
      if (any_shared &&
          std::binary_search(shared_here.begin(), shared_here.end(), format::RunHash(c.run(r)))) {
        across.push_back(Across{format::StoredRun(c.run(r)), c.step(r), bi, r});
      } else {
        own.push_back(r);
      }
    }
    if (!distinct) {
      // The later row of a key wins within a block. Where each run's rows
      // are one piece (a run's records logged together: "running", then
      // "done"), pieces are resolved alone, by step; else the block's rows
      // are sorted by key.
      auto same_run = [&](uint32_t a, uint32_t z) {
        const RunRef x = c.run(a), y = c.run(z);
        return x.is_string == y.is_string && (x.is_string ? x.s == y.s : x.i == y.i);
      };
      size_t pieces = 0;
      for (size_t x = 0; x < own.size(); ++x) pieces += x == 0 || !same_run(own[x - 1], own[x]);
      const size_t own_runs = lists[k - i].size() - shared_here.size();
      auto by_key = [&](uint32_t a, uint32_t z) {
        if (int cmp = CompareRunRefs(c.run(a), c.run(z)); cmp != 0) return cmp < 0;
        return c.step(a) < c.step(z);
      };
      if (pieces == own_runs) {
        // Runs are pieces: within each, by step (stable: later rows last).
        for (size_t x = 0; x < own.size();) {
          size_t end = x + 1;
          while (end < own.size() && same_run(own[x], own[end])) ++end;
          std::stable_sort(own.begin() + static_cast<ptrdiff_t>(x),
                           own.begin() + static_cast<ptrdiff_t>(end),
                           [&](uint32_t a, uint32_t z) { return c.step(a) < c.step(z); });
          x = end;
        }
      } else {
        std::stable_sort(own.begin(), own.end(), by_key);
      }
      size_t out = 0;
      for (size_t x = 0; x < own.size(); ++x) {
        const bool last = x + 1 == own.size() || !same_run(own[x], own[x + 1]) ||
                          c.step(own[x]) != c.step(own[x + 1]);
        if (last) own[out++] = own[x];
      }
      own.resize(out);
    }
    if (hidden) {
      std::erase_if(own, [&](uint32_t r) { return HiddenByResume(c.run(r), c.step(r), b.commit); });
    }
    std::sort(own.begin(), own.end());
    if (any_shared) {
      merged_rows[bi] = std::move(own);
    } else {
      add(bi, std::move(own));
    }
  }
  pages.Release();
  records_sorted_across_blocks_.fetch_add(across.size(), std::memory_order_relaxed);
  std::sort(across.begin(), across.end(), [&](const Across& a, const Across& z) {
    if (auto cmp = a.run <=> z.run; cmp != 0) return cmp < 0;
    if (a.step != z.step) return a.step < z.step;
    const BlockRef& x = e.blocks[a.block];
    const BlockRef& y = e.blocks[z.block];
    return std::tie(x.commit, x.block, a.row) < std::tie(y.commit, y.block, z.row);
  });
  for (size_t k = 0; k < across.size(); ++k) {
    const Across& w = across[k];
    if (k + 1 < across.size() && across[k + 1].run == w.run && across[k + 1].step == w.step) {
      continue;  // a later record of the key wins
    }
    if (!reserved && HiddenByResume(w.run, w.step, e.blocks[w.block].commit)) continue;
    merged_rows[w.block].push_back(w.row);
  }
  for (auto& [bi, rows] : merged_rows) {
    std::sort(rows.begin(), rows.end());
    add(bi, std::move(rows));
  }
  return Status::OK();
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
    std::vector<std::span<const uint64_t>> lists;
    const bool listed = GroupRunLists(e, i, j, &lists);
    const std::shared_ptr<const ListsTogether> together = listed ? Together(lists) : nullptr;
    if (listed && GroupSharesNoRun(e, i, j, reserved, lists, together->shared)) {
      for (size_t k = i; k < j; ++k) {
        plan.push_back(PlanItem{e.by_min_key[k], true, {}});
        count += e.blocks[e.by_min_key[k]].header->count;
      }
      i = j;
      continue;
    }
    // Where most runs are in one block of the group each (a sweep's status,
    // "running" then "done" in one commit, some experiments run again
    // later), the blocks are resolved one at a time and only the records of
    // the runs that several blocks hold are sorted together. Where most runs
    // are in several (a run logged step by step over many commits), the
    // proofs below compare pieces of runs rather than records.
    if (listed && together->by_lists) {
      RUNSTORE_RETURN_IF_ERROR(
          ResolveListedGroup(e, i, j, reserved, lists, *together, &plan, &count));
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
    records_sorted_across_blocks_.fetch_add(entries.size(), std::memory_order_relaxed);
    auto order_less = [&](const Entry& a, const Entry& b) {
      const BlockRef& x = e.blocks[a.block];
      const BlockRef& y = e.blocks[b.block];
      return std::tie(x.commit, x.block, a.row) < std::tie(y.commit, y.block, b.row);
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

}  // namespace runstore::read
