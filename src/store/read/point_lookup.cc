// Point lookups (Snapshot::Get): the visible record under one key, found by
// its blocks' key ranges or, where those reach too many blocks, by the
// series' run index.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"

namespace runstore::read {

using format::BlockHeader;
using format::Key;

namespace {

// Beyond this many blocks whose key ranges reach a key, a lookup asks the
// series' run index instead of reading them one by one.
constexpr size_t kMaxRangeCandidates = 16;

}  // namespace

std::vector<uint32_t> SnapshotImpl::MaxKeyTree(const std::vector<BlockRef>& blocks,
                                               const std::vector<uint32_t>& order) {
  const size_t leaves = std::bit_ceil(std::max<size_t>(order.size(), 1));
  std::vector<uint32_t> tree(2 * leaves, kNoBlock);
  std::copy(order.begin(), order.end(), tree.begin() + static_cast<ptrdiff_t>(leaves));
  for (size_t v = leaves; v-- > 1;) {
    const uint32_t l = tree[2 * v], r = tree[2 * v + 1];
    tree[v] =
        r == kNoBlock || (l != kNoBlock && blocks[r].header->max_key < blocks[l].header->max_key)
            ? l
            : r;
  }
  return tree;
}

bool SnapshotImpl::BlocksReaching(const std::vector<BlockRef>& blocks,
                                  const std::vector<uint32_t>& order,
                                  const std::vector<uint32_t>& tree, size_t end, const RunRef& run,
                                  int64_t step, size_t limit, std::vector<uint32_t>* out) {
  const size_t leaves = tree.size() / 2;
  const size_t first = out->size();
  // Depth-first over nodes (v, the first position below it, their count),
  // leaving out every node past `end` or whose largest max key is below the
  // key.
  struct Node {
    size_t v, lo, width;
  };
  Node stack[64];
  size_t depth = 0;
  stack[depth++] = {1, 0, leaves};
  while (depth > 0) {
    const Node n = stack[--depth];
    if (n.lo >= end || tree[n.v] == kNoBlock ||
        CompareKey(run, step, blocks[tree[n.v]].header->max_key) > 0) {
      continue;
    }
    if (n.width == 1) {
      if (out->size() - first >= limit) return false;
      out->push_back(order[n.lo]);
      continue;
    }
    const size_t half = n.width / 2;
    stack[depth++] = {2 * n.v + 1, n.lo + half, half};
    stack[depth++] = {2 * n.v, n.lo, half};
  }
  return true;
}

bool SnapshotImpl::MayHoldRuns(const BlockRef& b, std::span<const uint64_t> run_hashes) const {
  const auto& ri = b.segment->index.run_index;
  if (!ri) return true;
  const auto listed = ri->Of(b.block);
  if (listed.empty()) return true;
  // Both lists are sorted: each element of the smaller is searched in the
  // larger from where the one before it was found, by doubling steps, so that
  // a block that holds none costs O(m log(n/m)) for lists of m <= n hashes.
  std::span<const uint64_t> small = listed, large = run_hashes;
  if (small.size() > large.size()) std::swap(small, large);
  size_t at = 0;
  for (uint64_t h : small) {
    at = GallopTo(large, at, h);
    if (at == large.size()) return false;
    if (large[at] == h) return true;
  }
  return false;
}

void SnapshotImpl::EnsureRunIndex(const SeriesEntry& e) const {
  std::call_once(e.run_index_once, [&] {
    std::vector<uint64_t> hashes;
    for (uint32_t b = 0; b < e.blocks.size(); ++b) {
      // A sealed segment's footer has the block's runs (format version 4).
      const BlockRef& ref = e.blocks[b];
      if (const auto& ri = ref.segment->index.run_index) {
        const auto listed = ri->Of(ref.block);
        // Not listed (integer runs in order): its key range decides.
        if (listed.empty()) e.unindexed.push_back(b);
        for (uint64_t h : listed) e.run_index.emplace_back(h, b);
        continue;
      }
      // Otherwise the block's run column is read (an unsealed segment, or
      // one of an older version). Keys only: a chunked value is checked when
      // it is read.
      Result<Payload> p = ReadPayload(e.blocks[b], Check::kAllButValue);
      if (!p.ok()) {
        e.unindexed.push_back(b);
        continue;
      }
      format::RunHashesOf(p->view, &hashes);
      for (uint64_t h : hashes) e.run_index.emplace_back(h, b);
    }
    std::sort(e.run_index.begin(), e.run_index.end());
    e.run_index.erase(std::unique(e.run_index.begin(), e.run_index.end()), e.run_index.end());
    e.run_index.shrink_to_fit();
    SortByMinKey(e.blocks, &e.unindexed);
    e.unindexed_tree = MaxKeyTree(e.blocks, e.unindexed);
  });
}

Result<SnapshotImpl::Found> SnapshotImpl::Find(RunRef run, std::string_view name, int64_t step,
                                               Check check) const {
  auto it = series_.find(name);
  if (it == series_.end()) return Status::NotFound("series '" + std::string(name) + "' not found");
  const SeriesEntry& e = *it->second;
  auto not_found = [&] {
    return Status::NotFound("no record for run " + run.ToRunId().ToString() + ", series '" +
                            std::string(name) + "', step " + std::to_string(step));
  };
  const BlockRef* best = nullptr;
  uint32_t best_row = 0;
  Payload best_payload;
  const uint64_t hash = format::RunHash(run);
  // Block b, if it may hold the key and is ordered after the best so far:
  // read it and look for the key's last record in it.
  auto consider = [&](const BlockRef& b) -> Status {
    const BlockHeader& h = *b.header;
    if (CompareKey(run, step, h.min_key) < 0 || CompareKey(run, step, h.max_key) > 0 ||
        step < h.min_step || step > h.max_step) {
      return Status::OK();
    }
    // A block that a sealed segment's footer lists without the run's hash
    // holds none of its records (docs/format.md "Run index"), whichever way
    // it became a candidate: it is not read, as a scan filtered to the run
    // does not read it (scan.cc), so the two report the same damage.
    if (!MayHoldRuns(b, std::span<const uint64_t>(&hash, 1))) return Status::OK();
    if (best && std::tie(b.commit, b.block) < std::tie(best->commit, best->block)) {
      return Status::OK();
    }
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
      found = v.FindLast(run, step);
    }
    if (found < 0) return Status::OK();
    best = &b;
    best_row = static_cast<uint32_t>(found);
    best_payload = std::move(p);
    return Status::OK();
  };
  // Candidates by key range: the blocks with min_key <= key whose max_key
  // reaches it; past kMaxRangeCandidates of them, the run index.
  auto ends_at = [&](const std::vector<uint32_t>& order) {
    return static_cast<size_t>(
        std::partition_point(
            order.begin(), order.end(),
            [&](uint32_t b) { return CompareKey(run, step, e.blocks[b].header->min_key) >= 0; }) -
        order.begin());
  };
  EnsureKeyOrder(e);
  const size_t ub = ends_at(e.by_min_key);
  // Where the ranges do not nest, the blocks that reach the key are the last
  // few before it: walk back while the running maximum reaches it.
  size_t reach = 0;
  while (reach < ub && reach <= kMaxRangeCandidates &&
         CompareKey(run, step, e.blocks[e.prefix_max[ub - 1 - reach]].header->max_key) <= 0) {
    ++reach;
  }
  if (reach <= kMaxRangeCandidates) {
    for (size_t k = ub; k-- > ub - reach;)
      RUNSTORE_RETURN_IF_ERROR(consider(e.blocks[e.by_min_key[k]]));
  } else {
    // The ranges nest: the tree finds the blocks that reach the key, and
    // past kMaxRangeCandidates of them the run index does.
    std::vector<uint32_t> candidates;
    if (!BlocksReaching(e.blocks, e.by_min_key, e.max_tree, ub, run, step, kMaxRangeCandidates,
                        &candidates)) {
      EnsureRunIndex(e);
      auto lo = std::lower_bound(e.run_index.begin(), e.run_index.end(), std::make_pair(hash, 0u));
      for (; lo != e.run_index.end() && lo->first == hash; ++lo) {
        RUNSTORE_RETURN_IF_ERROR(consider(e.blocks[lo->second]));
      }
      candidates.clear();
      BlocksReaching(e.blocks, e.unindexed, e.unindexed_tree, ends_at(e.unindexed), run, step,
                     SIZE_MAX, &candidates);
    }
    for (uint32_t b : candidates) RUNSTORE_RETURN_IF_ERROR(consider(e.blocks[b]));
  }
  if (!best) return not_found();
  if (name[0] != '~' && HiddenByResume(run, step, best->commit)) return not_found();
  return Found{best, best_row, std::move(best_payload)};
}

Result<Value> SnapshotImpl::Get(RunRef run, std::string_view name, int64_t step) const {
  RUNSTORE_ASSIGN_OR_RETURN(Found f, Find(run, name, step, Check::kAll));
  return MakeRecordValue(*f.block->header, f.payload, f.row);
}

}  // namespace runstore::read
