// When a staging writer seals its open segment for shipping
// (docs/design.md#staging), apart from its size target: when a commit has
// waited ship_every_s unshipped, or when a caller waits for one to be
// shipped (Writer::WaitForShipped). The seal is made while the writer is
// idle (no task queued or running) or, if the segment then holds frames not
// yet committed, at the next commit: a seal commits nothing the caller has
// not, and a commit never spans two segments. Shaped as GroupCommit is: the
// writer asks it what to do and tells it what happened.
//
// Not thread-safe: the writer uses it with its mutex held.
#ifndef RUNSTORE_STORE_WRITER_STAGING_ROLL_H_
#define RUNSTORE_STORE_WRITER_STAGING_ROLL_H_

#include <chrono>
#include <optional>

namespace runstore::writer {

class StagingRoll {
 public:
  using Clock = std::chrono::steady_clock;

  // `ship_every_s`: how long a commit may stay unshipped (0: no bound).
  explicit StagingRoll(double ship_every_s) : ship_every_s_(ship_every_s) {}

  // A caller waits for a commit to be shipped: seal for shipping.
  void Request() { requested_ = true; }
  // A caller still waits: a seal put off to the next commit is tried again
  // when idle. True if one was put off.
  bool RetryDeferred() {
    if (!requested_ || !deferred_) return false;
    deferred_ = false;
    return true;
  }
  // Whether a seal for shipping is wanted (a task starting now seals after
  // its commit, if it is one).
  bool requested() const { return requested_; }
  // Whether the idle writer should try the seal now.
  bool IdleRollDue() const { return requested_ && !deferred_; }

  // The idle writer tried: `sealed`, or put off (uncommitted frames, or the
  // next segment's number not claimed yet) to the next commit.
  void AfterIdleRoll(bool sealed) {
    if (sealed) {
      requested_ = false;
    } else {
      deferred_ = true;
    }
  }
  // A task ran that started while a seal for shipping was wanted
  // (`requested()` then): it `sealed`, or as a commit could not (tried again
  // at the next commit).
  void AfterTask(bool sealed, bool was_commit) {
    if (sealed) {
      requested_ = deferred_ = false;
    } else if (was_commit) {
      deferred_ = true;
    }
  }

  // A commit left records in the open segment at `now`: ship_every_s counts
  // from the first such.
  void Committed(Clock::time_point now) {
    if (!unshipped_since_) unshipped_since_ = now;
  }
  // The open segment was sealed: nothing in an open segment waits.
  void Sealed() { unshipped_since_.reset(); }
  // When the oldest unshipped commit will have waited ship_every_s, while no
  // seal is wanted yet; none otherwise.
  std::optional<Clock::time_point> ShipDeadline() const {
    if (ship_every_s_ <= 0 || !unshipped_since_ || requested_) return std::nullopt;
    return *unshipped_since_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(ship_every_s_));
  }
  // At `now`, past that `deadline` (as ShipDeadline gave it before the
  // writer waited), with a commit still unshipped: seal for shipping.
  void Tick(std::optional<Clock::time_point> deadline, Clock::time_point now) {
    if (deadline && now >= *deadline && unshipped_since_) requested_ = true;
  }

 private:
  const double ship_every_s_;
  bool requested_ = false;  // a seal for shipping is wanted
  bool deferred_ = false;   // only the next commit may make it
  std::optional<Clock::time_point> unshipped_since_;
};

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_STAGING_ROLL_H_
