#include "util/environment.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

namespace runstore {

Result<std::optional<uint64_t>> WholeNumberFromEnvironment(const char* name, uint64_t min,
                                                           uint64_t max, std::string_view what) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<uint64_t>();
  uint64_t n = 0;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, n);
  if (ec != std::errc() || ptr != end || n < min || n > max) {
    return Status::InvalidArgument(std::string(name) + "='" + text +
                                   "' is not a whole number from " + std::to_string(min) + " to " +
                                   std::to_string(max) + " (" + std::string(what) + ")");
  }
  return std::optional<uint64_t>(n);
}

}  // namespace runstore
