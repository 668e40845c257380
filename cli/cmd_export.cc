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
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "progress.h"
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

}  // namespace

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

}  // namespace runstore::cli
