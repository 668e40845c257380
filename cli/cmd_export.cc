// `runstore export`: `export csv` writes one CSV file per series, streamed
// batch by batch from Snapshot::Scan so that memory stays bounded by one block
// plus the output buffer, whatever the size of the series. `export tar`,
// `export parquet` and `export zarr` are done by the Python package's runstore
// command (cli/commands.tsv; python_commands.cc lists them here).
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
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

using nlohmann::ordered_json;

// What manifest.json says of text cells (runstore/csv.h).
constexpr std::string_view kTextCellsNote =
    "a text cell (string value, string run id, base64 of bytes) that would begin with = + - @ "
    "TAB or CR after its leading single quotes is written with one more single quote first, "
    "so that spreadsheets show it as text; remove that one quote to read the text";

// Column names of the value: "value", or one per element in C order
// ("value_0", "value_1_2", ...) when the shape is fixed and small.
std::vector<std::string> ValueColumns(const SeriesInfo& info, int max_columns) {
  if (info.variable_shape || IsVarLength(info.dtype) || info.shape.empty()) return {"value"};
  // Elements per record, stopping past max_columns: a shape read from a block
  // header must not overflow the count.
  int64_t n = 1;
  for (int64_t d : info.shape) {
    if (d < 1 || d > max_columns || (n *= d) > max_columns) return {"value"};
  }
  std::vector<std::string> cols;
  std::vector<int64_t> idx(info.shape.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    std::string c = "value";
    for (int64_t i : idx) c += "_" + std::to_string(i);
    cols.push_back(std::move(c));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < info.shape[d]) break;
      idx[d] = 0;
    }
  }
  return cols;
}

// Whether Windows keeps `stem` (a name up to its first '.') for a device:
// CON, PRN, AUX, NUL, COM1-9, LPT1-9, case ignored ("nul.txt" too).
bool IsWindowsDeviceName(std::string_view name) {
  std::string stem(name.substr(0, name.find('.')));
  for (char& c : stem) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (stem == "CON" || stem == "PRN" || stem == "AUX" || stem == "NUL") return true;
  return stem.size() == 4 && (stem.starts_with("COM") || stem.starts_with("LPT")) &&
         stem[3] >= '1' && stem[3] <= '9';
}

// The file a series is written to: SafeFileName plus ".csv", with the first
// character of a Windows device name escaped ("CON" -> "%43ON.csv": the
// escape stays injective, every '%' of a name being escaped), and '~' and a
// hash of the series name added when it equals a file named before once case
// is ignored ("Loss" after "loss"), so that no two series share a file on a
// case-insensitive file system (macOS, Windows). `used` holds the names so
// far, lower-cased.
std::string SeriesFileName(const std::string& series, std::set<std::string>* used) {
  std::string base = SafeFileName(series);
  if (IsWindowsDeviceName(base)) {
    char esc[4];
    std::snprintf(esc, sizeof(esc), "%%%02X", static_cast<unsigned char>(base[0]));
    base = esc + base.substr(1);
  }
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  if (used->count(lower(base + ".csv")) != 0) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a, as SafeFileName's cut names
    for (unsigned char c : series) {
      h ^= c;
      h *= 1099511628211ull;
    }
    char hex[18];
    std::snprintf(hex, sizeof(hex), "~%016llx", static_cast<unsigned long long>(h));
    base += hex;
  }
  std::string file = base + ".csv";
  used->insert(lower(file));
  return file;
}

}  // namespace

