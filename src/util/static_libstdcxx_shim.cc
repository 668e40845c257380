// Linked into the binaries that carry libstdc++ inside (RUNSTORE_STATIC_CXX_RUNTIME, the
// Python wheel's), and only there: the glibc functions that GCC's libstdc++.a calls and that
// glibc gained after 2.34, defined here so that the binaries bind to these, not to glibc's,
// and run on glibc 2.34 (RHEL 9) and later (README, "Installing without a compiler").
//
// arc4random (glibc 2.36): std::random_device's default source. libstdc++.a's
// copy-on-write string instantiations refer to random_device, and std::runtime_error pulls
// them in, so every binary that throws one links it; runstore itself never draws from
// random_device (util/random.h). Hidden: each binary keeps its own, exports none.
#include <cstdint>

#include "util/random.h"

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  return static_cast<uint32_t>(runstore::RandomU64());
}
