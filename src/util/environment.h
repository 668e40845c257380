// Settings read from the process's environment, for any front end: parsed
// strictly, so that a mistyped value is reported rather than ignored.
#ifndef RUNSTORE_UTIL_ENVIRONMENT_H_
#define RUNSTORE_UTIL_ENVIRONMENT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "runstore/status.h"

namespace runstore {

// The whole number in the environment variable `name`, or nullopt when it is
// unset. InvalidArgument naming the variable, its text and `what` when it is
// not a whole number from `min` to `max`.
Result<std::optional<uint64_t>> WholeNumberFromEnvironment(const char* name, uint64_t min,
                                                           uint64_t max, std::string_view what);

}  // namespace runstore

#endif  // RUNSTORE_UTIL_ENVIRONMENT_H_
