// types.h: the value model. A record is (run, name, step) -> value, where a
// value is a typed tensor: a dtype, a shape (rank 0 for scalars) and bytes.
//
// Thread safety: all types here are values or immutable views; RunRef and
// ValueRef borrow memory that the caller keeps alive for the call.
#ifndef RUNSTORE_TYPES_H_
#define RUNSTORE_TYPES_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "runstore/status.h"

namespace runstore {

// Element types. The numeric values are stored on disk (docs/format.md); never
// renumber them.
enum class DType : uint8_t {
  kBool = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kUInt64 = 9,
  kFloat32 = 10,
  kFloat64 = 11,
  kString = 12,  // one UTF-8 string per record (rank 0)
  kBytes = 13,   // one raw byte string per record (rank 0)
};

// "float64", "string", ...; "invalid" for values outside the enum.
std::string_view DTypeName(DType dtype);
// Parses a DTypeName; InvalidArgument for unknown names.
Result<DType> ParseDType(std::string_view name);
bool IsValidDType(uint8_t raw);
// Bytes per element; 0 for kString and kBytes (variable length).
size_t DTypeSize(DType dtype);
inline bool IsVarLength(DType d) { return d == DType::kString || d == DType::kBytes; }

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<bool>() {
  return DType::kBool;
}
template <>
constexpr DType DTypeOf<int8_t>() {
  return DType::kInt8;
}
template <>
constexpr DType DTypeOf<int16_t>() {
  return DType::kInt16;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kUInt8;
}
template <>
constexpr DType DTypeOf<uint16_t>() {
  return DType::kUInt16;
}
template <>
constexpr DType DTypeOf<uint32_t>() {
  return DType::kUInt32;
}
template <>
constexpr DType DTypeOf<uint64_t>() {
  return DType::kUInt64;
}
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kFloat64;
}

// Maximum rank of a value and limits on names and run ids (docs/format.md).
inline constexpr int kMaxRank = 32;
inline constexpr size_t kMaxNameLength = 255;
inline constexpr size_t kMaxRunIdLength = 255;
// The most bytes one value may hold (256 TiB), counting every dimension of
// its shape but the zeros: numpy refuses arrays past it whatever their zero
// dimensions, so a shape like (0, 2^62) is refused too.
inline constexpr uint64_t kMaxValueBytes = uint64_t{1} << 48;

// A run id: an integer or a string. Ordering: every integer sorts before every
// string; integers numerically; strings bytewise.
class RunId {
 public:
  RunId() : v_(int64_t{0}) {}
  RunId(int64_t i) : v_(i) {}                   // NOLINT
  RunId(int i) : v_(int64_t{i}) {}              // NOLINT
  RunId(std::string s) : v_(std::move(s)) {}    // NOLINT
  RunId(const char* s) : v_(std::string(s)) {}  // NOLINT

  bool is_int() const { return v_.index() == 0; }
  bool is_string() const { return v_.index() == 1; }
  int64_t int_value() const { return std::get<0>(v_); }
  const std::string& string_value() const { return std::get<1>(v_); }
  std::string ToString() const;

  friend bool operator==(const RunId&, const RunId&) = default;
  friend std::strong_ordering operator<=>(const RunId& a, const RunId& b);

 private:
  std::variant<int64_t, std::string> v_;
};

// A borrowed run id, cheap to pass on the append path.
struct RunRef {
  RunRef(int64_t i) : is_string(false), i(i) {}            // NOLINT
  RunRef(int i) : is_string(false), i(i) {}                // NOLINT
  RunRef(std::string_view s) : is_string(true), s(s) {}    // NOLINT
  RunRef(const char* s) : is_string(true), s(s) {}         // NOLINT
  RunRef(const std::string& s) : is_string(true), s(s) {}  // NOLINT
  RunRef(const RunId& r)                                   // NOLINT
      : is_string(r.is_string()),
        i(r.is_int() ? r.int_value() : 0),
        s(r.is_string() ? std::string_view(r.string_value()) : std::string_view()) {}
  RunId ToRunId() const { return is_string ? RunId(std::string(s)) : RunId(i); }

