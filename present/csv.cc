#include "runstore/csv.h"

#include "runstore/text.h"

namespace runstore::text {

bool CsvTextLooksLikeFormula(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && text[i] == kCsvTextPrefix) ++i;
  if (i == text.size()) return false;
  switch (text[i]) {
    case '=':
    case '+':
    case '-':
    case '@':
    case '\t':
    case '\r':
      return true;
    default:
      return false;
  }
}

void AppendCsvTextCell(std::string* out, std::string_view text) {
  if (!CsvTextLooksLikeFormula(text)) {
    AppendCsvCell(out, text);
    return;
  }
  std::string cell;
  cell.reserve(text.size() + 1);
  cell.push_back(kCsvTextPrefix);
  cell.append(text);
  AppendCsvCell(out, cell);
}

void AppendCsvValueCell(std::string* out, DType dtype, std::string_view cell) {
  if (IsVarLength(dtype)) {
    AppendCsvTextCell(out, cell);
  } else {
    AppendCsvCell(out, cell);
  }
}

void AppendCsvRun(std::string* out, bool is_string, int64_t i, std::string_view s) {
  if (is_string) {
    AppendCsvTextCell(out, s);
  } else {
    AppendRun(out, false, i, {}, OutFormat::kCsv);
  }
}

std::string_view CsvTextFromCell(std::string_view cell) {
  // A prefixed cell is the prefix followed by a text that looks like a
  // formula; a text that looks like one was always prefixed, so a cell of
  // this form was never written unprefixed.
  if (!cell.empty() && cell[0] == kCsvTextPrefix && CsvTextLooksLikeFormula(cell.substr(1))) {
    return cell.substr(1);
  }
  return cell;
}

}  // namespace runstore::text
