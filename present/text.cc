#include "runstore/text.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace runstore::text {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void AppendInt(std::string* out, T v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;  // 32 bytes hold any 64-bit integer
  out->append(buf, end);
}

template <typename T>
void AppendFloat(std::string* out, T v, OutFormat fmt) {
  if (std::isnan(v)) {
    out->append(fmt == OutFormat::kJson ? "null" : "nan");
    return;
  }
  if (std::isinf(v)) {
    if (fmt == OutFormat::kJson) {
      out->append("null");
    } else {
      out->append(v < 0 ? "-inf" : "inf");
    }
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  (void)ec;
  out->append(buf, end);
}

// Appends the elements of dimension `dim` onwards; returns bytes consumed.
size_t AppendNested(std::string* out, DType dtype, std::span<const int64_t> shape, size_t dim,
                    const char* data, size_t elem, OutFormat fmt) {
  if (dim == shape.size()) {
    AppendElement(out, dtype, data, fmt);
    return elem;
  }
  const char* sep = fmt == OutFormat::kText ? ", " : ",";
  out->push_back('[');
  size_t used = 0;
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i) out->append(sep);
    used += AppendNested(out, dtype, shape, dim + 1, data + used, elem, fmt);
  }
  out->push_back(']');
  return used;
}

}  // namespace

void AppendElement(std::string* out, DType dtype, const char* p, OutFormat fmt) {
  switch (dtype) {
    case DType::kBool:
      out->append(*p != 0 ? "true" : "false");
      return;
    case DType::kInt8:
      AppendInt(out, Load<int8_t>(p));
      return;
    case DType::kInt16:
      AppendInt(out, Load<int16_t>(p));
      return;
    case DType::kInt32:
      AppendInt(out, Load<int32_t>(p));
      return;
    case DType::kInt64:
      AppendInt(out, Load<int64_t>(p));
      return;
    case DType::kUInt8:
      AppendInt(out, Load<uint8_t>(p));
      return;
    case DType::kUInt16:
      AppendInt(out, Load<uint16_t>(p));
      return;
    case DType::kUInt32:
      AppendInt(out, Load<uint32_t>(p));
      return;
    case DType::kUInt64:
      AppendInt(out, Load<uint64_t>(p));
      return;
    case DType::kFloat32:
      AppendFloat(out, Load<float>(p), fmt);
      return;
    case DType::kFloat64:
      AppendFloat(out, Load<double>(p), fmt);
      return;
    case DType::kString:
    case DType::kBytes:
      break;  // not elements; see AppendValue
  }
  out->append("?");
}

void AppendValue(std::string* out, DType dtype, std::span<const int64_t> shape, const char* data,
                 size_t nbytes, OutFormat fmt) {
  if (dtype == DType::kString) {
    const std::string_view s(data, nbytes);
    if (fmt == OutFormat::kCsv) {
      out->append(s);
    } else {
      AppendJsonString(out, s);
    }
    return;
  }
  if (dtype == DType::kBytes) {
    const std::string_view b(data, nbytes);
    if (fmt == OutFormat::kJson) {
      out->push_back('"');
      AppendBase64(out, b);
      out->push_back('"');
    } else {
      if (fmt == OutFormat::kText) out->append("base64:");
      AppendBase64(out, b);
    }
    return;
  }
  const size_t elem = DTypeSize(dtype);
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  if (elem == 0 || n * elem > nbytes) {
    out->append("?");  // cannot happen for values the library hands out
    return;
  }
  AppendNested(out, dtype, shape, 0, data, elem, fmt);
}

void AppendRun(std::string* out, bool is_string, int64_t i, std::string_view s, OutFormat fmt) {
  if (!is_string) {
    AppendInt(out, i);
  } else if (fmt == OutFormat::kJson) {
    AppendJsonString(out, s);
  } else if (fmt == OutFormat::kCsv) {
    AppendCsvCell(out, s);
  } else {
    out->append(s);
  }
}

void AppendCsvCell(std::string* out, std::string_view cell) {
  if (cell.find_first_of(",\"\r\n") == std::string_view::npos) {
    out->append(cell);
    return;
  }
  out->push_back('"');
  for (char c : cell) {
    if (c == '"') out->push_back('"');
    out->push_back(c);
  }
  out->push_back('"');
}

void AppendJsonString(std::string* out, std::string_view s) {
  // Fast path: printable ASCII without quotes or backslashes.
  bool simple = true;
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      simple = false;
      break;
    }
  }
  if (simple) {
    out->push_back('"');
    out->append(s);
    out->push_back('"');
    return;
  }
  out->append(nlohmann::json(std::string(s))
                  .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace));
}

void AppendBase64(std::string* out, std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back(kAlphabet[v & 63]);
  }
  if (n - i == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->append("==");
  } else if (n - i == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back('=');
  }
}

std::string ShapeText(const SeriesInfo& info) {
  if (info.variable_shape) return "variable";
  if (info.shape.empty()) return "scalar";
  std::string s = "[";
  for (size_t i = 0; i < info.shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(info.shape[i]);
  }
  return s + "]";
}

}  // namespace runstore::text
