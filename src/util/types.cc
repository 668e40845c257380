#include "runstore/types.h"

#include <array>

#include "runstore/env.h"
#include "util/utf8.h"

namespace runstore {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeEntry, 13> kDTypes = {{
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt8, "uint8", 1},
    {DType::kUInt16, "uint16", 2},
    {DType::kUInt32, "uint32", 4},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kString, "string", 0},
    {DType::kBytes, "bytes", 0},
}};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "invalid";
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected bool, int8..int64, uint8..uint64, float32, "
                                 "float64, string or bytes)");
}

bool IsValidDType(uint8_t raw) { return raw >= 1 && raw <= 13; }

size_t DTypeSize(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

std::string RunId::ToString() const {
  return is_int() ? std::to_string(int_value()) : string_value();
}

std::strong_ordering operator<=>(const RunId& a, const RunId& b) {
  if (a.is_int() != b.is_int())
    return a.is_int() ? std::strong_ordering::less : std::strong_ordering::greater;
  if (a.is_int()) return a.int_value() <=> b.int_value();
  int c = a.string_value().compare(b.string_value());
  return c < 0 ? std::strong_ordering::less
               : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

Value::Value(DType dtype, std::vector<int64_t> shape, const char* data, size_t nbytes,
             std::shared_ptr<const MappedRegion> mapping)
    : dtype_(dtype),
      shape_(std::move(shape)),
      data_(data),
      nbytes_(nbytes),
      owner_(mapping),
      mapping_(mapping.get()),
      zero_copy_(true) {}

void Value::ReleasePages() const {
  // A moved-from copy has no owner: the pages are someone else's now.
  if (mapping_ != nullptr && owner_ != nullptr) mapping_->ReleasePages(data_, nbytes_);
}

int64_t Value::size() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kLz4:
      return "lz4";
    case Codec::kZstd:
      return "zstd";
  }
  return "invalid";
}

Result<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "lz4") return Codec::kLz4;
  if (name == "zstd") return Codec::kZstd;
  return Status::InvalidArgument("unknown codec '" + std::string(name) +
                                 "' (expected none, lz4 or zstd)");
}

namespace {

// The first `n` bytes of `s`, or up to 3 fewer so as not to end inside a UTF-8
// character: a message quoting the start of a name stays valid UTF-8 (the
// Python package decodes messages as such).
std::string_view CutBetweenCharacters(std::string_view s, size_t n) {
  if (s.size() <= n) return s;
  auto continuation = [&](size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  for (int k = 0; k < 3 && n > 0 && continuation(n); ++k) --n;
  return s.substr(0, n);
}

}  // namespace

Status ValidateSeriesName(std::string_view name, bool allow_reserved) {
  if (name.empty()) return Status::InvalidArgument("series name is empty");
  if (name.size() > kMaxNameLength) {
    return Status::InvalidArgument("series name of " + std::to_string(name.size()) +
                                   " bytes is longer than the limit of " +
                                   std::to_string(kMaxNameLength) + ": '" +
                                   std::string(CutBetweenCharacters(name, 40)) + "...'");
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("series name contains a NUL byte");
  }
  if (!IsValidUtf8(name)) return Status::InvalidArgument("series name is not valid UTF-8");
  if (name[0] == '~' && !allow_reserved) {
    return Status::InvalidArgument("series name '" + std::string(name) +
                                   "' starts with '~', which is reserved for runstore");
  }
  return Status::OK();
}

Status ValidateRunId(const RunRef& run) {
  if (!run.is_string) return Status::OK();
  if (run.s.size() > kMaxRunIdLength) {
    return Status::InvalidArgument("run id of " + std::to_string(run.s.size()) +
                                   " bytes is longer than the limit of " +
                                   std::to_string(kMaxRunIdLength));
  }
  if (!IsValidUtf8(run.s)) return Status::InvalidArgument("string run id is not valid UTF-8");
  return Status::OK();
}

}  // namespace runstore
