// `runstore export csv`: one CSV file per series, streamed batch by batch
// from Snapshot::Scan so that memory stays bounded by one block plus the
// output buffer, whatever the size of the series.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
#include "runstore/text.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

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
  for (const SeriesInfo& info : series) {
    const std::string file = SafeFileName(info.name) + ".csv";
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
        AppendRun(&line, row.run_is_string, row.run_int, row.run_str, OutFormat::kCsv);
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
          AppendCsvCell(&line, cell);
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
  (*m)->Write(ordered_json{{"store", store->path()}, {"series", manifest}}.dump(
                  2, ' ', false, ordered_json::error_handler_t::replace) +
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

// `runstore export tar` and `runstore export parquet`: the experiment-table
// exports live in the Python package (they need its CSV, tar and Arrow
// writers), so these commands run `python -m runstore export ...` with the
// Python of $RUNSTORE_PYTHON (default python3), after checking that it can
// import runstore.
namespace {

// Runs `argv` and waits; its exit code, or -1 if it could not be started or
// did not exit normally. Its output goes to /dev/null.
int RunQuietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    FILE* null = std::fopen("/dev/null", "w");
    if (null != nullptr) {
      dup2(fileno(null), STDOUT_FILENO);
      dup2(fileno(null), STDERR_FILENO);
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `python -m runstore export FORMAT STORE OUT EXTRA...` with
// $RUNSTORE_PYTHON (default python3), or says how to install the package if
// that Python cannot import it. Returns only on failure (otherwise the process
// becomes Python, whose exit code is the command's).
int RunExportPython(const std::string& format, const std::string& store, const std::string& out,
                    bool force, const std::vector<std::string>& extra) {
  const std::string cmd = "export " + format;
  // Checked here too (the Python package checks again), so that the answer
  // does not depend on which Python is installed.
  Status checked = CheckOutsideStore(store, out);
  if (checked.ok()) checked = CheckMayCreate(out, force);
  if (!checked.ok()) return ReportError(cmd, checked);
  const char* env = std::getenv("RUNSTORE_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : "python3";
  if (RunQuietly({python, "-c", "import runstore._core"}) != 0) {
    std::cerr << "runstore: " << cmd << ": this command needs the runstore Python package, and '"
              << python << "' cannot import it.\n"
              << "  Install it into that Python:  " << python << " -m pip install /path/to/runstore"
              << (format == "parquet" ? "[arrow]" : "") << "\n"
              << "  or point RUNSTORE_PYTHON at a Python that has it, e.g. the project's "
                 "virtual environment:\n"
              << "    RUNSTORE_PYTHON=/path/to/runstore/.venv/bin/python runstore " << cmd
              << " ...\n";
    return kExitOther;
  }
  std::vector<std::string> argv = {python, "-m", "runstore", "export", format, store, out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (force) argv.push_back("--force");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  execvp(args[0], args.data());  // returns only on failure
  const int e = errno;
  return ReportError(cmd, Status::IOError("cannot run " + python + ": " + std::strerror(e), e));
}

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

// What `export tar` and `export parquet` parse their options into.
struct ExportTableOptions {
  std::string store, out;
  int chunk_rows = 10000, compresslevel = 1;  // tar
  int row_group_rows = 10000;                 // parquet
  bool force = false;
};

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
      "Runs `python -m runstore export tar` with the Python of $RUNSTORE_PYTHON (default\n"
      "python3), which must have the runstore package installed.",
      "  runstore export tar /scratch/sweep results.tar.gz\n"
      "  RUNSTORE_PYTHON=.venv/bin/python runstore export tar /scratch/sweep results.tar.gz"));
  ChooseOnParse(cmd, "export tar", chosen, [o] {
    std::vector<std::string> extra = {"--chunk-rows", std::to_string(o->chunk_rows),
                                      "--compresslevel", std::to_string(o->compresslevel)};
    if (g_skip_damaged) extra.push_back("--skip-damaged");
    return RunExportPython("tar", o->store, o->out, o->force, extra);
  });
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
      "(replaced only with --force). Needs the runstore Python package with pyarrow\n"
      "(runstore[arrow]) in $RUNSTORE_PYTHON (default python3).",
      "  runstore export parquet /scratch/sweep results.parquet\n"
      "  duckdb -c \"SELECT state, count(*) FROM 'results.parquet' GROUP BY state\""));
  ChooseOnParse(cmd, "export parquet", chosen, [o] {
    std::vector<std::string> extra = {"--row-group-rows", std::to_string(o->row_group_rows)};
    if (g_skip_damaged) extra.push_back("--skip-damaged");
    return RunExportPython("parquet", o->store, o->out, o->force, extra);
  });
}

}  // namespace

void RegisterExport(CLI::App& app, ChosenCommand* chosen) {
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Export series or experiments to other formats (csv, tar, parquet)");
  export_cmd->require_subcommand(1);
  export_cmd->footer(Footer("",
                            "  runstore export csv /scratch/sweep out/\n"
                            "  runstore export tar /scratch/sweep results.tar.gz\n"
                            "  runstore export parquet /scratch/sweep results.parquet"));
  RegisterExportCsv(*export_cmd, chosen);
  RegisterExportTar(*export_cmd, chosen);
  RegisterExportParquet(*export_cmd, chosen);
}

}  // namespace runstore::cli
