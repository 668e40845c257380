// Node-local staging (docs/design.md#staging): the pieces a writer with
// WriterOptions::staging_dir and SyncStaging (runstore/sync.h) share.
//
//  - Claiming a segment number in the shared store: a placeholder
//    <writer_id>-<seq>.rss created there with O_EXCL, holding only a claim
//    record (format/claim.h; shorter than a segment header, so it reads as
//    an empty segment, docs/format.md "Recovery"), so numbers stay unique
//    across nodes and a compactor knows that a segment may be staged under
//    it; the segment itself is written in staging under the same name.
//  - Publishing a staged segment over its placeholder with the publish
//    protocol (invariant 5): copy under a temporary name that carries the
//    publisher's owner token, fsync, rename into place, fsync the directory.
//    A placeholder is only ever replaced while it is one (shorter than a
//    segment header), and never by the file itself.
//  - Leases: <token>.lease in the staging directory, rewritten by a thread
//    every StagingLeaseBeatSeconds() while its owner (a writer or a sync)
//    lives. A lease that does not change while someone watches it for longer
//    than that belongs to a dead owner.
//  - The Shipper: a writer's thread that publishes its sealed segments in
//    order, then removes them from staging, and keeps the shipped ticket.
#ifndef RUNSTORE_STORE_STAGING_STAGING_H_
#define RUNSTORE_STORE_STAGING_STAGING_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "format/claim.h"
#include "runstore/env.h"
#include "runstore/status.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace runstore::staging {

// The variable that gives WriterOptions::staging_dir when it is unset.
inline constexpr char kStagingDirVariable[] = "RUNSTORE_STAGING_DIR";

// A fresh random owner token: 16 lowercase hex digits.
std::string NewOwnerToken();

// "<segment name>.<token>.tmp": a temporary of a publication in progress.
// Readers ignore it (it does not end in .rss).
std::string TempName(std::string_view segment_name, std::string_view token);
bool ParseTempName(std::string_view name, std::string* segment_name, std::string* token);
// "<token>.lease", and the temporary it is rewritten through,
// "<token>.lease.tmp".
std::string LeaseName(std::string_view token);
bool ParseLeaseName(std::string_view name, std::string* token);
bool ParseLeaseTempName(std::string_view name, std::string* token);

// Claims `name` in the store's `segments_dir` by creating it with O_EXCL
// (AlreadyExists if another writer holds it) and writing `claim` into it,
// synced. Does not sync the directory (the caller does, before it writes
// anything the claim protects). A placeholder left empty by a failure or a
// crash here claims nothing that was staged: the staged file is created
// only after the claim is complete.
Status ClaimSegment(Env* env, const std::string& segments_dir, const std::string& name,
                    const format::SegmentClaim& claim);

// Whether a file of `size` bytes in segments/ is a placeholder (an empty
// segment to readers, which a publication may replace) rather than a
// segment: shorter than a segment header.
bool IsPlaceholderSize(uint64_t size);

// A number claimed in the store, and the claim's bound on the commit times
// of the segment staged under it (the writer's first commit there must be
// later).
struct Claimed {
  uint64_t seq = 0;
  int64_t not_before_ns = 0;
};

// InvalidArgument unless `staging_dir` and the store at `store_dir` are
// apart: the staging directory must not be the store, its segments/, or any
// directory inside the store, and must not hold the store. Directories are
// compared by identity (device and inode, following "..": symbolic links,
// bind mounts and other spellings of one directory are the same), never by
// their path strings.
Status CheckApart(Env* env, const std::string& staging_dir, const std::string& store_dir);

enum class Published {
  kShipped,       // this call renamed the bytes into place
  kAlreadyThere,  // the store held the same bytes already
};

// Publishes bytes [0, length) of `source` as `segments_dir`/`name`, over its
// placeholder: copies them to TempName(name, token), syncs, renames, syncs
// the directory. The target must exist (NotFound: its claim is gone, and
// nothing is published) and be empty (then it is replaced) or begin with
// those bytes (kAlreadyThere: published before, possibly with commits that
// staging lost since in a power cut; the directory is synced then too, since
// the publisher that renamed them in may have died before it did); anything
// else is AlreadyExists and nothing is replaced. `source` NotFound is
// returned as such (someone else shipped it and removed it).
Result<Published> PublishSegment(Env* env, const std::string& source, uint64_t length,
                                 const std::string& segments_dir, const std::string& name,
                                 const std::string& token);

// A lease file and the thread that rewrites it.
class Lease {
 public:
  // Writes `dir`/<token>.lease at once (so that it exists before anything it
  // protects), then every StagingLeaseBeatSeconds() until Stop. `kind` is
  // "writer" or "sync"; `writer_id` names the writer whose segments it
  // protects (empty for a sync).
  static Result<std::unique_ptr<Lease>> Start(Env* env, std::string dir, std::string token,
                                              std::string kind, std::string writer_id);
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Stops beating and removes the lease file. The first error of a beat, or
  // of the removal.
  Status Stop();

