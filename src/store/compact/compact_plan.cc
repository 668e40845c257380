// The compaction planner (docs/design.md#compaction, "Commit order"): which
// candidates can become one commit at the greatest time among them.
//
// Merging S into C moves every record of S to C's place in commit order.
// For a record x of a segment u outside S and a record y of S of the same
// run, only their order matters to key resolution (which of two writes of a
// key wins; whether a resume marker hides a record). Before, x and y compare
// as their commits do; after, x compares with C. The two agree unless x's
// commit lies between y's and C's. So S is exact when no such u has a commit
// ordered after the first commit of an S member it shares a run with and
// before C; members that break this are left out until none does.
#include <algorithm>
#include <unordered_map>

#include "store/compact/compact_internal.h"
#include "store/read/snapshot_helpers.h"

namespace runstore::compact {

using read::CommitOrder;
using read::LoadedSegment;
using read::Payload;
using read::SnapshotImpl;
namespace {

// The run hashes (format::RunHash) of every record of a segment, sorted and
// distinct: from the footer's run index when the segment has one, else from
// the blocks (a single-run block from its header).
Result<std::vector<uint64_t>> RunHashesOf(const SnapshotImpl& snap, uint32_t si) {
  const LoadedSegment& seg = *snap.segments()[si];
  std::vector<uint64_t> out;
  bool read_blocks = false;
  for (uint32_t bi = 0; bi < seg.index.blocks.size(); ++bi) {
    const format::BlockInfo& b = seg.index.blocks[bi];
    if (b.header.min_key.run == b.header.max_key.run) {
      out.push_back(format::RunHash(RunRef(b.header.min_key.run)));
      continue;
    }
    // The footer lists a block's runs unless they are integers in order
    // (an empty list): then, as for an unsealed segment, its run column.
    if (seg.index.run_index && !seg.index.run_index->Of(bi).empty()) {
      const auto listed = seg.index.run_index->Of(bi);
      out.insert(out.end(), listed.begin(), listed.end());
      continue;
    }
    SnapshotImpl::BlockRef ref{&seg, bi, CommitOrder{}, &b.header};
    RUNSTORE_ASSIGN_OR_RETURN(Payload p, snap.ReadPayload(ref));
    for (uint32_t r = 0; r < p.view.count(); ++r) out.push_back(format::RunHash(p.view.run(r)));
    read_blocks = true;
  }
  // The planner may read every block of the store: its pages must not stay
  // resident (docs/design.md#compaction-memory).
  if (read_blocks && seg.is_open()) seg.map->ReleasePages();
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Result<Plan> PlanCompaction(const SnapshotImpl& snap, const std::vector<uint32_t>& candidates,
                            const std::string& writer_id, uint32_t min_inputs,
                            int64_t staged_not_before) {
  const auto& segs = snap.segments();
  const uint32_t n = static_cast<uint32_t>(segs.size());
  std::vector<std::vector<Order>> commits(n);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& h = segs[i]->index.header;
    for (const auto& c : segs[i]->index.commits) {
      commits[i].push_back(Order{c.time_ns, h.writer_id, h.sequence});
    }
  }
  Plan plan;
  std::vector<bool> in(n, false);
  for (uint32_t c : candidates) {
    // A staged segment u, published later, may share a run with any
    // candidate and has commits anywhere after its bound: a candidate with
    // a commit past the bound could have one of u's between its first and
    // C. One whose commits all lie at or before it cannot, and then neither
    // can C, which takes the greatest of their times.
    if (!commits[c].empty() && commits[c].back().time_ns > staged_not_before) {
      plan.held_back.push_back(c);
      continue;
    }
    in[c] = true;
  }
  std::vector<std::vector<uint64_t>> runs(n);
  std::vector<bool> have_runs(n, false);
  auto runs_of = [&](uint32_t i) -> Result<const std::vector<uint64_t>*> {
    if (!have_runs[i]) {
      RUNSTORE_ASSIGN_OR_RETURN(runs[i], RunHashesOf(snap, i));
      have_runs[i] = true;
    }
    return &runs[i];
  };
  while (true) {
    uint32_t count = 0;
    int64_t t = INT64_MIN;
    for (uint32_t i = 0; i < n; ++i) {
      if (!in[i] || commits[i].empty()) continue;
      ++count;
      t = std::max(t, commits[i].back().time_ns);
    }
    if (count < std::max<uint32_t>(min_inputs, 1)) {
      plan.inputs.clear();  // too few left to be worth a merge
      return plan;
    }
    // Every part of C sorts at or before this (its sequence is finite).
    const Order c_order{t, writer_id, UINT64_MAX};
    // Only a segment outside S with a commit before C can break S; when
    // there is none (compacting every segment of a quiet store) no run is
    // read: the planner's reads of run columns and its run sets were a
    // fifth of such a compaction's time (docs/performance.md "Compaction").
    const auto outside = [&](uint32_t u) {
      return !in[u] && !commits[u].empty() && commits[u].front() < c_order;
    };
    bool any_outside = false;
    for (uint32_t u = 0; u < n && !any_outside; ++u) any_outside = outside(u);
    const auto finish = [&] {
      for (uint32_t i = 0; i < n; ++i) {
        if (in[i]) plan.inputs.push_back(i);
      }
      plan.time_ns = t;
      std::sort(plan.excluded.begin(), plan.excluded.end());
      return plan;
    };
    if (!any_outside) return finish();
    std::unordered_map<uint64_t, std::vector<uint32_t>> members;
    for (uint32_t i = 0; i < n; ++i) {
      if (!in[i]) continue;
      RUNSTORE_ASSIGN_OR_RETURN(const std::vector<uint64_t>* r, runs_of(i));
      for (uint64_t h : *r) members[h].push_back(i);
    }
    bool removed = false;
    for (uint32_t u = 0; u < n; ++u) {
      if (!outside(u)) continue;
      RUNSTORE_ASSIGN_OR_RETURN(const std::vector<uint64_t>* r, runs_of(u));
      for (uint64_t h : *r) {
        auto it = members.find(h);
        if (it == members.end()) continue;
        for (uint32_t s : it->second) {
          if (!in[s] || commits[s].empty()) continue;
          // A commit of u after s's first and before C?
          auto after = std::upper_bound(commits[u].begin(), commits[u].end(), commits[s].front());
          if (after != commits[u].end() && *after < c_order) {
            in[s] = false;
            plan.excluded.push_back(s);
            removed = true;
          }
        }
      }
    }
    if (!removed) return finish();
  }
}

}  // namespace runstore::compact
