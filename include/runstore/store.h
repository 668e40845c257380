// store.h: open a store; start here.
//
// A store is a directory holding a marker file `RUNSTORE` (the format
// version) and `segments/`, where every writer appends its own segment files.
// Open a Store, then create Writers to append and take Snapshots to read.
//
//   RUNSTORE_ASSIGN_OR_RETURN(auto store, runstore::Store::Open("/scratch/sweep", {}));
//   RUNSTORE_ASSIGN_OR_RETURN(auto writer, store->NewWriter({}));
//   RUNSTORE_RETURN_IF_ERROR(writer->Append(42, "loss", 0, 0.25));
//   RUNSTORE_RETURN_IF_ERROR(writer->Commit());
//   RUNSTORE_ASSIGN_OR_RETURN(auto snap, store->Refresh());  // sees the commit
//   RUNSTORE_ASSIGN_OR_RETURN(runstore::Value v, snap->Get(42, "loss", 0));
//
// Thread safety: a Store may be used from many threads; Refresh() and
// GetSnapshot() are serialised internally.
//
// fork(): a Store opened before a fork may be read in the child (it holds no
// thread between calls, and reads through mappings and pread), unless
// another thread of the parent was inside one of its calls at the fork: its
// locks may then be held by a thread the child does not have, and the child
// must open the store again (docs/design.md#fork).
//
// The headers cite the documents of runstore's repository (docs/design.md,
// docs/format.md, docs/reliability.md), which `cmake --install` puts beside
// them, in share/doc/runstore/.
#ifndef RUNSTORE_STORE_H_
#define RUNSTORE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runstore/compact.h"
#include "runstore/env.h"
#include "runstore/reader.h"
#include "runstore/status.h"
#include "runstore/types.h"
#include "runstore/writer.h"

namespace runstore {

// The format version this build writes (store marker and segments); it reads
// versions 1..this. Version 2 added Writer::Flush's commit-record flag and
// key columns stored as sequences; version 3, a checksum per chunk of large
// arrays, so that reading part of one checks only that part; version 4, the
// footer's run index (which blocks hold a run) and footer sections
// (docs/format.md "Versioning").
inline constexpr uint32_t kFormatVersion = 4;

// What opening a store (and refreshing it) does with a segment that cannot
// be read: its bytes are damaged (Corruption), or the file cannot be opened
// or read (IOError).
enum class OnDamaged {
  // Fail with that error, naming the file and offset. The default: leaving
  // a segment out can resurface values its records overwrote and records its
  // resume markers hid, so nothing is served until someone decides.
  kFail,
  // Serve every other segment, and list the ones left out, with the error
  // each gave, in Snapshot::DamagedSegments() (and VerifyAll's problems).
  // What is read is then the store as if those segments did not exist.
  kSkip,
};

struct StoreOptions {
  // Not owned; must outlive the Store and everything made from it. nullptr
  // means Env::Default().
  Env* env = nullptr;
  // Create the directory and marker when missing (ignored when read_only).
  bool create_if_missing = true;
  // Open for reading only: NewWriter fails and nothing is ever written.
  bool read_only = false;
  // See OnDamaged (docs/design.md#damaged-segments).
  OnDamaged on_damaged = OnDamaged::kFail;
  // Read sealed segments' indexes from the store's catalog where it is
  // current (docs/design.md#catalog); false reads every segment's footer.
  bool use_catalog = true;
  // A store opened for writing rewrites its catalog when opening it read at
  // least this many sealed segments' footers, and more than a quarter as many
  // as the catalog held: the store grew since the catalog was written. 0
  // never writes it (WriteCatalog still does).
  uint64_t catalog_rewrite_segments = 256;
};

// How the last Open or Refresh read the store's segments.
struct RefreshStats {
  uint64_t segments = 0;         // in the snapshot
  uint64_t from_catalog = 0;     // sealed, index read from the catalog
  uint64_t from_footer = 0;      // sealed, index read from the segment's own footer
  uint64_t recovered = 0;        // being written (or crashed): read by recovery
  uint64_t unchanged = 0;        // already loaded by an earlier refresh
  bool catalog_written = false;  // the catalog was rewritten
  // The snapshot was built over every segment; false when nothing changed,
  // or when it was the last one with the new and grown segments added (a
  // cost in proportion to them: docs/design.md#refresh).
  bool rebuilt = false;
  // Why the catalog was ignored when the store was opened (damaged, larger
  // than a catalog of its segments can be, a newer version, no memory for
  // it): opening then read every segment instead. OK when it was read or
  // there is none.
  Status catalog_status;
};

// The process's budget of segment mappings and open segment files
// (docs/design.md#catalog, "Opening many segments"): every store a process
// opens shares it. A segment is mapped and opened on its first read and
// keeps both while it is among those read most recently; beyond the budget
// the least recently read give theirs up (a value or a block a reader holds
// keeps its own). The defaults: half of vm.max_map_count (32,765 of Linux's
// 65,530) mappings and 32 descriptors, an eighth of RLIMIT_NOFILE's soft
// limit where that is lower (at least 4). The environment variables
// RUNSTORE_SEGMENT_MAPPINGS and RUNSTORE_SEGMENT_FILES, read once when the
// process first opens a store, set them for any front end (the command
// line, Python).
struct SegmentBudget {
  size_t mappings = 0;
  size_t files = 0;
};
// The budget now.
SegmentBudget GetSegmentBudget();
// Sets the budget from the next segment read on. InvalidArgument, and no
// change, if either is 0.
Status SetSegmentBudget(const SegmentBudget& budget);

class Store {
 public:
  // Opens (and, when allowed, creates) the store at `path`. Errors:
  // NotFound (missing and not created), InvalidArgument (path is a regular
  // file, or a directory that is not a store and not empty), NotSupported (a
  // newer format version), IOError (permissions, read-only file system).
  static Result<std::unique_ptr<Store>> Open(const std::string& path, const StoreOptions& options);

