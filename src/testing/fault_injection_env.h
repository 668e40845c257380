// fault_injection_env.h: an Env wrapper that models a machine which can fail
// an I/O call, stop dead, and lose power (after leveldb's
// fault_injection_test). Tests run a protocol over it, break it at a chosen
// operation, simulate the reboot, and check docs/design.md's invariants on what is
// left.
//
// OPERATIONS. Every mutating call is one numbered operation: NewWritableFile,
// WritableFile::Append, WriteAt, Sync, SyncPrefix and Close, CreateDir, RemoveFile, RenameFile and
// SyncDir. Reads (NewRandomAccessFile and everything done through the file it
// returns, FileExists, IsDirectory, GetChildren, GetFileSize,
// CheckWritableDir, NowNanos) go straight to the base env, are not counted,
// and keep working after a crash so that a test can look at what is there.
// With RUNSTORE_FAULT_TRACE set in the environment, each operation is printed
// on stderr (its number, what, the path, and whether it was refused), to read
// the sequence behind a failing crash point.
//
// FAILURES.
//  - FailOperation(n, err): the n-th operation from now fails with
//    IOError(err) and has no effect, except that a failing Append first
//    writes the first half of its bytes (a short write, then the error) and a
//    failing Close still releases the file, as close(2) does.
//  - A failed Sync (injected or real) makes nothing durable, then or later:
//    later Syncs of that file succeed but change nothing. Linux behaves so
//    (the pages that failed to write are marked clean, and the error is
//    reported once), and this catches code that retries fsync after EIO.
//  - CrashAfter(n): operations 1..n from now succeed; every later one fails
//    with IOError(EIO) "simulated crash" and has no effect: the machine has
//    stopped. crashed() tells whether an operation was refused. What is on
//    the base env at that point is what the OS held; SimulatePowerLoss then
//    gives what the disk held.
//
// POWER LOSS. SimulatePowerLoss(mode, seed) rewrites the base env into the
// state a reboot would find, then clears the crash, all tracking and the
// armed failures (the machine is back; every file on the base is now durable
// as it stands). Handles opened before it fail with IOError(EIO) afterwards.
//  1. Directory entries. Creating a file (NewWritableFile of a name that did
//     not exist), CreateDir, RemoveFile and RenameFile become durable only
//     when the directory holding the entry is SyncDir'ed; for a rename, the
//     directory of the target. Changes not yet durable are undone, newest
//     first: a created file is deleted; a created directory is emptied; a
//     renamed file returns to its old name and the file the target held
//     before comes back; a removed file comes back with its contents.
//  2. File data. A file written through this env keeps every byte up to its
//     last successful Sync, unchanged (for SyncPrefix(n), up to the largest n
//     synced so far). Bytes appended after it are treated by `mode`:
//       kDropUnsynced     all lost: the file is cut at its synced length.
//       kKeepRandomPrefix a seeded-random prefix (possibly none, possibly
//                         all) survives: writeback got part way.
//       kTornGarbage      a random non-empty prefix survives, and within it
//                         a random range of the unsynced bytes reads as zeros
//                         or random bytes: the file's size reached the disk
//                         before its data (delayed allocation), or a write
//                         tore.
//     Reopening an existing file with NewWritableFile truncates it, and the
//     truncation counts as durable at once: the old bytes are gone, synced
//     or not.
//  3. Files this env did not write (present before, or written through the
//     base directly) are left as they are; they count as durable.
// The result is deterministic for a given seed and sequence of operations.
//
// WHY THIS MATCHES ext4 AND xfs. POSIX promises exactly two things here, and
// ext4 (data=ordered) and xfs keep no other promise a program could rely on:
// fsync/fdatasync makes a file's bytes durable, and fsync of a directory makes
// its entries durable. Data not yet synced may be lost, partly written back in
// any order, or read back as zeros when the new size was logged before the
// blocks were written. A new name may be lost until its directory is synced
// (ext4's journal often commits it along with the file's fsync; xfs and btrfs
// differ, and none promises it). rename(2) is atomic: after a crash either the
// old or the new name holds, and the model picks the old one until SyncDir.
//
// WHERE IT IS STRICTER than those file systems: it always loses what is not
// durable yet, where a real machine usually keeps most of it, so a test sees
// the worst case; it ignores ext4's auto_da_alloc (which flushes the data of a
// file renamed over another), so code must Sync before rename; and it makes a
// truncation durable at once, where ext4 may bring the old bytes back.
// Correct code under the model is correct on the file systems.
//
// WHERE IT IS WEAKER (a real crash could do this; the model does not):
//  - A directory whose creation is undone is emptied but not removed (Env has
//    no call to remove a directory); code that tests only its existence is
//    not caught.
//  - Undoing a removal or a rename over an existing file needs that file's
//    bytes, which are read into memory at the time of the call, up to 256 MiB
//    in all at once; past that, the removal or overwrite counts as durable.
//  - A rename across directories is durable once the target's directory is
//    synced, even if the source's is not (a real crash could then keep both
//    names). Entries pending inside a directory that is itself renamed are
//    matched by their old names.
//  - Paths are compared after collapsing "//" and stripping a trailing '/'
//    only: spell each directory the same way in SyncDir as in the file paths.
//  - Files are independent: no ordering between the writeback of two files,
//    and no effect of one file's Sync on another's data.
//
// Thread safety: as for any Env. One mutex serialises the mutating
// operations, including the base env's work for them; reads are not locked.
#ifndef RUNSTORE_ENV_FAULT_INJECTION_ENV_H_
#define RUNSTORE_ENV_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runstore/env.h"

