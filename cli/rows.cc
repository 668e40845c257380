#include <cstdio>

#include "commands.h"

namespace runstore::cli {

Row GetRow(const ScanBatch& batch, size_t i) {
  Row r;
  r.run_is_string = !batch.run_is_string.empty() && batch.run_is_string[i] != 0;
  if (r.run_is_string) {
    r.run_str = batch.string_runs[i];
  } else {
    r.run_int = batch.int_runs[i];
  }
  r.step = batch.steps[i];
  if (!batch.records.empty()) {
    const Value& v = batch.records[i];
    r.shape = v.shape();
    r.data = v.data();
    r.nbytes = v.nbytes();
  } else {
    // values has shape [count, *record_shape]; record i is the i-th slice.
    const auto& shape = batch.values.shape();
    r.shape = std::span<const int64_t>(shape).subspan(shape.empty() ? 0 : 1);
    r.nbytes = batch.count == 0 ? 0 : batch.values.nbytes() / batch.count;
    r.data = batch.values.data() + i * r.nbytes;
  }
  return r;
}

std::string SafeFileName(std::string_view name) {
  constexpr size_t kMaxEscaped = 200;
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || (c == '.' && i > 0);
    if (keep) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  if (out.size() <= kMaxEscaped) return out;
  // Too long for many file systems (255-byte names): cut on an escape
  // boundary and add a hash of the whole name. '~' never appears in an
  // escaped name, so a cut name cannot equal an uncut one.
  size_t cut = kMaxEscaped - 17;
  if (out[cut - 1] == '%')
    cut -= 1;
  else if (out[cut - 2] == '%')
    cut -= 2;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[18];
  std::snprintf(hex, sizeof(hex), "~%016llx", static_cast<unsigned long long>(h));
  return out.substr(0, cut) + hex;
}

}  // namespace runstore::cli
