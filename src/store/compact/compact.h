// Compaction (Store::Compact, docs/design.md#compaction): merging sealed
// segments into few large ones that readers see as the same records.
#ifndef RUNSTORE_STORE_COMPACT_COMPACT_H_
#define RUNSTORE_STORE_COMPACT_COMPACT_H_

#include <map>
#include <memory>
#include <string>

#include "runstore/env.h"
#include "runstore/store.h"
#include "store/compact/compacted.h"
#include "store/read/snapshot.h"

namespace runstore::compact {

// What the compactor needs of the store: a fresh snapshot with every loaded
// segment (also those readers leave out) and the rule's verdict on them.
struct CompactionView {
  std::shared_ptr<const read::SnapshotImpl> snapshot;
  std::map<std::string, std::shared_ptr<const read::LoadedSegment>> all;  // by file name
  CompactedResolution resolution;
};

class CompactionHost {
 public:
  virtual ~CompactionHost() = default;
  virtual Result<CompactionView> RefreshForCompaction() = 0;
};

// Store::Compact for the store at `store_path`.
Status RunCompaction(Env* env, const std::string& store_path, CompactionHost* host,
                     const CompactOptions& options, CompactReport* report);

}  // namespace runstore::compact

#endif  // RUNSTORE_STORE_COMPACT_COMPACT_H_
