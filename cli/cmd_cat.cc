// `runstore cat`: the records of one series as aligned text, CSV or JSON
// lines, streamed batch by batch from Snapshot::Scan.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "progress.h"
#include "registry.h"
#include "runstore/csv.h"
#include "runstore/text.h"

namespace runstore::cli {
namespace {

// Aligned text output. Rows are held a page at a time to size the columns;
// widths only grow, so a later page may be wider but never misaligns within
// itself, and memory stays bounded whatever the series' length.
class TextTable {
 public:
  explicit TextTable(Output* out) : out_(out) { rows_.push_back({"run", "step", "value"}); }
  void Add(std::string run, std::string step, std::string value) {
    rows_.push_back({std::move(run), std::move(step), std::move(value)});
    if (rows_.size() >= kPage) Flush();
  }
  void Flush() {
    for (const auto& r : rows_) {
      run_w_ = std::max(run_w_, r[0].size());
      step_w_ = std::max(step_w_, r[1].size());
    }
    std::string s;
    for (const auto& r : rows_) {
      s.append(run_w_ - r[0].size(), ' ');
      s += r[0];
      s += "  ";
      s.append(step_w_ - r[1].size(), ' ');
      s += r[1];
      s += "  ";
      s += r[2];
      s += '\n';
    }
    out_->Write(s);
    rows_.clear();
  }

