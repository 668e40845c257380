// ForkGuard: whether a runstore._core object is used in the process that
// made it (docs/design.md#fork). The core writer has a guard of its own
// (src/util/fork_guard.h), which a front end may not include; this one is
// the same idea for the Python objects: the step tape, whose calls never
// reach the core writer, and the Store, whose locks a thread of the parent
// may have held at the fork.
//
// A pthread_atfork handler counts, in each process, the forks that led to
// it; a guard keeps the count of the process that made it, so asking costs
// one relaxed atomic load where getpid() costs a system call.
#ifndef RUNSTORE_PYTHON_FORK_GUARD_H_
#define RUNSTORE_PYTHON_FORK_GUARD_H_

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace runstore::python {

class ForkGuard {
 public:
  // Belongs to the calling process.
  ForkGuard() {
    [[maybe_unused]] static const int registered = pthread_atfork(
        nullptr, nullptr, [] { generation.fetch_add(1, std::memory_order_relaxed); });
    generation_ = generation.load(std::memory_order_relaxed);
    owner_pid_ = static_cast<int>(getpid());
  }

  // True in a child of fork() (or a descendant of one) of the process that
  // made the guard.
  bool InOtherProcess() const { return generation_ != generation.load(std::memory_order_relaxed); }
  // The pid of the process that made the guard.
  int owner_pid() const { return owner_pid_; }

 private:
  inline static std::atomic<uint64_t> generation{0};
  uint64_t generation_;
  int owner_pid_;
};

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_FORK_GUARD_H_