namespace {

// The series to export: those named (each must exist before anything is
// written), or every one.
Result<std::vector<SeriesInfo>> SeriesToExport(const Snapshot& snap, const ExportCsvOptions& o) {
  if (o.names.empty()) return snap.ListSeries(o.all);
  std::vector<SeriesInfo> series;
  std::set<std::string> seen;
  for (const std::string& name : o.names) {
    if (!seen.insert(name).second) continue;
    RUNSTORE_ASSIGN_OR_RETURN(SeriesInfo info, snap.GetSeriesInfo(name));
    series.push_back(std::move(info));
  }
  return series;
}

// The CSV of series `info` into `out`: a header, then a row per record (run,
// step, and the value in one cell or one cell per element of `cols`).
// `rows_done` is told the rows written after each batch. The rows written.
Result<uint64_t> WriteSeriesCsv(const Snapshot& snap, const SeriesInfo& info,
                                const std::vector<std::string>& cols, Output* out,
                                const std::function<void(uint64_t)>& rows_done) {
  const bool split = cols.size() > 1 || cols[0] != "value";
  std::string line = "run,step", cell;
  for (const std::string& c : cols) line += "," + c;
  line += '\n';
  out->Write(line);
  RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap.Scan(info.name));
  ScanBatch batch;
  uint64_t rows = 0;
  while (true) {
    RUNSTORE_ASSIGN_OR_RETURN(const bool more, scanner->Next(&batch));
    if (!more) break;
    for (size_t i = 0; i < batch.count; ++i) {
      const Row row = GetRow(batch, i);
      line.clear();
      text::AppendCsvRun(&line, row.run_is_string, row.run_int, row.run_str);
      line += ',';
      line += std::to_string(row.step);
      if (split) {
        const size_t elem = DTypeSize(info.dtype);
        if (row.nbytes != cols.size() * elem) {
          return Status::Corruption("a record of " + std::to_string(row.nbytes) +
                                    " bytes in a series of " + std::to_string(cols.size()) +
                                    " elements per record");
        }
        for (size_t e = 0; e < cols.size(); ++e) {
          line += ',';
          AppendElement(&line, info.dtype, row.data + e * elem, OutFormat::kCsv);
        }
      } else {
        line += ',';
        cell.clear();
        AppendValue(&cell, info.dtype, row.shape, row.data, row.nbytes, OutFormat::kCsv);
        text::AppendCsvValueCell(&line, info.dtype, cell);
      }
      line += '\n';
      out->Write(line);
    }
    rows += batch.count;
    rows_done(rows);
    if (!out->status().ok()) break;
  }
  return rows;
}

// manifest.json, which maps file names back to series names (and cannot
// collide with a series' file: those all end in .csv), written whole or not
// at all.
Status WriteManifest(const std::string& outdir, const std::string& suffix,
                     const std::string& store_path, const ordered_json& manifest) {
  const std::string mpath = (std::filesystem::path(outdir) / "manifest.json").string();
  RUNSTORE_ASSIGN_OR_RETURN(auto m, Output::Create(mpath + suffix, mpath));
  m->Write(ordered_json{{"store", store_path}, {"text_cells", kTextCellsNote}, {"series", manifest}}
               .dump(2, ' ', false, ordered_json::error_handler_t::replace) +
           "\n");
  Status s = m->Close();
  if (s.ok()) s = PlaceFile(mpath + suffix, mpath, /*replace=*/true);
  if (!s.ok()) std::remove((mpath + suffix).c_str());
  return s;
}

}  // namespace

