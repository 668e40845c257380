// sync.h: finishing the shipping of node-local staging after a crash.
//
// A writer with WriterOptions::staging_dir writes and commits its segments
// on node-local disk and ships each sealed one into the shared store
// (docs/design.md#staging). A writer that crashed, was preempted or could not
// reach the store leaves segments in staging: SyncStaging ships them, every
// sealed one whole and the committed prefix of an unsealed one, and removes
// them from staging once they are published. It is idempotent: run twice, or
// by two processes at once over one staging directory, nothing is published
// twice or lost, and a published file is never replaced by different bytes.
//
// It never ships the open segment of a writer that is still alive. Liveness
// is told by the writers' lease files in the staging directory, which a live
// writer rewrites every StagingLeaseBeatSeconds(): a lease that does not
// change while SyncStaging watches it for SyncOptions::wait_s belongs to a
// dead writer (no pids, locks or agreeing clocks are involved).
//
// Thread safety: any number of calls may run at once, in one process or many.
#ifndef RUNSTORE_SYNC_H_
#define RUNSTORE_SYNC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore {

struct SyncOptions {
  // Not owned; nullptr means Env::Default().
  Env* env = nullptr;
  // How long to watch the leases for a beat: a writer whose lease does not
  // change in this time is taken for dead. Must exceed the beat interval
  // (StagingLeaseBeatSeconds()) by a margin for a loaded machine; less than
  // two beats is InvalidArgument. A writer whose lease thread is stalled for
  // longer than this (a machine swapping hard, a process stopped with
  // SIGSTOP) is taken for dead: its open segment's committed prefix is
  // shipped, and its own later publication of that segment then fails.
  double wait_s = 5;
  // Take every writer for dead without watching: for when the caller knows
  // that no writer uses the staging directory (a job's epilogue, after its
  // processes have ended). Shipping a live writer's open segment makes its
  // later publication fail, so only use it when that is known.
  bool force = false;
  // Called as the sync goes, for a progress display: (segments done,
  // segments staged, bytes shipped so far); with both counts 0 while it
  // watches the leases, before the staged segments are counted, and with
  // done == staged at the end. Empty: not called.
  std::function<void(size_t done, size_t staged, uint64_t bytes_shipped)> progress;
};

// What SyncStaging did, by file name (relative to its directory).
struct SyncReport {
  std::vector<std::string> shipped;            // published into the store by this call
  std::vector<std::string> already_published;  // found published with the same bytes
  std::vector<std::string> skipped;            // of a live writer, left in staging
  std::vector<std::string> cleaned;  // leftovers removed: dead leases, temporaries, claims
  // Files named like leases that are not (a FIFO, a giant, garbage): each
  // "<name>: <why>". They protect nothing, are left where they are, and
  // make SyncStaging return Corruption naming the first once everything
  // else is shipped.
  std::vector<std::string> damaged_leases;
  uint64_t bytes_shipped = 0;
};

// Ships what `staging_dir` holds into the store at `store_path` (which must
// exist) and removes it from staging; see the top of this file. `report`
// may be null. Errors: NotFound (no such staging directory or store),
// Corruption (a staged segment whose committed data is damaged: it and the
// later segments of its writer stay in staging), AlreadyExists (a published
// segment with different bytes: nothing is replaced), IOError. On an error
// the report says what was done before it, and running again continues.
Status SyncStaging(const std::string& staging_dir, const std::string& store_path,
                   const SyncOptions& options, SyncReport* report);

// The interval at which a live writer (or a running SyncStaging) rewrites its
// lease file, in seconds.
double StagingLeaseBeatSeconds();

}  // namespace runstore

#endif  // RUNSTORE_SYNC_H_
