// Point lookups (Snapshot::Get): the visible record under one key, found by
// its blocks' key ranges.
#include "store/snapshot.h"
#include "store/snapshot_helpers.h"

namespace runstore {

using format::BlockHeader;
using format::Key;

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

}  // namespace runstore
