#include "runstore/text.h"

#include <charconv>
#include <cmath>
#include <cstring>

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

// The code point that starts at s[*i], and *i moved past it; or -1, and *i
// moved past one byte, where s[*i] does not start a valid UTF-8 sequence (a
// stray continuation byte, a cut sequence, an overlong form, a surrogate,
// beyond U+10FFFF).
int32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *i;
  const size_t left = s.size() - *i;
  const unsigned char c = p[0];
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 1;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3;
    cp = c & 0x07;
  } else {
    *i += 1;
    return -1;
  }
  if (left <= n) {
    *i += 1;
    return -1;
  }
  for (size_t k = 1; k <= n; ++k) {
    if ((p[k] & 0xC0) != 0x80) {
      *i += 1;
      return -1;
    }
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    *i += 1;
    return -1;
  }
  *i += n + 1;
  return static_cast<int32_t>(cp);
}

// How many bytes from s[i] on are printable ASCII (U+0020-U+007E), but for
// the quote and the backslash when `json`: what both escapings copy as it is.
size_t PlainAsciiRun(std::string_view s, size_t i, bool json) {
  size_t j = i;
  for (; j < s.size(); ++j) {
    const auto c = static_cast<unsigned char>(s[j]);
    if (c < 0x20 || c >= 0x7f || (json && (c == '"' || c == '\\'))) break;
  }
  return j - i;
}

// Appends backslash, `letter` and `cp` in `digits` lowercase hex digits.
void AppendHexEscape(std::string* out, char letter, uint32_t cp, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('\\');
  out->push_back(letter);
  for (int k = digits - 1; k >= 0; --k) out->push_back(kHex[(cp >> (4 * k)) & 0xF]);
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
    AppendPrintable(out, s);
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

bool IsUnsafeCodePoint(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 ||
         cp == 0x2029;
}

void AppendPrintable(std::string* out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Printable ASCII, the common case, a run at a time.
    const size_t plain = PlainAsciiRun(s, i, /*json=*/false);
    out->append(s.substr(i, plain));
    i += plain;
    if (i == s.size()) break;
    const size_t start = i;
    const int32_t cp = NextCodePoint(s, &i);
    if (cp >= 0 && !IsUnsafeCodePoint(static_cast<uint32_t>(cp))) {
      out->append(s.substr(start, i - start));
    } else if (cp == '\t') {
      out->append("\\t");
    } else if (cp == '\n') {
      out->append("\\n");
    } else if (cp == '\r') {
      out->append("\\r");
    } else if (cp < 0) {
      AppendHexEscape(out, 'x', static_cast<unsigned char>(s[start]), 2);
    } else if (cp < 0x100) {
      AppendHexEscape(out, 'x', static_cast<uint32_t>(cp), 2);
    } else {
      AppendHexEscape(out, 'u', static_cast<uint32_t>(cp), 4);
    }
  }
}

std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendPrintable(&out, s);
  return out;
}

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const size_t plain = PlainAsciiRun(s, i, /*json=*/true);
    out->append(s.substr(i, plain));
    i += plain;
    if (i == s.size()) break;
    const size_t start = i;
    const int32_t cp = NextCodePoint(s, &i);
    switch (cp) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      default:
        break;
    }
    if (cp < 0) {
      out->append("\\ufffd");
    } else if (IsUnsafeCodePoint(static_cast<uint32_t>(cp))) {
      AppendHexEscape(out, 'u', static_cast<uint32_t>(cp), 4);
    } else {
      out->append(s.substr(start, i - start));
    }
  }
  out->push_back('"');
}

std::string JsonPrintable(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  size_t i = 0;
  while (i < json.size()) {
    const size_t start = i;
    const int32_t cp = NextCodePoint(json, &i);
    if (cp < 0) {
      out.append("\\ufffd");
    } else if (IsUnsafeCodePoint(static_cast<uint32_t>(cp)) && cp != '\n') {
      AppendHexEscape(&out, 'u', static_cast<uint32_t>(cp), 4);
    } else {
      out.append(json.substr(start, i - start));
    }
  }
  return out;
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
