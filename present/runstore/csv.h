// csv.h: text cells of a CSV file that a spreadsheet opens as text, never as a
// formula (CWE-1236, "CSV injection").
//
// Excel, LibreOffice and Google Sheets evaluate a cell that begins with '=',
// '+', '-' or '@' (and, in some versions, a tab or a carriage return followed
// by one) as a formula, which can run commands (DDE) or send data away
// (HYPERLINK, WEBSERVICE). A string from a store is data: every CSV that
// runstore writes (`runstore export csv`, `runstore cat --format csv`, the
// tarball of Store.export_tar) prefixes such a text cell with a single quote,
// as OWASP recommends, which spreadsheets show as text.
//
// Which cells: text only, i.e. string values, string run ids and base64 of
// bytes values (base64 may begin with '+'). Numbers (-1.5, -inf) are numbers
// in a spreadsheet and are written as they are, so that they stay numbers.
//
// The rule is reversible, so that an importer reads back exactly what was
// stored: a text is prefixed when, after any single quotes it begins with,
// it begins with one of = + - @ TAB CR. So "=1+1" is written "'=1+1", and
// "'=1+1" (a text that already looks prefixed) "''=1+1"; "'quoted" is left
// as it is. Reading back: remove one leading quote from a cell that, after
// its leading quotes, begins with one of those characters
// (CsvTextFromCell; Python: runstore._tar.text_from_cell).
//
// Thread safety: stateless functions.
#ifndef RUNSTORE_CSV_H_
#define RUNSTORE_CSV_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "runstore/types.h"

namespace runstore::text {

// The character a text cell is prefixed with.
inline constexpr char kCsvTextPrefix = '\'';

// Whether `text` would be taken for a formula: after any leading single
// quotes it begins with '=', '+', '-', '@', a tab or a carriage return.
bool CsvTextLooksLikeFormula(std::string_view text);

// Appends `text` as a text cell: prefixed with a single quote when
// CsvTextLooksLikeFormula, then quoted per RFC 4180 when it holds ',', '"',
// CR or LF (text::AppendCsvCell).
void AppendCsvTextCell(std::string* out, std::string_view text);

// Appends the CSV cell of a value whose text AppendValue(..., kCsv) made:
// a text cell for string and bytes values (AppendCsvTextCell), the numbers
// as they are for every other dtype (quoted when an array's text holds a
// comma).
void AppendCsvValueCell(std::string* out, DType dtype, std::string_view cell);

// Appends a run id as a CSV cell: digits for an integer (a number), a text
// cell (AppendCsvTextCell) for a string.
void AppendCsvRun(std::string* out, bool is_string, int64_t i, std::string_view s);

// The text a cell written by AppendCsvTextCell holds (after RFC 4180
// unquoting): `cell` without its prefix.
std::string_view CsvTextFromCell(std::string_view cell);

}  // namespace runstore::text

#endif  // RUNSTORE_CSV_H_