  virtual ~Store() = default;

  virtual const std::string& path() const = 0;
  // The format version in the store's marker file.
  virtual uint32_t format_version() const = 0;

  // Creates a writer appending to this store. Fails with FailedPrecondition
  // for a read-only store and IOError if the directory is not writable.
  virtual Result<std::unique_ptr<Writer>> NewWriter(const WriterOptions& options) = 0;

  // The current snapshot (taken at Open or at the last Refresh). Cheap.
  virtual std::shared_ptr<const Snapshot> GetSnapshot() = 0;

  // Takes a new snapshot that includes every commit made since the last one.
  // Segments sealed before are not read again; open segments are read from
  // where the last snapshot stopped.
  virtual Result<std::shared_ptr<const Snapshot>> Refresh() = 0;

  // Merges many small sealed segments into few large ones, ordered by series
  // then run then step, while writers write and readers read: what any
  // snapshot shows is the same record for record before and after
  // (docs/design.md#compaction). Memory stays within options.memory_bytes
  // (plus a small constant) whatever the store's size. Fills *report (may be
  // null). Errors: FailedPrecondition for a read-only store or one with
  // damaged segments (nothing is merged then); IOError naming the file; a
  // crash at any point leaves the store as it was or compacted, and the next
  // Compact removes what was left behind.
  virtual Status Compact(const CompactOptions& options, CompactReport* report) = 0;

  // How the last Open or Refresh read the segments.
  virtual RefreshStats last_refresh() const = 0;

  // Writes the catalog (docs/design.md#catalog) from a fresh Refresh: every
  // sealed segment's index, so that the next Open reads one file instead of
  // every segment's footer. Returns the number of segments in it.
  // FailedPrecondition for a read-only store.
  virtual Result<uint64_t> WriteCatalog() = 0;
};

}  // namespace runstore

#endif  // RUNSTORE_STORE_H_
