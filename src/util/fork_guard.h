// ForkGuard: whether an object is used in the process that made it
// (docs/design.md#fork).
//
// fork() copies a process's memory but only the thread that called it: a
// writer's background, sync and shipping threads do not exist in the child,
// its mutexes may be held there by threads that are gone, and its open
// segment is a file the parent still writes. So an object made in one
// process must know when it is used in a child of fork().
//
// A pthread_atfork handler counts, in each process, the forks that led to it
// from the process that first made a ForkGuard; a guard keeps the count of
// the process that made it, so asking costs one relaxed atomic load.
// getpid() would be a system call (glibc has cached no pid since 2.25): about
// 240 ns on the project's test machine, five times a small Append. A fork made
// without the atfork handlers (a raw clone system call) is not seen.
//
// Thread safety: constant after construction; any thread may ask.
#ifndef RUNSTORE_UTIL_FORK_GUARD_H_
#define RUNSTORE_UTIL_FORK_GUARD_H_

#include <atomic>
#include <cstdint>

namespace runstore {

class ForkGuard {
 public:
  // Belongs to the calling process.
  ForkGuard();

  // True in a child of fork() (or a descendant of one) of the process that
  // made the guard; false in that process.
  bool InOtherProcess() const { return generation_ != generation.load(std::memory_order_relaxed); }
  // The pid of the process that made the guard.
  int owner_pid() const { return owner_pid_; }

 private:
  // Forks since the first guard, counted in each child by the handler.
  inline static std::atomic<uint64_t> generation{0};
  static void OnForkChild();

  uint64_t generation_;
  int owner_pid_;
};

}  // namespace runstore

#endif  // RUNSTORE_UTIL_FORK_GUARD_H_
