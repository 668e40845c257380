// `runstore export`: `export csv` writes one CSV file per series, streamed
// batch by batch from Snapshot::Scan so that memory stays bounded by one block
// plus the output buffer, whatever the size of the series. `export tar`,
// `export parquet` and `export zarr` are done by the Python package's runstore
// command (below).
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

int RunExportCsv(const ExportCsvOptions& o) {
  constexpr std::string_view kCmd = "export csv";
  namespace fs = std::filesystem;
  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  if (Status s = CheckOutsideStore(o.store, o.outdir); !s.ok()) return ReportError(kCmd, s);
  auto snap = store->GetSnapshot();

  // Every named series must exist before anything is written.
  std::vector<SeriesInfo> series;
  if (o.names.empty()) {
    auto all = snap->ListSeries(o.all);
    if (!all.ok()) return ReportError(kCmd, all.status());
    series = std::move(all).value();
  } else {
    std::set<std::string> seen;
    for (const std::string& name : o.names) {
      if (!seen.insert(name).second) continue;
      auto info = snap->GetSeriesInfo(name);
      if (!info.ok()) return ReportError(kCmd, info.status());
      series.push_back(std::move(info).value());
    }
  }
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
  std::string line, cell;
  std::set<std::string> used_files = {"manifest.json"};
  for (const SeriesInfo& info : series) {
    const std::string file = SeriesFileName(info.name, &used_files);
    const std::string path = (fs::path(o.outdir) / file).string();
    const std::string tmp = path + suffix;
    const std::vector<std::string> cols = ValueColumns(info, o.max_columns);
    const bool split = cols.size() > 1 || cols[0] != "value";
    auto fail = [&](const Status& s) {
      progress.Finish();
      std::remove(tmp.c_str());
      return ReportError(kCmd, s.WithContext("series '" + info.name + "'"));
    };

    auto created = Output::Create(tmp, path);
    if (!created.ok()) return fail(created.status());
    Output& out = **created;
    line = "run,step";
    for (const std::string& c : cols) line += "," + c;
    line += '\n';
    out.Write(line);

    auto scanner = snap->Scan(info.name);
    if (!scanner.ok()) return fail(scanner.status());
    ScanBatch batch;
    uint64_t rows = 0;
    while (true) {
      auto more = (*scanner)->Next(&batch);
      if (!more.ok()) return fail(more.status());
      if (!*more) break;
      for (size_t i = 0; i < batch.count; ++i) {
        const Row row = GetRow(batch, i);
        line.clear();
        text::AppendCsvRun(&line, row.run_is_string, row.run_int, row.run_str);
        line += ',';
        line += std::to_string(row.step);
        if (split) {
          const size_t elem = DTypeSize(info.dtype);
          if (row.nbytes != cols.size() * elem) {
            return fail(Status::Corruption("a record of " + std::to_string(row.nbytes) +
                                           " bytes in a series of " + std::to_string(cols.size()) +
                                           " elements per record"));
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
        out.Write(line);
      }
      rows += batch.count;
      progress.Update(done + rows, bytes + out.bytes_written());
      if (!out.status().ok()) break;
    }
    const uint64_t file_bytes = out.bytes_written();
    Status s = out.Close();
    if (s.ok()) s = PlaceFile(tmp, path, /*replace=*/true);
    if (!s.ok()) return fail(s);
    done += rows;
    bytes += file_bytes;
    manifest.push_back({{"series", info.name},
                        {"file", file},
                        {"dtype", DTypeName(info.dtype)},
                        {"shape", info.shape},
                        {"variable_shape", info.variable_shape},
                        {"records", rows},
                        {"columns", cols}});
  }
  progress.Finish();

  // manifest.json maps file names back to series names (and cannot collide
  // with a series' file: those all end in .csv).
  const std::string mpath = (fs::path(o.outdir) / "manifest.json").string();
  auto m = Output::Create(mpath + suffix, mpath);
  if (!m.ok()) return ReportError(kCmd, m.status());
  (*m)->Write(
      ordered_json{{"store", store->path()}, {"text_cells", kTextCellsNote}, {"series", manifest}}
          .dump(2, ' ', false, ordered_json::error_handler_t::replace) +
      "\n");
  Status s = (*m)->Close();
  if (s.ok()) s = PlaceFile(mpath + suffix, mpath, /*replace=*/true);
  if (!s.ok()) {
    std::remove((mpath + suffix).c_str());
    return ReportError(kCmd, s);
  }
  std::cout << "exported " << series.size() << " series (" << done << " records, "
            << HumanBytes(bytes) << ") to " << o.outdir << "\n";
  return kExitOk;
}

namespace {

void RegisterExportCsv(CLI::App& export_cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<ExportCsvOptions>();
  CLI::App* cmd =
      export_cmd.add_subcommand("csv", "Write one CSV file per series into a directory");
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

// `export tar`, `export parquet` and `export zarr` write the experiment table,
// and their one engine is the Python package: its `runstore` command does
// these exports and hands every other command to this tool. This tool keeps
// them on its command line, so that its help lists them and a bad command line
// is a usage error as there, and when run they say where they are done,
// without starting a Python behind the user's back.

// What their options are parsed into (checked, then not used).
struct ExportTableOptions {
  std::string store, out;
  int chunk_rows = 10000, compresslevel = 1;  // tar (chunk_rows: zarr too)
  int row_group_rows = 10000;                 // parquet
  std::vector<std::string> names;             // zarr
  bool by_step = false;                       // zarr
  bool force = false;
  std::string max_expansion;  // import tar: a number or "none"
};

// NotSupported (exit code 5), saying what to install to run `export FORMAT`.
// Makes `cmd` a command that the Python package's runstore command does: run
// by this tool on its own, it says that it does not `does_not`, how to run it
// there, and exits with 5. `keep` is the command's options, which CLI11
// parses into: the callback holds them for as long as the app lives.
void ChooseDoneInPython(CLI::App* cmd, const std::string& name, ChosenCommand* chosen,
                        std::shared_ptr<const void> keep, const std::string& does_not,
                        const std::string& usage) {
  ChooseOnParse(cmd, name, chosen, [name, keep, does_not, usage] {
    return ReportError(
        name, Status::NotSupported("the C++ runstore tool on its own does not " + does_not + "; '" +
                                   name +
                                   "' is done by the Python package's runstore command: pip "
                                   "install runstore, then run '" +
                                   usage + "' from that environment"));
  });
}

// An export done in Python: its engine's name, what to install, OUT's usual
// extension.
struct PythonExport {
  const char* format;
  const char* engine;
  const char* install;
  const char* extension;
};
constexpr PythonExport kPythonExports[] = {
    {"tar", "tar", "pip install runstore", ".tar.gz"},
    {"parquet", "Parquet", "pip install 'runstore[arrow]' (the package with pyarrow)", ".parquet"},
    {"zarr", "Zarr", "pip install 'runstore[xarray]' (the package with xarray, zarr and dask)",
     ".zarr"},
};

int ReportExportInPython(const std::string& format) {
  const PythonExport* e = &kPythonExports[0];
  for (const PythonExport& x : kPythonExports) {
    if (format == x.format) e = &x;
  }
  return ReportError(
      "export " + format,
      Status::NotSupported(std::string("the C++ runstore tool on its own has no ") + e->engine +
                           " engine; tar, Parquet and Zarr exports are done by the Python "
                           "package's runstore command: " +
                           e->install + ", then run 'runstore export " + format + " STORE OUT" +
                           e->extension + "' from that environment"));
}

void RegisterExportTar(CLI::App& export_cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<ExportTableOptions>();
  CLI::App* cmd = export_cmd.add_subcommand(
      "tar", "Write experiments and outcomes as a .tar.gz of CSVs (and .npy) for spreadsheets");
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_option("OUT", o->out, "Output .tar.gz (not inside the store)")->required();
  cmd->add_option("--chunk-rows", o->chunk_rows, "Experiments formatted at a time")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  cmd->add_option("--compresslevel", o->compresslevel, "gzip level")
      ->transform(Integer<int>(0, 9))
      ->capture_default_str();
  cmd->add_flag("--force,-f", o->force, "Replace OUT if it exists");
  cmd->footer(Footer(
      "Writes metadata.json (every column's and outcome's dtype and shape, and the member file\n"
      "of each outcome), experiments.csv (experiment id, parameters, status: state, error,\n"
      "host, started, finished, seconds, attempt), one CSV per outcome of up to two dimensions\n"
      "(rows in experiment order; one column per element, '<name>_i_j' for 2-d), and .npy for\n"
      "outcomes of three or more dimensions (with a .mask.npy of absent rows). Streamed in\n"
      "bounded memory; OUT appears whole when complete or not at all (see the Python package's\n"
      "README), with mode 0666 minus the umask; an existing OUT is replaced only with --force.\n"
      "A store without a design exports its runs as the experiments. runstore.import_tar\n"
      "(Python) reads it back with dtypes intact; docs/experiments.md specifies the layout.\n"
      "This export is done by the Python package's runstore command (pip install runstore),\n"
      "which hands every other command to this tool; the C++ tool on its own says where the\n"
      "export is done and exits with 5.",
      "  pip install runstore\n"
      "  runstore export tar /scratch/sweep results.tar.gz"));
  // The callback holds `o`, which CLI11 parses into, for as long as the app lives.
  ChooseOnParse(cmd, "export tar", chosen, [o] { return ReportExportInPython("tar"); });
}

void RegisterExportParquet(CLI::App& export_cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<ExportTableOptions>();
  CLI::App* cmd = export_cmd.add_subcommand(
      "parquet",
      "Write one Parquet file with a row per experiment (pandas, polars, DuckDB, Spark)");
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_option("OUT", o->out, "Output .parquet (not inside the store)")->required();
  cmd->add_option("--row-group-rows", o->row_group_rows, "Rows per row group")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  cmd->add_flag("--force,-f", o->force, "Replace OUT if it exists");
  cmd->footer(Footer(
      "Writes one row per experiment in design order: experiment, parameters, status columns\n"
      "and every outcome (scalars as columns, fixed-shape arrays as fixed-size lists), row\n"
      "group by row group in bounded memory. A store without a design writes its records as\n"
      "run, step and one column per series. OUT is written as 'export tar' writes its own\n"
      "(replaced only with --force). This export is done by the Python package's runstore\n"
      "command, with pyarrow (pip install 'runstore[arrow]'), which hands every other command\n"
      "to this tool; the C++ tool on its own says where the export is done and exits with 5.",
      "  pip install 'runstore[arrow]'\n"
      "  runstore export parquet /scratch/sweep results.parquet\n"
      "  duckdb -c \"SELECT state, count(*) FROM 'results.parquet' GROUP BY state\""));
  ChooseOnParse(cmd, "export parquet", chosen, [o] { return ReportExportInPython("parquet"); });
}

void RegisterExportZarr(CLI::App& export_cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<ExportTableOptions>();
  CLI::App* cmd = export_cmd.add_subcommand(
      "zarr", "Write a Zarr store that xarray.open_zarr opens: a row per experiment (or run)");
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_option("OUT", o->out, "Output Zarr directory (not inside the store)")->required();
  cmd->add_option("--names", o->names, "Only these series (comma-separated or repeated)")
      ->delimiter(',');
  cmd->add_flag("--by-step", o->by_step,
                "Variables of (run, step) in a store with a design too (default: step 0 there)");
  cmd->add_option("--chunk-rows", o->chunk_rows,
                  "Runs per Zarr chunk (default: about 8 MiB of the largest variable)")
      ->transform(Integer<int>(1));
  cmd->add_flag("--force,-f", o->force, "Replace OUT if it exists (a Zarr store or empty)");
  cmd->footer(Footer(
      "Writes the store's xarray Dataset as a Zarr store (format 3, consolidated metadata)\n"
      "that xarray.open_zarr(OUT) reads without runstore. Dimension 'run': the experiments\n"
      "in design order (their ids), with the parameters and the status (state, error, host,\n"
      "started, finished, seconds, attempt) as coordinates along it, and each outcome a\n"
      "variable of its step-0 records: (run) for scalars, (run, <name>_dim_0, ...) for\n"
      "arrays. A store without a design (or --by-step) has variables of (run, step, ...)\n"
      "over every step. Absent values are NaN (absent strings empty); int and bool arrays\n"
      "are float64 for that. Bytes series are left out. Written chunk by chunk of runs in\n"
      "bounded memory under a temporary name beside OUT, and renamed into place when\n"
      "complete; an existing OUT is replaced only with --force, and only if it is a Zarr\n"
      "store, an empty directory or a file. This export is done by the Python package's\n"
      "runstore command, with xarray, zarr and dask (pip install 'runstore[xarray]'), which\n"
      "hands every other command to this tool; the C++ tool on its own says where the\n"
      "export is done and exits with 5.",
      "  pip install 'runstore[xarray]'\n"
      "  runstore export zarr /scratch/sweep results.zarr\n"
      "  python -c \"import xarray; print(xarray.open_zarr('results.zarr'))\""));
  ChooseOnParse(cmd, "export zarr", chosen, [o] { return ReportExportInPython("zarr"); });
}

}  // namespace

// `import tar` rebuilds a store from the tarball of `export tar`; as that
// export, it is done by the Python package's runstore command.
void RegisterImport(CLI::App& app, ChosenCommand* chosen) {
  CLI::App* import_cmd =
      app.add_subcommand("import", "Rebuild a store from an export (tar; the Python package)");
  import_cmd->require_subcommand(1);
  auto o = std::make_shared<ExportTableOptions>();
  CLI::App* cmd = import_cmd->add_subcommand(
      "tar", "Rebuild a store from a tarball of 'export tar': design, status, outcomes");
  cmd->add_option("ARCHIVE", o->out, "A .tar.gz written by 'runstore export tar'")->required();
  cmd->add_option("STORE", o->store, "The store to write (created if missing)")->required();
  cmd->add_option("--chunk-rows", o->chunk_rows, "Rows parsed and written at a time")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  cmd->add_option("--max-expansion", o->max_expansion,
                  "Refuse an archive that decompresses to more than X times its size (default "
                  "300, and 64 MiB at least: a gzip bomb); none: no limit");
  cmd->footer(Footer(
      "Reads metadata.json, experiments.csv and the outcome members, and writes them into\n"
      "STORE with their dtypes and shapes (runstore.import_tar in Python). A new STORE appears\n"
      "whole once the archive has been read; an existing one receives the import as one\n"
      "commit. The archive is checked, not trusted: links, special files, a cut or damaged\n"
      "archive, a gzip bomb and outcomes named like runstore's own '~' series are refused,\n"
      "naming the member, and nothing is written. This command is done by the Python\n"
      "package's runstore command (pip install runstore); the C++ tool on its own says so\n"
      "and exits with 5.",
      "  pip install runstore\n"
      "  runstore import tar results.tar.gz /scratch/sweep-again"));
  ChooseDoneInPython(cmd, "import tar", chosen, o, "import", "runstore import tar ARCHIVE STORE");
}

// `plan` is the partition planner of the Python package's runstore.dask
// (docs/dask.md); kept here, as the exports in Python are, so that the help
// lists it and a bad command line is a usage error.
void RegisterPlan(CLI::App& app, ChosenCommand* chosen) {
  struct PlanOptions {
    long long objects = 0;
    std::string object_bytes, worker_memory, draw;
    int threads = 1, workers = 1;
    double k = 0.25;
  };
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "How to partition a dask bag from worker memory (runstore.dask; the Python package)");
  cmd->add_option("--objects", o->objects, "Number of objects N")->required();
  cmd->add_option("--object-bytes", o->object_bytes, "Size of one object D, e.g. 16MiB")
      ->required();
  cmd->add_option("--worker-memory", o->worker_memory, "Memory per worker M, e.g. 4GiB")
      ->required();
  cmd->add_option("--threads", o->threads, "Threads per worker T")->capture_default_str();
  cmd->add_option("--workers", o->workers, "Number of workers W")->capture_default_str();
  cmd->add_option("--k", o->k, "Fraction of M the partitions may hold")->capture_default_str();
  cmd->add_option("--draw", o->draw, "Also draw the plan to this PNG");
  cmd->footer(Footer(
      "A worker runs T tasks at once, each holding one partition: T partitions of s objects\n"
      "of D bytes must fit in the fraction k of M, so s = floor(k*M/(D*T)), and there are\n"
      "ceil(N/s) partitions, at least W*T. Prints the reasoning; docs/dask.md derives it and\n"
      "measures k. Done by the Python package's runstore command (pip install\n"
      "'runstore[dask]'); the C++ tool on its own says so and exits with 5.",
      "  runstore plan --objects 100000 --object-bytes 16MiB --worker-memory 8GiB --threads 4 \\\n"
      "      --workers 16 --draw plan.png"));
  ChooseDoneInPython(cmd, "plan", chosen, o, "plan", "runstore plan ...");
}

void RegisterStatus(CLI::App& app, ChosenCommand* chosen) {
  struct StatusOptions {
    std::string store;
    bool json = false;
    double window = 300;
    int top = 5;
  };
  auto o = std::make_shared<StatusOptions>();
  CLI::App* cmd = app.add_subcommand(
      "status", "Where a sweep stands: counts, rate, ETA, slowest and failed (the Python package)");
  cmd->add_option("store", o->store, "Store directory")->required();
  cmd->add_flag("--json", o->json, "Print the summary as JSON");
  cmd->add_option("--window", o->window, "Seconds over which the rate is measured")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Rows per list")->capture_default_str();
  cmd->footer(Footer(
      "Counts of pending, running, done and failed experiments, the rate at which they\n"
      "finished over the last --window seconds and the time left at that rate, the slowest\n"
      "and the longest running, and the failed with the first line of their errors. Reads\n"
      "one snapshot; never blocks the sweep's writers. Done by the Python package's runstore\n"
      "command (pip install runstore); the C++ tool on its own says so and exits with 5.",
      "  runstore status results/sweep\n  runstore status results/sweep --json --window 60"));
  ChooseDoneInPython(cmd, "status", chosen, o, "read experiment status", "runstore status STORE");
}

void RegisterWatch(CLI::App& app, ChosenCommand* chosen) {
  struct WatchOptions {
    std::string store;
    double interval = 2, window = 300;
    int shards = 0;
    bool stay = false;
  };
  auto o = std::make_shared<WatchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "watch", "A live view of a running sweep, until it is done (the Python package)");
  cmd->add_option("store", o->store, "Store directory")->required();
  cmd->add_option("--interval", o->interval, "Seconds between refreshes")->capture_default_str();
  cmd->add_option("--window", o->window, "Seconds over which the rate is measured")
      ->capture_default_str();
  cmd->add_option("--shards", o->shards, "A progress bar per shard of N (else per host)");
  cmd->add_flag("--stay", o->stay, "Keep watching once the sweep is done");
  cmd->footer(Footer(
      "Refreshes a read-only view of the store every --interval seconds (the sweep's writers\n"
      "never wait for it) and redraws what 'runstore status' says, with a progress bar for\n"
      "the sweep and one per shard or host; exits with 0 when nothing is pending or running,\n"
      "130 at Ctrl-C. Not on a terminal, it prints a line per refresh. Done by the Python\n"
      "package's runstore command (pip install runstore); the C++ tool on its own says so\n"
      "and exits with 5.",
      "  runstore watch results/sweep\n  runstore watch results/sweep --shards 100 --interval 5"));
  ChooseDoneInPython(cmd, "watch", chosen, o, "watch sweeps", "runstore watch STORE");
}

void RegisterReport(CLI::App& app, ChosenCommand* chosen) {
  struct ReportOptions {
    std::string store, output, title;
    int max_points = 2000, max_runs = 50;
    int64_t seed = 0;
    bool force = false;
  };
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "One HTML page of a store's results, plots included (the Python package)");
  cmd->add_option("store", o->store, "Store directory")->required();
  cmd->add_option("-o,--output", o->output, "The page to write (not inside the store)")->required();
  cmd->add_flag("--force,-f", o->force, "Replace the page if it exists");
  cmd->add_option("--title", o->title, "The page's title (default: the store's path)");
  cmd->add_option("--max-points", o->max_points, "Points of a scatter plot at most")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  cmd->add_option("--max-runs", o->max_runs, "Runs whose curves are shown")
      ->transform(Integer<int>(0))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the samples")
      ->transform(Integer<int64_t>(0))
      ->capture_default_str();
  cmd->footer(Footer(
      "Writes one self-contained HTML file (plotly.js inline: it opens without a network):\n"
      "the status of the experiments as 'runstore status' computes it, the failures grouped\n"
      "by error with their tracebacks, each scalar outcome against each parameter (scatter\n"
      "plots of a seeded sample of --max-points experiments; box plots for text, bool and\n"
      "few-valued parameters), array outcomes as quantile bands over their index, and the\n"
      "curves of series logged at many steps, with a choice of metric and runs. Reads in\n"
      "bounded memory; the page appears whole or not at all, and an existing one is replaced\n"
      "only with --force. Done by the Python package's runstore command, with plotly (pip\n"
      "install runstore plotly); the C++ tool on its own says so and exits with 5.",
      "  runstore report results/sweep -o report.html\n"
      "  runstore report results/sweep -o report.html --force --max-points 5000"));
  ChooseDoneInPython(cmd, "report", chosen, o, "write reports",
                     "runstore report STORE -o report.html");
}

void RegisterExport(CLI::App& app, ChosenCommand* chosen) {
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Export series or experiments to other formats (csv, tar, parquet, zarr)");
  export_cmd->require_subcommand(1);
  export_cmd->footer(Footer("",
                            "  runstore export csv /scratch/sweep out/\n"
                            "  runstore export tar /scratch/sweep results.tar.gz\n"
                            "  runstore export parquet /scratch/sweep results.parquet\n"
                            "  runstore export zarr /scratch/sweep results.zarr"));
  RegisterExportCsv(*export_cmd, chosen);
  RegisterExportTar(*export_cmd, chosen);
  RegisterExportParquet(*export_cmd, chosen);
  RegisterExportZarr(*export_cmd, chosen);
}

}  // namespace runstore::cli