 private:
  Lease(Env* env, std::string dir, std::string token, std::string kind, std::string writer_id);
  // Rewrites the lease; `durable` (the first beat) syncs it and its
  // directory entry.
  Status Beat(bool durable) RUNSTORE_EXCLUDES(mu_);
  void Loop() RUNSTORE_EXCLUDES(mu_);

  // ---- Constant after construction.
  Env* const env_;
  const std::string dir_;
  const std::string token_;
  const std::string kind_;
  const std::string writer_id_;

  // ---- Protected by mu_.
  Mutex mu_;
  CondVar cv_;
  bool stop_ RUNSTORE_GUARDED_BY(mu_) = false;
  bool stopped_ RUNSTORE_GUARDED_BY(mu_) = false;
  Status error_ RUNSTORE_GUARDED_BY(mu_);
  uint64_t beats_ = 0;  // owned by whichever thread beats: Start, then the loop

  std::thread thread_;
};

// A writer's shipping thread: publishes the sealed segments it is given, in
// order, and removes each from staging once its publication is durable; and
// claims the numbers of the writer's next segments in the store ahead of
// need, so that a roll does not wait for the shared file system either.
class Shipper {
 public:
  // `lease` protects the writer's open segment in staging; Close stops it.
  // Claims are for segments of `writer_id`, from number `first_seq` on; the
  // first is claimed at once.
  Shipper(Env* env, std::string staging_dir, std::string segments_dir, std::string token,
          std::unique_ptr<Lease> lease, std::string writer_id, uint64_t first_seq);
  ~Shipper();
  Shipper(const Shipper&) = delete;
  Shipper& operator=(const Shipper&) = delete;

  // Ships the sealed segment `name` (in staging); once it is published,
  // every commit up to `ticket` is shipped. An empty name ships nothing: the
  // commits up to `ticket` wrote nothing that is not shipped once the items
  // before it are.
  void Enqueue(std::string name, uint64_t ticket) RUNSTORE_EXCLUDES(mu_);
  // The newest ticket shipped with every one before it (0: none).
  uint64_t shipped() const RUNSTORE_EXCLUDES(mu_);
  // Waits until `ticket` is shipped, or returns the error that stopped the
  // shipping (the segment stays in staging for `runstore sync`).
  Status WaitShipped(uint64_t ticket) RUNSTORE_EXCLUDES(mu_);
  // A number >= `from` claimed (durably) in the store for the writer's next
  // segment: the one claimed ahead, or, if none is ready, one claimed now.
  // Starts claiming the one after. Not after Close.
  Result<Claimed> TakeClaim(uint64_t from) RUNSTORE_EXCLUDES(mu_);
  // Whether a number is claimed ahead and ready to take without waiting. If
  // not, makes sure one is being claimed (again, after a failed claim).
  bool ClaimReady() RUNSTORE_EXCLUDES(mu_);
  // The error that stopped shipping, else that of the last claim if it
  // failed, else OK.
  Status status() const RUNSTORE_EXCLUDES(mu_);
  // Whether nothing is queued or being shipped.
  bool idle() const RUNSTORE_EXCLUDES(mu_);
  // Ships what is queued, stops the thread and the lease. The first error.
  Status Close() RUNSTORE_EXCLUDES(mu_);

 private:
  void Loop() RUNSTORE_EXCLUDES(mu_);
  Status ShipOne(const std::string& name);
  // Claims the first free number from `from` on and syncs the directory.
  Result<Claimed> ClaimFrom(uint64_t from);
  bool ClaimWantedLocked() const RUNSTORE_REQUIRES(mu_) {
    return claim_wanted_ && !claimed_ && claim_error_.ok() && !stop_;
  }

  // ---- Constant after construction.
  Env* const env_;
  const std::string staging_dir_;
  const std::string segments_dir_;
  const std::string token_;
  const std::string writer_id_;

  // ---- Protected by mu_.
  mutable Mutex mu_;
  CondVar cv_;
  struct Item {
    std::string name;
    uint64_t ticket;
  };
  std::deque<Item> queue_ RUNSTORE_GUARDED_BY(mu_);
  uint64_t shipped_ RUNSTORE_GUARDED_BY(mu_) = 0;
  Status error_ RUNSTORE_GUARDED_BY(mu_);  // sticky: nothing more is shipped
  bool stop_ RUNSTORE_GUARDED_BY(mu_) = false;
  bool closed_ RUNSTORE_GUARDED_BY(mu_) = false;
  std::unique_ptr<Lease> lease_ RUNSTORE_GUARDED_BY(mu_);
  // Claims: the next number to try, whether the thread should claim one,
  // the one claimed ahead and not taken yet, the error of the last claim.
  uint64_t claim_from_ RUNSTORE_GUARDED_BY(mu_);
  bool claim_wanted_ RUNSTORE_GUARDED_BY(mu_) = true;
  std::optional<Claimed> claimed_ RUNSTORE_GUARDED_BY(mu_);
  Status claim_error_ RUNSTORE_GUARDED_BY(mu_);
  Status last_claim_error_ RUNSTORE_GUARDED_BY(mu_);  // until a claim succeeds

  std::thread thread_;
};

}  // namespace runstore::staging

#endif  // RUNSTORE_STORE_STAGING_STAGING_H_
