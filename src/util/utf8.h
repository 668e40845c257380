// UTF-8 validation, for names, run ids and string values: written only when
// valid (the writer checks them), and checked again when read from disk.
#ifndef RUNSTORE_UTIL_UTF8_H_
#define RUNSTORE_UTIL_UTF8_H_

#include <string_view>

namespace runstore {

// True if s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace runstore

#endif  // RUNSTORE_UTIL_UTF8_H_
