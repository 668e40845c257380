// text.h: runs and values as text, CSV and JSON, the way the runstore
// command-line tool and the Python package's exports write them, so that every
// export of a store reads the same.
//
// Choices (also in cli/README.md and docs/experiments.md):
//  - Numbers: integers exactly; floats in the shortest form that reads back to
//    the same float32/float64 ("0.1", "1e+300"). NaN and infinities are "nan",
//    "inf", "-inf" in text and CSV (pandas reads these) and null in JSON
//    (which has no NaN).
//  - bool: true / false.
//  - Arrays: nested lists in C order, "[[1, 2], [3, 4]]" in text and compact
//    "[[1,2],[3,4]]" (valid JSON) in CSV cells and JSON.
//  - string: JSON-quoted and escaped in text and JSON; the raw UTF-8 in CSV,
//    quoted per RFC 4180 when it holds a comma, quote, CR or LF.
//  - bytes: standard base64 (RFC 4648, with padding) in CSV and JSON; in text
//    prefixed "base64:" so that it cannot be mistaken for a string.
//
// Thread safety: stateless functions.
#ifndef RUNSTORE_TEXT_H_
#define RUNSTORE_TEXT_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runstore/reader.h"
#include "runstore/types.h"

namespace runstore::text {

enum class OutFormat { kText, kCsv, kJson };

// Appends one element of a numeric dtype read from `p` (any alignment).
void AppendElement(std::string* out, DType dtype, const char* p, OutFormat fmt);

// Appends one record's value: `data` holds `nbytes` bytes of a value of
// `dtype` and `shape`. For kCsv this is the cell's text before CSV quoting.
void AppendValue(std::string* out, DType dtype, std::span<const int64_t> shape, const char* data,
                 size_t nbytes, OutFormat fmt);

// Appends a run id: digits for integers; for strings the raw text (kText),
// the RFC 4180 cell (kCsv) or a JSON string (kJson).
void AppendRun(std::string* out, bool is_string, int64_t i, std::string_view s, OutFormat fmt);

// Appends `cell`, quoted per RFC 4180 when it holds ',', '"', CR or LF.
void AppendCsvCell(std::string* out, std::string_view cell);

// Appends `s` as a JSON string; invalid UTF-8 becomes U+FFFD.
void AppendJsonString(std::string* out, std::string_view s);

// Standard base64 with padding.
void AppendBase64(std::string* out, std::string_view bytes);

// "scalar", "[3, 4]" or "variable" (string and bytes series are "scalar").
std::string ShapeText(const SeriesInfo& info);

}  // namespace runstore::text

#endif  // RUNSTORE_TEXT_H_
