// A mutex, a scoped lock and a condition variable that Clang's thread-safety
// analysis understands (std::mutex is not annotated in libstdc++), after
// leveldb's port::Mutex; and Role, a capability for state that a thread owns
// by taking a role rather than a lock.
#ifndef RUNSTORE_UTIL_MUTEX_H_
#define RUNSTORE_UTIL_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/thread_annotations.h"

namespace runstore {

class RUNSTORE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() RUNSTORE_ACQUIRE() { mu_.lock(); }
  void Unlock() RUNSTORE_RELEASE() { mu_.unlock(); }
  // Takes the mutex if no thread holds it; true if it did.
  bool TryLock() RUNSTORE_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the calling thread holds the mutex (for code it
  // cannot follow, such as a callback the holder runs).
  void AssertHeld() const RUNSTORE_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class RUNSTORE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) RUNSTORE_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RUNSTORE_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable. Waits take the Mutex the caller holds (the analysis
// checks that it does), release it while they wait, and hold it again when
// they return. Every wait on one CondVar must pass the same Mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) RUNSTORE_REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();
  }
  // False if `deadline` passed (the wait timed out).
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) RUNSTORE_REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lk, deadline) == std::cv_status::no_timeout;
    lk.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A role a thread takes (say, running the writer's tasks, one thread at a
// time), so that the analysis checks that what the role owns is used only by
// whoever holds it. Taking and giving it back cost nothing at run time: who
// holds it is decided elsewhere (under a mutex), and said to the analysis
// here.
class RUNSTORE_CAPABILITY("role") Role {
 public:
  void Take() RUNSTORE_ACQUIRE() {}
  void GiveBack() RUNSTORE_RELEASE() {}
};

}  // namespace runstore

#endif  // RUNSTORE_UTIL_MUTEX_H_
