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
//  - Strings from a store (names, run ids, values, messages) are data, never
//    terminal commands: in text the characters a terminal acts on, or that
//    reorder or break the text around them, are shown escaped (Printable); in
//    JSON they are \u escapes (AppendJsonString, JsonPrintable). The Python
//    package applies the same rule (python/runstore/_printable.py).
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

// Appends a run id: digits for integers; for strings the text as Printable
// shows it (kText), the RFC 4180 cell of the raw text (kCsv) or a JSON string
// (kJson).
void AppendRun(std::string* out, bool is_string, int64_t i, std::string_view s, OutFormat fmt);

// Appends `cell`, quoted per RFC 4180 when it holds ',', '"', CR or LF.
void AppendCsvCell(std::string* out, std::string_view cell);

// The characters of a string from a store that text output never writes raw:
// the C0 controls U+0000-U+001F, DEL and the C1 controls U+007F-U+009F, the
// bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E,
// U+200F, U+202A-U+202E, U+2066-U+2069), and the line and paragraph separators
// U+2028 and U+2029. A terminal runs ESC and CSI sequences (a clipboard write,
// a window title, a cleared screen), CR and backspace overwrite what was
// shown, and the others make text read in another order or on other lines.
bool IsUnsafeCodePoint(uint32_t cp);

// Appends `s` for text output: each unsafe code point escaped as Python's
// repr writes it (\t, \n, \r; \xHH below U+0100, e.g. ESC as \x1b; \uHHHH
// above, e.g. \u202e), and each byte that is not part of valid UTF-8 as \xHH.
// Everything else, backslashes included, is appended as it is.
void AppendPrintable(std::string* out, std::string_view s);

// `s` as AppendPrintable appends it.
std::string Printable(std::string_view s);

// Appends `s` as a JSON string: quote, backslash and the unsafe code points
// escaped (\b \t \n \f \r or \uHHHH), every other character as its UTF-8;
// each byte that is not part of valid UTF-8 becomes U+FFFD (\ufffd).
void AppendJsonString(std::string* out, std::string_view s);

// A JSON text whose strings hold raw UTF-8 (nlohmann::json::dump without
// ensure_ascii) with every unsafe code point left in it written as \uHHHH and
// each byte that is not part of valid UTF-8 as \ufffd: the same JSON value,
// safe on a terminal. (Outside strings a JSON text is printable ASCII.)
std::string JsonPrintable(std::string_view json);

// Standard base64 with padding.
void AppendBase64(std::string* out, std::string_view bytes);

// "scalar", "[3, 4]" or "variable" (string and bytes series are "scalar").
std::string ShapeText(const SeriesInfo& info);

}  // namespace runstore::text

#endif  // RUNSTORE_TEXT_H_
