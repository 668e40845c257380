// The checks of what a writer is given (docs/design.md#writers): values
// against their dtype, shape and size limits and against their series'
// schema, run ids, writer ids.
#include "store/writer/value_checks.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "format/format.h"
#include "util/random.h"
#include "util/shape.h"
#include "util/utf8.h"

namespace runstore::writer {

Status ValidateRunIds(std::span<const RunRef> runs) {
  const RunRef* last = nullptr;
  for (const RunRef& r : runs) {
    if (!r.is_string) continue;
    if (last == nullptr || r.s.data() != last->s.data() || r.s.size() != last->s.size()) {
      RUNSTORE_RETURN_IF_ERROR(ValidateRunId(r));
    }
    last = &r;
  }
  return Status::OK();
}

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string DefaultWriterId() {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string h;
  for (char c : std::string(host)) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_') h += c;
    if (h.size() >= 24) break;
  }
  if (h.empty()) h = "host";
  return h + "-" + std::to_string(getpid()) + "-" + RandomHex16();
}

Status ValidateWriterId(const std::string& id) {
  if (id.empty() || id.size() > format::kMaxWriterIdLength) {
    return Status::InvalidArgument("writer id must be 1 to 64 characters, got " +
                                   std::to_string(id.size()));
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return Status::InvalidArgument("writer id '" + id +
                                     "' may only contain letters, digits, '.', '_' and '-'");
    }
  }
  return Status::OK();
}

Status CheckValue(std::string_view name, const ValueRef& v) {
  if (!IsValidDType(static_cast<uint8_t>(v.dtype))) {
    return Status::InvalidArgument("series '" + std::string(name) + "': invalid dtype " +
                                   std::to_string(static_cast<int>(v.dtype)));
  }
  if (IsVarLength(v.dtype)) {
    if (!v.shape.empty()) {
      return Status::InvalidArgument(
          "series '" + std::string(name) + "': a " + std::string(DTypeName(v.dtype)) +
          " value is one string (rank 0), got shape " + ShapeString(v.shape));
    }
    if (v.dtype == DType::kString &&
        !IsValidUtf8(std::string_view(static_cast<const char*>(v.data), v.nbytes))) {
      return Status::InvalidArgument("series '" + std::string(name) +
                                     "': a string value must be valid UTF-8 (use the bytes dtype "
                                     "for other bytes)");
    }
    if (v.nbytes > kMaxValueBytes) {
      return Status::InvalidArgument(
          "series '" + std::string(name) + "': a " + std::string(DTypeName(v.dtype)) +
          " value of " + std::to_string(v.nbytes) + " bytes is too large (at most 2^48)");
    }
    return Status::OK();
  }
  if (v.shape.size() > static_cast<size_t>(kMaxRank)) {
    return Status::InvalidArgument("series '" + std::string(name) + "': rank " +
                                   std::to_string(v.shape.size()) + " exceeds the limit of 32");
  }
  for (int64_t d : v.shape) {
    if (d < 0) {
      return Status::InvalidArgument("series '" + std::string(name) +
                                     "': negative dimension in shape " + ShapeString(v.shape));
    }
  }
  uint64_t n = 0;
  if (!ShapeBytes(v.shape, DTypeSize(v.dtype), &n)) {
    return Status::InvalidArgument("series '" + std::string(name) + "': shape " +
                                   ShapeString(v.shape) + " of " + std::string(DTypeName(v.dtype)) +
                                   " is too large: a value holds at most 2^48 bytes, counting "
                                   "every dimension but the zeros");
  }
  if (n != v.nbytes) {
    return Status::InvalidArgument("series '" + std::string(name) + "': shape " +
                                   ShapeString(v.shape) + " of " + std::string(DTypeName(v.dtype)) +
                                   " needs " + std::to_string(n) + " bytes, got " +
                                   std::to_string(v.nbytes));
  }
  return Status::OK();
}

Status CheckValueAgainst(std::string_view name, const SeriesSchema& schema, const ValueRef& v) {
  if (v.dtype != schema.dtype) {
    return Status::InvalidArgument("series '" + std::string(name) + "' has dtype " +
                                   std::string(DTypeName(schema.dtype)) + ", got " +
                                   std::string(DTypeName(v.dtype)));
  }
  if (!schema.variable_shape &&
      !std::equal(v.shape.begin(), v.shape.end(), schema.shape.begin(), schema.shape.end())) {
    return Status::InvalidArgument(
        "series '" + std::string(name) + "' is fixed-shape " + ShapeString(schema.shape) +
        ", got shape " + ShapeString(v.shape) + " (define it with variable_shape to mix shapes)");
  }
  return Status::OK();
}

Status CheckBatchValues(std::string_view what, std::string_view name, size_t n,
                        const ValueRef& values) {
  if (IsVarLength(values.dtype)) {
    return Status::InvalidArgument(std::string(what) + " of '" + std::string(name) +
                                   "': string and bytes values are appended one by one");
  }
  if (values.shape.empty() || static_cast<size_t>(values.shape[0]) != n) {
    return Status::InvalidArgument(std::string(what) + " of '" + std::string(name) +
                                   "': values need a first dimension of " + std::to_string(n) +
                                   ", got shape " + ShapeString(values.shape));
  }
  return CheckValue(name, values);
}

}  // namespace runstore::writer