namespace runstore {

// What SimulatePowerLoss does to bytes appended after a file's last Sync.
enum class DropMode {
  kDropUnsynced,
  kKeepRandomPrefix,
  kTornGarbage,
};

class FaultInjectionEnv final : public EnvWrapper {
 public:
  // `base` is not owned and must outlive this env.
  explicit FaultInjectionEnv(Env* base);
  ~FaultInjectionEnv() override;

  FaultInjectionEnv(const FaultInjectionEnv&) = delete;
  FaultInjectionEnv& operator=(const FaultInjectionEnv&) = delete;

  // Mutating operations since construction or the last ResetCounters(),
  // including those that failed.
  uint64_t operation_count() const;

  // Makes the n-th operation from now (1-based) fail with IOError carrying
  // errno `err` (e.g. EIO or ENOSPC); its message contains "injected" and
  // strerror(err). Replaces any earlier FailOperation; n == 0 cancels.
  void FailOperation(uint64_t n, int err);

  // Lets operations 1..n from now succeed; every later one fails with
  // IOError(EIO) "simulated crash" and does nothing, until SimulatePowerLoss
  // or ResetCounters.
  void CrashAfter(uint64_t n);

  // True once an operation has been refused because of CrashAfter.
  bool crashed() const;

  // Rewrites the base env into what a reboot after a power cut would find
  // (the model at the top of this file), then lets the env work again. An
  // error means the base env failed while rewriting; the files are then in
  // an unspecified state.
  Status SimulatePowerLoss(DropMode mode, uint64_t seed);

  // Sets operation_count() to 0, cancels FailOperation and CrashAfter, and
  // clears crashed(); files and durability tracking are untouched. Without a
  // SimulatePowerLoss, a crash followed by this models a killed process:
  // everything the OS accepted survives.
  void ResetCounters();

  // Env: mutating operations (counted).
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;

  // Env: reads (opens for reading, listings, sizes, identities) and the
  // clock pass through to the base, uncounted: EnvWrapper's.

 private:
  class FaultWritableFile;

  // Durability of one file written through this env; shared by its name and
  // its open handles, like an inode.
  struct FileInfo {
    uint64_t size = 0;         // bytes appended since it was created or truncated
    uint64_t synced = 0;       // bytes durable; <= size
    bool sync_failed = false;  // a Sync failed: synced never moves again
  };

  // A file's bytes, kept so that its removal or replacement can be undone.
  struct SavedFile {
    std::string contents;
    std::shared_ptr<FileInfo> info;  // null: all of `contents` is durable
  };

  // A directory change that becomes durable with SyncDir(dir).
  struct PendingChange {
    enum class Kind { kCreateFile, kCreateDir, kRemoveFile, kRename };
    Kind kind;
    std::string dir;
    std::string path;                // the entry created / removed, or the rename target
    std::string from;                // kRename: the old name
    std::optional<SavedFile> saved;  // kRemoveFile: the file; kRename: the old target
  };

  enum class Fate { kRun, kFail, kCrash };

  // Numbers the next operation (`what` on `path`, for the trace) and decides
  // what happens to it.
  Fate CountOperationLocked(const char* what, const std::string& path);
  // The error for an operation whose fate is not kRun.
  Status FateError(Fate fate, const std::string& path, const char* op) const;
  // Reads `path` through the base if it is a file that fits the undo budget.
  std::optional<SavedFile> SaveFileLocked(const std::string& path);
  void ForgetPendingLocked(const PendingChange& change);
  // Re-keys tracked files at or under `from` to `to`.
  void MoveTrackedLocked(const std::string& from, const std::string& to);
  Status UndoLocked(PendingChange& change);
  Status EmptyDirLocked(const std::string& dir);
  Status WriteBaseFileLocked(const std::string& path, const std::string& contents);
  Status DropUnsyncedLocked(const std::string& path, const FileInfo& info, DropMode mode,
                            uint64_t* rng_state);

  mutable std::mutex mu_;
  uint64_t operations_ = 0;   // guarded by mu_
  uint64_t fail_at_ = 0;      // guarded by mu_; 0: none
  int fail_errno_ = 0;        // guarded by mu_
  bool crash_armed_ = false;  // guarded by mu_
  uint64_t crash_after_ = 0;  // guarded by mu_
  bool crashed_ = false;      // guarded by mu_
  uint64_t epoch_ = 0;        // guarded by mu_; bumped by each power loss
  uint64_t saved_bytes_ = 0;  // guarded by mu_; sum of saved contents
  // Files written through this env, by their current (normalised) name.
  std::map<std::string, std::shared_ptr<FileInfo>> files_;  // guarded by mu_
  // Directory changes not yet durable, oldest first.
  std::vector<PendingChange> pending_;  // guarded by mu_
};

}  // namespace runstore

#endif  // RUNSTORE_ENV_FAULT_INJECTION_ENV_H_
