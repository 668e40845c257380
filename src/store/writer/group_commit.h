// Group commit (docs/design.md#writer-threads): which commit waits for an
// fdatasync, whether one runs, and the newest commit known durable.
//
// A commit's record is written by the thread that owns the open segment,
// which then goes on with the next blocks; a sync of the segment's prefix up
// to the record makes it durable, on the writer's sync thread or on a caller
// waiting for it. Commits written while a sync runs wait for the next one,
// which covers them all. A seal syncs everything itself: no sync may start
// while one is under way, and the syncs it covers are moot.
//
// Not thread-safe: the writer uses it with its mutex held. The sync itself
// (SegmentWriter::SyncPrefix) runs without it, between Start and Finish.
#ifndef RUNSTORE_STORE_WRITER_GROUP_COMMIT_H_
#define RUNSTORE_STORE_WRITER_GROUP_COMMIT_H_

#include <algorithm>
#include <cstdint>

#include "format/segment_writer.h"

namespace runstore::writer {

class GroupCommit {
 public:
  // One sync: the first `length` bytes of `segment`, covering every commit up
  // to `ticket`.
  struct Sync {
    uint64_t ticket = 0;
    uint64_t length = 0;
    format::SegmentWriter* segment = nullptr;
  };

  // Commit `ticket`'s record ends at `length` of `segment`; a sync of that
  // prefix makes it and every commit before it durable. Supersedes a wanted
  // sync that has not started.
  void Want(uint64_t ticket, uint64_t length, format::SegmentWriter* segment) {
    wanted_ = Sync{ticket, length, segment};
  }
  // Commit `ticket` needs no sync (nothing before it is unsynced).
  void MarkDurable(uint64_t ticket) { durable_ = std::max(durable_, ticket); }

  // Whether a sync is wanted that may start now.
  bool Pending() const { return wanted_.ticket > taken_ && !running_ && !sealing_; }
  bool running() const { return running_; }
  // Starts the wanted sync (Pending() must hold); run it, then Finish it.
  Sync Start() {
    taken_ = wanted_.ticket;
    running_ = true;
    return wanted_;
  }
  // The sync started by Start returned; when `ok`, its commits are durable.
  // A failed sync makes nothing durable, then or later: the writer stops.
  void Finish(const Sync& sync, bool ok) {
    running_ = false;
    if (ok) durable_ = std::max(durable_, sync.ticket);
  }

  // A seal begins: no sync starts until it ends (the seal waits for one that
  // is running, and syncs everything itself).
  void BeginSeal() { sealing_ = true; }
  // The seal ended; when `ok`, every commit up to `last_commit` is durable,
  // and the syncs wanted for the sealed segment are moot.
  void EndSeal(bool ok, uint64_t last_commit) {
    sealing_ = false;
    taken_ = wanted_.ticket;
    if (ok) durable_ = std::max(durable_, last_commit);
  }

  // Every commit up to this ticket is durable (0: none yet).
  uint64_t durable() const { return durable_; }

 private:
  Sync wanted_;           // the newest commit written that waits for a sync
  uint64_t taken_ = 0;    // the ticket the last sync started on
  bool running_ = false;  // a sync runs (no other may start)
  bool sealing_ = false;  // a seal is under way (no sync may start)
  uint64_t durable_ = 0;
};

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_GROUP_COMMIT_H_