  bool is_string;
  int64_t i = 0;
  std::string_view s;
};

// A borrowed value for appending: dtype, shape and C-order bytes. For kString
// and kBytes the shape is empty and `data` holds the string's bytes.
struct ValueRef {
  DType dtype = DType::kFloat64;
  std::span<const int64_t> shape;  // empty for scalars
  const void* data = nullptr;
  size_t nbytes = 0;

  // The value is borrowed, not copied: `v` must outlive the append call. A
  // temporary would not (ValueRef::Scalar(2.0) would point at a dead stack
  // slot), so binding one is a compile error.
  template <typename T>
  requires std::is_arithmetic_v<T>
  static ValueRef Scalar(const T& v) { return ValueRef{DTypeOf<T>(), {}, &v, sizeof(T)}; }
  template <typename T>
  requires std::is_arithmetic_v<T>
  static ValueRef Scalar(const T&& v) = delete;
  template <typename T>
  static ValueRef Array(const T* data, std::span<const int64_t> shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return ValueRef{DTypeOf<T>(), shape, data, n * sizeof(T)};
  }
  static ValueRef String(std::string_view s) {
    return ValueRef{DType::kString, {}, s.data(), s.size()};
  }
  static ValueRef Bytes(std::string_view b) {
    return ValueRef{DType::kBytes, {}, b.data(), b.size()};
  }
};

class MappedRegion;  // runstore/env.h

// A value read back. Either a view into a mapped segment (zero-copy; `owner`
// keeps the mapping alive) or owned bytes (after decompression). Both stay
// valid for as long as any copy of this Value lives.
class Value {
 public:
  Value() = default;
  // Owned bytes (`zero_copy` false), or a view kept alive by `owner`.
  Value(DType dtype, std::vector<int64_t> shape, const char* data, size_t nbytes,
        std::shared_ptr<const void> owner, bool zero_copy)
      : dtype_(dtype),
        shape_(std::move(shape)),
        data_(data),
        nbytes_(nbytes),
        owner_(std::move(owner)),
        zero_copy_(zero_copy) {}
  // A zero-copy view of bytes inside `mapping`.
  Value(DType dtype, std::vector<int64_t> shape, const char* data, size_t nbytes,
        std::shared_ptr<const MappedRegion> mapping);

  // Drops the pages that lie wholly inside this value's bytes from the
  // process's resident memory, if it is a view of a mapping; a no-op
  // otherwise. The bytes stay valid: touched again, they are read back from
  // the page cache. For a reader done with a large array it will not touch
  // soon, so that resident memory follows the arrays in use, not every array
  // ever read.
  void ReleasePages() const;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const char* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // Number of elements (1 for scalars and strings).
  int64_t size() const;
  // True if data() points into a mapped segment file.
  bool zero_copy() const { return zero_copy_; }
  // Keeps the bytes alive; hand it to whoever needs data() to outlive this.
  const std::shared_ptr<const void>& owner() const { return owner_; }

  template <typename T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data_), nbytes_ / sizeof(T)};
  }
  template <typename T>
  T scalar() const {
    return *reinterpret_cast<const T*>(data_);
  }
  std::string_view str() const { return {data_, nbytes_}; }

 private:
  DType dtype_ = DType::kFloat64;
  std::vector<int64_t> shape_;
  const char* data_ = nullptr;
  size_t nbytes_ = 0;
  std::shared_ptr<const void> owner_;
  const MappedRegion* mapping_ = nullptr;  // kept alive by owner_
  bool zero_copy_ = false;
};

// Per-series compression. The numeric values are stored on disk.
enum class Codec : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };
std::string_view CodecName(Codec codec);
Result<Codec> ParseCodec(std::string_view name);

// Checks a series name: 1..kMaxNameLength bytes of valid UTF-8 without NUL.
// Names starting with '~' are reserved for runstore (resume markers,
// experiment metadata); `allow_reserved` lets runstore's own layers use them.
Status ValidateSeriesName(std::string_view name, bool allow_reserved = false);
Status ValidateRunId(const RunRef& run);

}  // namespace runstore

#endif  // RUNSTORE_TYPES_H_
