// compact.h: what Store::Compact (`runstore compact`, Python Store.compact)
// is asked and what it reports: merging many small sealed segments into few
// large ones whose blocks are ordered by series, run and step, while writers
// write and readers read (docs/design.md#compaction). store.h includes it.
//
// Thread safety: plain structs; `progress` is called from the compacting
// thread.
#ifndef RUNSTORE_COMPACT_H_
#define RUNSTORE_COMPACT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runstore/types.h"

namespace runstore {

// Store::Compact: which sealed segments to merge, and how
// (docs/design.md#compaction).
struct CompactOptions {
  // Plan and report, write nothing.
  bool dry_run = false;
  // Only segments created at least this many seconds ago, by the segment
  // header's created_ns (the clock of the node that created it) against this
  // process's clock; 0: any age. A filter, never a correctness condition.
  double older_than_s = 0;
  // Only segments whose file is smaller than this many bytes; 0: any size.
  uint64_t smaller_than_bytes = 0;
  // Bound on the memory the merge holds (keys being resolved, values being
  // copied, mapped input pages); at least 16 MiB.
  uint64_t memory_bytes = 256ull << 20;
  // Size target of each output segment.
  uint64_t segment_bytes = 1ull << 30;
  // Target raw size of an output block, as WriterOptions::block_bytes.
  uint64_t block_bytes = 1ull << 20;
  // Codec of the output's blocks.
  Codec codec = Codec::kNone;
  int zstd_level = 3;
  // Fewer mergeable segments than this: nothing is done.
  uint32_t min_inputs = 2;
  // The running compaction rewrites its lease file this often, so that
  // others know its temporaries are in use; 0: written once (tests).
  double lease_refresh_s = 1.0;
  // Another compaction's leftovers (temporaries, claims) are removed only
  // when its lease has not changed for this long, as seen by this process.
  double lease_expiry_s = 30.0;
  // Segments a compaction replaced stay this long after it published
  // (readers of newer snapshots leave them out), so that a reader holding an
  // older snapshot can still open those it has not read yet; a later
  // compaction removes them once their replacement is older than this (by
  // the replacement's created_ns against this process's clock). 0: this
  // compaction removes its inputs at once, and a reader of an older snapshot
  // that had not opened one of them gets NotFound ("refresh and read again").
  double retain_inputs_s = 300;
  // Also merge the unsealed segments that crashed writers left (adopt
  // them, docs/design.md#adoption): the caller asserts that no writer writes
  // into the store directly while it runs (a job's epilogue, as `runstore
  // sync --force` asserts it of staging). Each one's committed length is
  // recorded; should a writer of one go on committing after all, the
  // compaction stops standing and readers read its inputs as before.
  bool adopt_unsealed = false;
  // Called from the compacting thread as the merge goes through the inputs'
  // stored records: (records done, records in all), at least once at the
  // end of the merge and otherwise every 64Ki records; not on a dry run.
  // For a progress display; empty: not called.
  std::function<void(uint64_t done_records, uint64_t total_records)> progress;
};

struct CompactReport {
  bool dry_run = false;
  // Inputs merged (or, dry run, that would be), relative to the store.
  std::vector<std::string> inputs;
  uint64_t input_bytes = 0;
  uint64_t input_records = 0;  // stored, before resolution
  // Candidates left out because an unmerged segment shares runs with them
  // across the new commit's place in commit order, or another compaction
  // holds them.
  std::vector<std::string> excluded;
  // Placeholders of segments that may be committed in some node's staging
  // and not yet published (docs/design.md#compaction-and-staging), and the
  // candidates held back until they are: those with a commit that may be
  // ordered after one of the staged segments' commits. `runstore sync`
  // publishes them, and removes the claims of dead writers that staged
  // nothing under them.
  std::vector<std::string> staged;
  std::vector<std::string> held_back;
  std::vector<std::string> outputs;  // the segments written
  uint64_t output_bytes = 0;
  uint64_t output_records = 0;  // visible records, each once
  // Files of earlier, interrupted or finished compactions removed first
  // (and replaced segments past retain_inputs_s).
  std::vector<std::string> removed_leftovers;
  // Replaced segments kept for readers of older snapshots (this compaction's
  // inputs, or an earlier one's not yet retain_inputs_s old); a later
  // compaction removes them.
  std::vector<std::string> retained;
  // Of the inputs, the unsealed segments adopted (adopt_unsealed).
  std::vector<std::string> adopted;
  double seconds = 0;
};

}  // namespace runstore

#endif  // RUNSTORE_COMPACT_H_