int RunExportCsv(const ExportCsvOptions& o) {
  constexpr std::string_view kCmd = "export csv";
  namespace fs = std::filesystem;
  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  if (Status s = CheckOutsideStore(o.store, o.outdir); !s.ok()) return ReportError(kCmd, s);
  auto snap = store->GetSnapshot();
  auto listed = SeriesToExport(*snap, o);
  if (!listed.ok()) return ReportError(kCmd, listed.status());
  const std::vector<SeriesInfo>& series = *listed;
  std::error_code ec;
  fs::create_directories(o.outdir, ec);
  if (ec) {
    return ReportError(
        kCmd, Status::IOError(o.outdir + ": cannot create directory: " + ec.message(), ec.value()));
  }

  uint64_t total = 0;
  for (const SeriesInfo& s : series) total += s.count;
  Progress progress("export", total);
  const std::string suffix = ".tmp-" + std::to_string(getpid());
  ordered_json manifest = ordered_json::array();
  uint64_t done = 0, bytes = 0;
  std::set<std::string> used_files = {"manifest.json"};
  for (const SeriesInfo& info : series) {
    const std::string file = SeriesFileName(info.name, &used_files);
    const std::string path = (fs::path(o.outdir) / file).string();
    const std::string tmp = path + suffix;
    const std::vector<std::string> cols = ValueColumns(info, o.max_columns);
    auto fail = [&](const Status& s) {
      progress.Finish();
      std::remove(tmp.c_str());
      return ReportError(kCmd, s.WithContext("series '" + info.name + "'"));
    };
    auto created = Output::Create(tmp, path);
    if (!created.ok()) return fail(created.status());
    Output& out = **created;
    auto rows = WriteSeriesCsv(*snap, info, cols, &out, [&](uint64_t written) {
      progress.Update(done + written, bytes + out.bytes_written());
    });
    if (!rows.ok()) return fail(rows.status());
    const uint64_t file_bytes = out.bytes_written();
    Status s = out.Close();
    if (s.ok()) s = PlaceFile(tmp, path, /*replace=*/true);
    if (!s.ok()) return fail(s);
    done += *rows;
    bytes += file_bytes;
    manifest.push_back({{"series", info.name},
                        {"file", file},
                        {"dtype", DTypeName(info.dtype)},
                        {"shape", info.shape},
                        {"variable_shape", info.variable_shape},
                        {"records", *rows},
                        {"columns", cols}});
  }
  progress.Finish();
  if (Status s = WriteManifest(o.outdir, suffix, store->path(), manifest); !s.ok()) {
    return ReportError(kCmd, s);
  }
  std::cout << "exported " << series.size() << " series (" << done << " records, "
            << HumanBytes(bytes) << ") to " << o.outdir << "\n";
  return kExitOk;
}

void RegisterExportCsv(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<ExportCsvOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_option("OUTDIR", o->outdir, "Output directory (not inside the store)")->required();
  cmd->add_option("--names", o->names, "Only these series (comma-separated or repeated)")
      ->delimiter(',');
  cmd->add_flag("--all,-a", o->all, "Include reserved '~' series when --names is not given");
  cmd->add_option("--max-columns", o->max_columns,
                  "Split fixed shapes of up to this many elements into columns (0: never)")
      ->transform(Integer<int>(0))
      ->capture_default_str();
  cmd->footer(Footer(
      "Writes one CSV file per series into OUTDIR (created if missing), streaming batch by\n"
      "batch in bounded memory, and manifest.json, which maps file names to series names.\n"
      "Columns: run, step, then the value. A fixed-shape numeric series with at most\n"
      "--max-columns elements per record gets one column per element, in C order (value_0,\n"
      "value_1, ...; value_0_0, value_0_1, ... for two dimensions); any other series gets one\n"
      "'value' column holding a JSON list ([[1,2],[3,4]]), the string, or base64 for bytes.\n"
      "Quoting follows RFC 4180; lines end in \\n; NaN and infinities are nan, inf, -inf.\n"
      "File names are the series names with every byte outside [A-Za-z0-9._-] (and a leading\n"
      "'.') escaped as %XX, plus .csv: 'qi/3_17' -> qi%2F3_17.csv. Names that escape to more\n"
      "than 200 bytes are cut and end in '~' and a hash. Each file is written under a\n"
      "temporary name and renamed into place when complete.",
      "  runstore export csv /scratch/sweep out/\n"
      "  runstore export csv /scratch/sweep out/ --names loss,reward"));
  ChooseOnParse(cmd, "export csv", chosen, [o] { return RunExportCsv(*o); });
}

// The group `export`: its commands are in cli/commands.tsv.
void RegisterExport(CLI::App* export_cmd, ChosenCommand*) {
  export_cmd->footer(Footer("",
                            "  runstore export csv /scratch/sweep out/\n"
                            "  runstore export tar /scratch/sweep results.tar.gz\n"
                            "  runstore export parquet /scratch/sweep results.parquet\n"
                            "  runstore export zarr /scratch/sweep results.zarr"));
}

}  // namespace runstore::cli
