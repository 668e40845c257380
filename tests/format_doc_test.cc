// docs/format.md against the code: the versions it states are the ones this
// build writes, and its worked example is the file a writer writes for it,
// byte offset for byte offset. The format document is the contract with
// every reader outside this repository, so it must not drift from the code.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/format.h"
#include "runstore/store.h"
#include "runstore/writer.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

namespace fs = std::filesystem;

std::string FormatDoc() {
  const fs::path path = fs::path(RUNSTORE_SOURCE_DIR) / "docs" / "format.md";
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << "cannot read " << path;
  return text.str();
}

// The decimal number that follows the first `prefix` in `text` (the
// number at the very start when `at_start`); -1 when there is none. (Plain
// searching: libstdc++'s std::regex draws false warnings from GCC's
// optimiser in the sanitizer builds.)
long Number(const std::string& text, const std::string& prefix, bool at_start = false) {
  const size_t at =
      at_start ? (text.starts_with(prefix) ? 0 : std::string::npos) : text.find(prefix);
  if (at == std::string::npos) return -1;
  size_t i = at + prefix.size();
  long n = -1;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    n = (n < 0 ? 0 : n * 10) + (text[i] - '0');
  }
  return n;
}

// The rows "| offset | bytes | what |" of a table, as (offset, bytes, what):
// a size may be written "56 + 8".
struct Row {
  long offset, size;
  std::string what;
};
std::vector<Row> OffsetRows(const std::string& text) {
  std::vector<Row> rows;
  size_t line = 0;
  while (line < text.size()) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos) end = text.size();
    const std::string l = text.substr(line, end - line);
    line = end + 1;
    const long offset = Number(l, "| ", true);
    if (offset < 0) continue;
    const size_t cell = l.find(" | ") + 3;
    long size = Number(l.substr(cell), "", true);
    if (size < 0) continue;
    const std::string rest = l.substr(cell);
    if (const size_t plus = rest.find(" + ");
        plus != std::string::npos && plus < rest.find(" | ")) {
      size += Number(rest.substr(plus + 3), "", true);
    }
    rows.push_back(Row{offset, size, rest.substr(rest.find(" | ") + 3)});
  }
  return rows;
}

// The part of `text` from the heading `heading` to the next heading of its
// level or above.
std::string Section(const std::string& text, const std::string& heading) {
  const size_t at = text.find("\n" + heading + "\n");
  if (at == std::string::npos) return "";
  const size_t level = heading.find(' ');
  size_t end = at + heading.size() + 2;
  while ((end = text.find("\n#", end)) != std::string::npos) {
    const size_t hashes = text.find_first_not_of('#', end + 1) - end - 1;
    if (hashes <= level) break;
    ++end;
  }
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(FormatDocTest, TheVersionsItStatesAreTheOnesThisBuildWrites) {
  const std::string doc = FormatDoc();
  EXPECT_EQ(Number(doc, "# runstore on-disk format, version ", true), long(kFormatVersion));
  EXPECT_EQ(Number(doc, "\nformat_version "), long(kFormatVersion)) << "the marker's example";
  EXPECT_EQ(Number(doc, "(this build: "), long(kFormatVersion));
  EXPECT_EQ(Number(doc, "segments written into it later are version "),
            long(format::kSegmentFormatVersion));
  const std::string header = Section(doc, "### Segment header (128 bytes at offset 0)");
  ASSERT_FALSE(header.empty());
  EXPECT_EQ(Number(header, "| 8 | 4 | format_version (u32) | "),
            long(format::kSegmentFormatVersion))
      << "the segment header's format_version row";
  const std::string versioning = Section(doc, "## Versioning");
  EXPECT_NE(versioning.find("Version " + std::to_string(format::kSegmentFormatVersion) + " "),
            std::string::npos)
      << "## Versioning says nothing of version " << format::kSegmentFormatVersion;
}

// The worked example's writer, run: its table of offsets tiles the file it
// writes, the file has the size the document gives, and the value and the
// versions sit where the document says.
TEST(FormatDocTest, TheWorkedExampleIsTheFileAWriterWritesForIt) {
  const std::string example = Section(FormatDoc(), "## Worked example");
  ASSERT_FALSE(example.empty());
  testing::TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/s", {}));
    WriterOptions options;
    options.writer_id = "demo";
    ASSERT_OK_AND_ASSIGN(auto writer, store->NewWriter(options));
    ASSERT_OK(writer->Append(7, "loss", 0, 0.5));
    ASSERT_OK(writer->Commit());
    ASSERT_OK(writer->Close());
  }
  const long named = Number(example, "`segments/demo-");
  ASSERT_EQ(named, 1);
  const std::string path = dir.path() + "/s/segments/demo-00000001.rss";
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(file.empty()) << path;

  // | offset | bytes | what | rows, in order, without a gap or an overlap.
  long end = 0;
  int rows = 0;
  for (const Row& row : OffsetRows(example)) {
    EXPECT_EQ(row.offset, end) << "the row at offset " << row.offset << " (" << row.what
                               << ") does not start where the one before it ends";
    end = row.offset + row.size;
    ++rows;
  }
  EXPECT_GE(rows, 10);
  EXPECT_EQ(end, long(file.size())) << "the table's rows end at " << end;
  EXPECT_EQ(Number(example, "File size: "), long(file.size()));

  const long value_at = Number(example, "The value 0.5 sits at offset ");
  ASSERT_GE(value_at, 0);
  ASSERT_LE(value_at + 8, long(file.size()));
  double value;
  std::memcpy(&value, file.data() + value_at, 8);
  EXPECT_EQ(value, 0.5);

  uint32_t header_version, trailer_version;
  std::memcpy(&header_version, file.data() + 8, 4);
  std::memcpy(&trailer_version, file.data() + file.size() - 32 + 8, 4);
  EXPECT_EQ(header_version, format::kSegmentFormatVersion);
  EXPECT_EQ(trailer_version, format::kSegmentFormatVersion);
  EXPECT_EQ(Number(example, "segment header: magic, version "), long(header_version));
  EXPECT_EQ(Number(example.substr(example.find("trailer: footer_offset ")), ", version "),
            long(trailer_version));
  const long footer_at = Number(example, "trailer: footer_offset ");
  uint64_t footer_offset;
  std::memcpy(&footer_offset, file.data() + file.size() - 32, 8);
  EXPECT_EQ(footer_at, long(footer_offset));
}

}  // namespace
}  // namespace runstore
