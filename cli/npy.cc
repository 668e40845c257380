#include "npy.h"

#include <bit>
#include <vector>

namespace runstore::cli {
namespace {

constexpr char kByteOrder = std::endian::native == std::endian::little ? '<' : '>';
constexpr size_t kAlign = 64;
constexpr size_t kPreamble = 10;  // magic (6) + version (2) + header length (2)

std::string ShapeTuple(std::span<const int64_t> shape) {
  if (shape.empty()) return "()";
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

std::string NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "|b1";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt16:
      return std::string(1, kByteOrder) + "i2";
    case DType::kInt32:
      return std::string(1, kByteOrder) + "i4";
    case DType::kInt64:
      return std::string(1, kByteOrder) + "i8";
    case DType::kUInt16:
      return std::string(1, kByteOrder) + "u2";
    case DType::kUInt32:
      return std::string(1, kByteOrder) + "u4";
    case DType::kUInt64:
      return std::string(1, kByteOrder) + "u8";
    case DType::kFloat32:
      return std::string(1, kByteOrder) + "f4";
    case DType::kFloat64:
      return std::string(1, kByteOrder) + "f8";
    case DType::kString:
    case DType::kBytes:
      break;
  }
  return "";
}

Result<NpyLayout> PlanNpy(DType dtype, std::span<const int64_t> shape, size_t nbytes) {
  NpyLayout layout;
  std::string descr;
  std::vector<int64_t> npy_shape;
  if (dtype == DType::kString) {
    // A 0-d '|S<n>' array; numpy has no zero-length 'S' items, so an empty
    // string is one NUL byte (numpy strips trailing NULs when reading 'S').
    descr = "|S" + std::to_string(nbytes == 0 ? 1 : nbytes);
    layout.zero_padding = nbytes == 0 ? 1 : 0;
  } else if (dtype == DType::kBytes) {
    descr = "|u1";
    npy_shape.push_back(static_cast<int64_t>(nbytes));
  } else {
    descr = NpyDescr(dtype);
    if (descr.empty()) {
      return Status::InvalidArgument("dtype " + std::string(DTypeName(dtype)) +
                                     " has no .npy equivalent");
    }
    uint64_t n = DTypeSize(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    if (n != nbytes) {
      return Status::InvalidArgument("value holds " + std::to_string(nbytes) +
                                     " bytes but its shape needs " + std::to_string(n));
    }
    npy_shape.assign(shape.begin(), shape.end());
  }
  std::string dict = "{'descr': '" + descr +
                     "', 'fortran_order': False, 'shape': " + ShapeTuple(npy_shape) + ", }";
  // Pad with spaces so that preamble + dict + '\n' is a multiple of 64.
  const size_t unpadded = kPreamble + dict.size() + 1;
  dict.append((kAlign - unpadded % kAlign) % kAlign, ' ');
  dict.push_back('\n');
  if (dict.size() > 0xffff) {
    return Status::InvalidArgument("shape too long for a version 1.0 .npy header");
  }
  const uint16_t len = static_cast<uint16_t>(dict.size());
  layout.header = std::string("\x93NUMPY\x01\x00", 8);
  layout.header.push_back(static_cast<char>(len & 0xff));
  layout.header.push_back(static_cast<char>(len >> 8));
  layout.header += dict;
  return layout;
}

}  // namespace runstore::cli
