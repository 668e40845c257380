// Unpredictable names: the tokens that make a temporary file, a claim or a
// writer's segment name unique among processes that pick theirs at the same
// moment on the same or on other machines. Not for cryptography, not for
// reproducible sampling.
#ifndef RUNSTORE_UTIL_RANDOM_H_
#define RUNSTORE_UTIL_RANDOM_H_

#include <cstdint>
#include <string>

namespace runstore {

// 64 bits from the kernel's random source (getrandom(2)). Where that is
// unavailable (a kernel before 3.17, a seccomp filter), from /dev/urandom;
// where that fails too, a mix of the clock, the process id, the thread and a
// counter, which still differs between any two calls on one machine. Never
// blocks for long and never fails. Thread-safe.
uint64_t RandomU64();

// RandomU64() as 16 lowercase hexadecimal digits.
std::string RandomHex16();

}  // namespace runstore

#endif  // RUNSTORE_UTIL_RANDOM_H_
