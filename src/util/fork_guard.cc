#include "util/fork_guard.h"

#include <pthread.h>
#include <unistd.h>

namespace runstore {

void ForkGuard::OnForkChild() { generation.fetch_add(1, std::memory_order_relaxed); }

ForkGuard::ForkGuard() {
  // Registered once, before the first guard records its count: every fork
  // after that is counted.
  [[maybe_unused]] static const int registered = pthread_atfork(nullptr, nullptr, &OnForkChild);
  generation_ = generation.load(std::memory_order_relaxed);
  owner_pid_ = static_cast<int>(getpid());
}

}  // namespace runstore