 private:
  static constexpr size_t kPage = 1024;
  Output* out_;
  std::vector<std::array<std::string, 3>> rows_;
  size_t run_w_ = 0, step_w_ = 0;
};

Result<OutFormat> ParseFormat(const std::string& format) {
  if (format == "text") return OutFormat::kText;
  if (format == "csv") return OutFormat::kCsv;
  if (format == "jsonl" || format == "json") return OutFormat::kJson;
  return Status::InvalidArgument("unknown format '" + format + "' (expected text, csv or jsonl)");
}

// The scan of `o`: only the blocks that can hold the run and steps asked
// for are read.
ScanOptions ScanOptionsOf(const CatOptions& o, const std::optional<RunId>& run_filter) {
  ScanOptions scan_options;
  if (run_filter) scan_options.runs = std::vector<RunId>{*run_filter};
  if (o.first_step || o.last_step) {
    scan_options.steps =
        ScanOptions::StepRange{o.first_step.value_or(std::numeric_limits<int64_t>::min()),
                               o.last_step.value_or(std::numeric_limits<int64_t>::max())};
  }
  return scan_options;
}

// A record as a CSV or JSON line (with its newline) appended to `line`. CSV
// is exact, but a terminal (`csv_on_terminal`) is shown the strings of the
// store as text shows them (Printable), never their control characters raw;
// the formula rule holds either way. `value`: scratch.
void AppendLine(const Row& row, DType dtype, OutFormat fmt, bool csv_on_terminal, std::string* line,
                std::string* value) {
  if (fmt == OutFormat::kCsv) {
    text::AppendCsvRun(line, row.run_is_string, row.run_int,
                       csv_on_terminal ? Printable(row.run_str) : row.run_str);
    *line += ',';
    *line += std::to_string(row.step);
    *line += ',';
    value->clear();
    AppendValue(value, dtype, row.shape, row.data, row.nbytes, fmt);
    text::AppendCsvValueCell(line, dtype, csv_on_terminal ? Printable(*value) : *value);
  } else {
    *line += "{\"run\":";
    AppendRun(line, row.run_is_string, row.run_int, row.run_str, fmt);
    *line += ",\"step\":";
    *line += std::to_string(row.step);
    *line += ",\"value\":";
    AppendValue(line, dtype, row.shape, row.data, row.nbytes, fmt);
    *line += '}';
  }
  *line += '\n';
}

}  // namespace

int RunCat(const CatOptions& o) {
  constexpr std::string_view kCmd = "cat";
  const Result<OutFormat> parsed_format = ParseFormat(o.format);
  if (!parsed_format.ok()) return ReportError(kCmd, parsed_format.status());
  const OutFormat fmt = *parsed_format;
  std::optional<RunId> run_filter;
  if (o.run_set) {
    Result<RunId> run = ParseRunArg(o.run, o.run_is_string, "--run");
    if (!run.ok()) return ReportUsageError(kCmd, run.status().message());
    run_filter = std::move(run).value();
  }

  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  auto snap = store->GetSnapshot();
  auto info = snap->GetSeriesInfo(o.name);
  if (!info.ok()) return ReportError(kCmd, info.status());
  auto scanner = snap->Scan(o.name, ScanOptionsOf(o, run_filter));
  if (!scanner.ok()) return ReportError(kCmd, scanner.status());

  Output out;
  // The bar shares the terminal with the records unless stdout goes elsewhere.
  Progress progress("cat", info->count);
  if (isatty(STDOUT_FILENO) == 1) progress.Finish();

  std::optional<TextTable> table;
  if (fmt == OutFormat::kText) table.emplace(&out);
  const bool csv_on_terminal = fmt == OutFormat::kCsv && isatty(STDOUT_FILENO) == 1;
  if (fmt == OutFormat::kCsv) out.Write("run,step,value\n");

  const DType dtype = info->dtype;
  const uint64_t limit = o.limit < 0 ? UINT64_MAX : static_cast<uint64_t>(o.limit);
  uint64_t printed = 0, scanned = 0;
  std::string line, run_s, step_s, value_s;
  ScanBatch batch;
  while (printed < limit) {
    auto more = (*scanner)->Next(&batch);
    if (!more.ok()) {
      progress.Finish();
      if (table) table->Flush();
      (void)out.Close();
      return ReportError(kCmd, more.status());
    }
    if (!*more) break;
    for (size_t i = 0; i < batch.count && printed < limit; ++i) {
      const Row row = GetRow(batch, i);
      ++printed;
      if (fmt == OutFormat::kText) {
        run_s.clear();
        value_s.clear();
        AppendRun(&run_s, row.run_is_string, row.run_int, row.run_str, fmt);
        AppendValue(&value_s, dtype, row.shape, row.data, row.nbytes, fmt);
        table->Add(run_s, std::to_string(row.step), value_s);
        continue;
      }
      line.clear();
      AppendLine(row, dtype, fmt, csv_on_terminal, &line, &value_s);
      out.Write(line);
    }
    scanned += batch.count;
    progress.Update(scanned, out.bytes_written());
    if (!out.status().ok()) break;
  }
  progress.Finish();
  if (table) table->Flush();
  Status s = out.Close();
  if (!s.ok()) return ReportError(kCmd, s);
  if (run_filter && printed == 0 && limit > 0) {
    return ReportError(kCmd, Status::NotFound("series '" + o.name + "' has no records of run " +
                                              run_filter->ToString()));
  }
  return kExitOk;
}

void RegisterCat(CLI::App* cmd, ChosenCommand* chosen) {
  // What the options are parsed into; the CatOptions run are made from it
  // and from which options were given.
  struct Parsed {
    CatOptions o;
    int64_t first_step = 0, last_step = 0;
  };
  auto p = std::make_shared<Parsed>();
  cmd->add_option("STORE", p->o.store, "Store directory")->required();
  cmd->add_option("NAME", p->o.name, "Series name")->required();
  CLI::Option* run_opt = cmd->add_option(
      "--run,-r", p->o.run,
      "Only records of this run: an integer if all of it is one (digits, an optional '-'), a "
      "string if it does not start like a number; a value that starts like one but is not an "
      "integer (1x, 1.5, 0x10, ' 1', beyond int64) is refused: use --run-str for such a run");
  CLI::Option* run_str_opt =
      cmd->add_option("--run-str", p->o.run, "Only records of this run, always taken as a string");
  run_opt->excludes(run_str_opt);
  cmd->add_option("--format,-f", p->o.format, "Output format")
      ->check(CLI::IsMember({"text", "csv", "jsonl"}))
      ->capture_default_str();
  CLI::Option* first_step_opt =
      cmd->add_option("--first-step", p->first_step, "Only records at this step or later")
          ->transform(Integer<int64_t>());
  CLI::Option* last_step_opt =
      cmd->add_option("--last-step", p->last_step, "Only records at this step or earlier")
          ->transform(Integer<int64_t>());
  cmd->add_option("--limit,-n", p->o.limit, "Print at most N records")
      ->transform(Integer<int64_t>(0));
  cmd->footer(Footer(
      "Prints the records of one series with columns run, step, value, in storage order\n"
      "(segment by segment, block by block; not sorted). Formats:\n"
      "  text   aligned columns under a header line (the default)\n"
      "  csv    a header line run,step,value; RFC 4180 quoting: a cell holding a comma, a\n"
      "         quote, CR or LF is put in quotes, with quotes doubled; lines end in \\n\n"
      "  jsonl  one JSON object per line: {\"run\":..,\"step\":..,\"value\":..}\n"
      "Values: arrays are nested lists in C order ([[1, 2], [3, 4]]; compact JSON in csv);\n"
      "floats are printed in the shortest form that reads back exactly; NaN and infinities\n"
      "are nan, inf, -inf in text and csv and null in jsonl; strings are JSON-quoted in text\n"
      "and jsonl and raw in csv; bytes are base64 (RFC 4648, padded), prefixed \"base64:\" in\n"
      "text. String run ids are printed as they are in text and csv (quoted in jsonl).\n"
      "Control characters, bidirectional overrides and line separators of a string are\n"
      "escaped in text (\\x1b, \\u202e) and jsonl (\\u001b), and in csv when it goes to a\n"
      "terminal: a store's strings are never terminal commands.\n"
      "Exit code 3 also when --run matches no record. With --run, --first-step and\n"
      "--last-step only the blocks that can hold the records asked for are read.",
      "  runstore cat /scratch/sweep loss\n"
      "  runstore cat /scratch/sweep loss --run 42 --format jsonl\n"
      "  runstore cat /scratch/rl reward --run 7 --first-step 1000000 --last-step 1000999\n"
      "  runstore cat /scratch/sweep label --run-str 007 -n 10"));
  ChooseOnParse(cmd, "cat", chosen, [p, run_opt, run_str_opt, first_step_opt, last_step_opt] {
    CatOptions o = p->o;
    o.run_set = run_opt->count() > 0 || run_str_opt->count() > 0;
    o.run_is_string = run_str_opt->count() > 0;
    if (first_step_opt->count() > 0) o.first_step = p->first_step;
    if (last_step_opt->count() > 0) o.last_step = p->last_step;
    return RunCat(o);
  });
}

}  // namespace runstore::cli
