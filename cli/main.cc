// runstore: the command-line tool for looking into runstore stores.
//
// Parses the command line with CLI11 and hands it to one of the commands in
// commands.h. Every command opens the store read-only. Exit codes: common.h
// (and every --help).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "progress.h"

namespace runstore::cli {

// `runstore export tar|parquet` (cmd_export.cc): runs `python -m runstore export
// FORMAT STORE OUT EXTRA...` with $RUNSTORE_PYTHON (default python3), or says how
// to install the package if that Python cannot import it. Returns only on
// failure (otherwise the process becomes Python, whose exit code is the
// command's).
int RunExportPython(const std::string& format, const std::string& store, const std::string& out,
                    bool force, const std::vector<std::string>& extra);

namespace {

// The text after a subcommand's options: what it does in detail, examples and
// the exit codes. (The description passed to add_subcommand is one line, as
// it also appears in the list of commands of `runstore --help`.)
std::string Footer(const std::string& details, const std::string& examples) {
  std::string s = "\n";
  if (!details.empty()) s += details + "\n\n";
  return s + "Examples:\n" + examples + "\n\n" + ExitCodeHelp();
}

// Checks and rewrites the value of an integer option: decimal digits with an
// optional '-', from `min` to `max`, or a message naming the value (CLI11
// prefixes the option's name). CLI11's own conversion would take 0x10 for 16
// and 010 for 8, and clamp 99999999999999999999 silently: this runs first and
// hands it the value in plain decimal.
template <typename T>
CLI::Validator Integer(T min = std::numeric_limits<T>::min(),
                       T max = std::numeric_limits<T>::max()) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        T v{};
        const DecimalText parsed = ParseDecimal(text, &v);
        if (parsed == DecimalText::kMalformed) {
          return "'" + text + "' is not a decimal integer (expected " + range + ")";
        }
        if (parsed == DecimalText::kOutOfRange || v < min || v > max) {
          return "'" + text + "' is out of range (expected " + range + ")";
        }
        text = std::to_string(v);
        return std::string();
      },
      "");
}

// For a command line that CLI11 refused: the message for its first word that
// names no command ("runstore frobnicate", "runstore export xml"), listing
// the commands there are; empty if every command word is known.
std::string UnknownCommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  std::string path = "runstore";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.starts_with("-")) continue;  // the options before commands take no values
    const auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return "";  // the arguments of a command
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* sub : subs) {
      if (sub->get_name() == word) next = sub;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (next == nullptr) {
      return "runstore: unknown command '" + (level == &app ? "" : path.substr(9) + " ") + word +
             "'; the commands of '" + path + "' are: " + names + "\nRun '" + path +
             " --help' for more information.\n";
    }
    level = next;
    path += " " + word;
  }
  return "";
}

// Parses the command line and runs the command; sets *command to its name
// ("ls", "export csv") once that is known, for FinishStdout.
int Main(int argc, char** argv, std::string* command) {
  CLI::App app{
      "runstore: inspect and export runstore stores (results of large parallel computations).\n"
      "Every command opens the store read-only and never writes to it.\n"
      "A store with a damaged or unreadable segment file is refused, naming the file (exit\n"
      "code 2 or 4); with --skip-damaged every command reads the other segments and prints\n"
      "'runstore: left out damaged segment FILE: ERROR' on stderr for each one left out.",
      "runstore"};
  app.set_version_flag("--version", std::string("runstore ") + RUNSTORE_CLI_VERSION +
                                        " (reads store format versions 1 to " +
                                        std::to_string(kFormatVersion) + ")");
  app.require_subcommand(1);
  // The global flags may also follow the command: `runstore info STORE --skip-damaged`.
  app.fallthrough();
  app.add_flag("--no-progress", g_progress_disabled,
               "Never draw a progress bar (one is drawn on stderr only when it is a terminal)");
  app.add_flag("--skip-damaged", g_skip_damaged,
               "Read a store around segment files that cannot be read (damaged bytes, or a file "
               "that cannot be opened): leave them out, as if they did not exist, and name each "
               "on stderr. Without it such a store is refused, since leaving a segment out can "
               "bring back values it overwrote and records its resume markers hid");
  app.footer(Footer("",
                    "  runstore info /scratch/sweep\n"
                    "  runstore ls /scratch/sweep\n"
                    "  runstore cat /scratch/sweep loss --format csv > loss.csv\n"
                    "  runstore get /scratch/sweep 42 trace --step 3 -o trace.npy\n"
                    "  runstore verify /scratch/sweep\n"
                    "  runstore info /scratch/sweep --skip-damaged\n"
                    "  runstore export csv /scratch/sweep out/\n"
                    "  runstore export tar /scratch/sweep results.tar.gz\n"
                    "Run 'runstore COMMAND --help' for the details of a command."));

  // info
  InfoOptions info;
  auto* info_cmd =
      app.add_subcommand("info", "Summarise a store: writers, segments, series, runs, bytes");
  info_cmd->add_option("STORE", info.store, "Store directory")->required();
  info_cmd->add_flag("--json", info.json, "Print one JSON object instead of text");
  info_cmd->footer(Footer(
      "Prints the store's format version, the number of writers (distinct writer ids), of\n"
      "segments (sealed and open), series (and reserved '~' series), runs, visible records,\n"
      "commits and blocks, the bytes on disk (every file under the store), the bytes of the\n"
      "segment files, and the committed bytes (up to each segment's last valid commit).\n"
      "With --skip-damaged, also the segments left out as damaged, with their errors\n"
      "(--json: \"damaged_segments\": [{file, code, message}], always present).",
      "  runstore info /scratch/sweep\n"
      "  runstore info /scratch/sweep --json | jq .records"));

  // ls
  LsOptions ls;
  auto* ls_cmd =
      app.add_subcommand("ls", "List the series (or with --runs the run ids) of a store");
  ls_cmd->add_option("STORE", ls.store, "Store directory")->required();
  ls_cmd->add_flag("--runs", ls.runs, "List run ids instead of series");
  ls_cmd->add_flag("--json", ls.json,
                   "Print a JSON array: of objects {name, dtype, shape (a list, [] for scalars), "
                   "variable_shape, count, stored_bytes}, or with --runs of run ids (numbers "
                   "and strings)");
  ls_cmd->add_flag("--all,-a", ls.all,
                   "Include series reserved for runstore (names starting with '~')");
  ls_cmd->footer(Footer(
      "Lists every series with its dtype, the shape of each record (\"scalar\", \"[3, 4]\" or\n"
      "\"variable\"), the number of visible records and the bytes its blocks take on disk,\n"
      "sorted by name. With --runs, lists the run ids instead (integers first, then strings),\n"
      "one per line.",
      "  runstore ls /scratch/sweep\n"
      "  runstore ls /scratch/sweep --runs | wc -l\n"
      "  runstore ls /scratch/sweep --all --json"));

  // cat
  CatOptions cat;
  auto* cat_cmd =
      app.add_subcommand("cat", "Print the records of one series as text, CSV or JSON lines");
  cat_cmd->add_option("STORE", cat.store, "Store directory")->required();
  cat_cmd->add_option("NAME", cat.name, "Series name")->required();
  auto* run_opt = cat_cmd->add_option(
      "--run,-r", cat.run,
      "Only records of this run: an integer if all of it is one (digits, an optional '-'), a "
      "string if it does not start like a number; a value that starts like one but is not an "
      "integer (1x, 1.5, 0x10, ' 1', beyond int64) is refused: use --run-str for such a run");
  auto* run_str_opt = cat_cmd->add_option("--run-str", cat.run,
                                          "Only records of this run, always taken as a string");
  run_opt->excludes(run_str_opt);
  cat_cmd->add_option("--format,-f", cat.format, "Output format")
      ->check(CLI::IsMember({"text", "csv", "jsonl"}))
      ->capture_default_str();
  int64_t first_step = 0, last_step = 0;
  auto* first_step_opt =
      cat_cmd->add_option("--first-step", first_step, "Only records at this step or later")
          ->transform(Integer<int64_t>());
  auto* last_step_opt =
      cat_cmd->add_option("--last-step", last_step, "Only records at this step or earlier")
          ->transform(Integer<int64_t>());
  cat_cmd->add_option("--limit,-n", cat.limit, "Print at most N records")
      ->transform(Integer<int64_t>(0));
  cat_cmd->footer(Footer(
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
      "Exit code 3 also when --run matches no record. With --run, --first-step and\n"
      "--last-step only the blocks that can hold the records asked for are read.",
      "  runstore cat /scratch/sweep loss\n"
      "  runstore cat /scratch/sweep loss --run 42 --format jsonl\n"
      "  runstore cat /scratch/rl reward --run 7 --first-step 1000000 --last-step 1000999\n"
      "  runstore cat /scratch/sweep label --run-str 007 -n 10"));

  // get
  GetOptions get;
  auto* get_cmd = app.add_subcommand("get", "Write one value to a NumPy .npy file");
  get_cmd->add_option("STORE", get.store, "Store directory")->required();
  get_cmd
      ->add_option("RUN", get.run,
                   "Run id: an integer if all of it is one, a string if it does not start like a "
                   "number; one that starts like a number but is not an integer (1x, 1.5) is "
                   "refused: use --run-str for it")
      ->required();
  get_cmd->add_option("NAME", get.name, "Series name")->required();
  get_cmd->add_flag("--run-str", get.run_is_string,
                    "Take RUN as a string even if it looks like an integer");
  get_cmd->add_option("--step,-s", get.step, "Step of the record")
      ->transform(Integer<int64_t>())
      ->capture_default_str();
  get_cmd
      ->add_option("--output,-o", get.out,
                   "Output .npy file ('-' for standard output); not inside the store")
      ->required();
  get_cmd->add_flag("--force,-f", get.force, "Replace the output file if it exists");
  get_cmd->footer(Footer(
      "Writes the value of the record (RUN, NAME, step) to a NumPy .npy file (format 1.0,\n"
      "data aligned to 64 bytes), streaming its bytes from the store without a copy. The file\n"
      "is written under a temporary name and renamed into place when complete; an existing\n"
      "file is replaced only with --force, and a file inside the store is refused.\n"
      "Numeric values keep their dtype and shape ('<f8', '|b1', '<i4', ...). A string value\n"
      "becomes a 0-d '|S<n>' array of its UTF-8 bytes (np.load(f)[()].decode() gives the\n"
      "str); a bytes value becomes a 1-d uint8 ('|u1') array of its length, which keeps\n"
      "trailing NUL bytes that '|S' would drop.",
      "  runstore get /scratch/sweep 42 trace --step 3 -o trace.npy\n"
      "  runstore get /scratch/sweep exp-7 label --run-str -o label.npy\n"
      "  python -c 'import numpy; print(numpy.load(\"trace.npy\").shape)'"));

  // verify
  VerifyOptions verify;
  auto* verify_cmd =
      app.add_subcommand("verify", "Check the checksum of every block of every segment");
  verify_cmd->add_option("STORE", verify.store, "Store directory")->required();
  verify_cmd->add_flag("--json", verify.json,
                       "Print one JSON object {store, ok, segments, blocks, blocks_checked, "
                       "bytes_checked, damaged_segments: [{code, message, file}], and when not "
                       "ok error: {code, message} (the first problem) and problems: [...]}");
  verify_cmd->footer(Footer(
      "Reads every block of every segment and checks every checksum, then prints the number\n"
      "of segments and blocks checked. It goes on past problems and prints every one, each\n"
      "naming the segment file and the offset, then exits with 2. A segment file that cannot\n"
      "be read at all (a damaged header or index, a file that cannot be opened) is one of\n"
      "the problems: verify always reads around it, as --skip-damaged does.",
      "  runstore verify /scratch/sweep && echo clean\n"
      "  runstore verify /scratch/sweep --json | jq .error.message"));

  // export csv
  auto* export_cmd = app.add_subcommand(
      "export", "Export series or experiments to other formats (csv, tar, parquet)");
  export_cmd->require_subcommand(1);
  export_cmd->footer(Footer("",
                            "  runstore export csv /scratch/sweep out/\n"
                            "  runstore export tar /scratch/sweep results.tar.gz\n"
                            "  runstore export parquet /scratch/sweep results.parquet"));
  ExportCsvOptions exp;
  auto* csv_cmd =
      export_cmd->add_subcommand("csv", "Write one CSV file per series into a directory");
  csv_cmd->add_option("STORE", exp.store, "Store directory")->required();
  csv_cmd->add_option("OUTDIR", exp.outdir, "Output directory (not inside the store)")->required();
  csv_cmd->add_option("--names", exp.names, "Only these series (comma-separated or repeated)")
      ->delimiter(',');
  csv_cmd->add_flag("--all,-a", exp.all, "Include reserved '~' series when --names is not given");
  csv_cmd
      ->add_option("--max-columns", exp.max_columns,
                   "Split fixed shapes of up to this many elements into columns (0: never)")
      ->transform(Integer<int>(0))
      ->capture_default_str();
  csv_cmd->footer(Footer(
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

  // export tar / export parquet: the experiment table, through the Python package.
  std::string py_store, py_out;
  int chunk_rows = 10000, compresslevel = 1, row_group_rows = 10000;
  bool py_force = false;
  auto* tar_cmd = export_cmd->add_subcommand(
      "tar", "Write experiments and outcomes as a .tar.gz of CSVs (and .npy) for spreadsheets");
  tar_cmd->add_option("STORE", py_store, "Store directory")->required();
  tar_cmd->add_option("OUT", py_out, "Output .tar.gz (not inside the store)")->required();
  tar_cmd->add_option("--chunk-rows", chunk_rows, "Experiments formatted at a time")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  tar_cmd->add_option("--compresslevel", compresslevel, "gzip level")
      ->transform(Integer<int>(0, 9))
      ->capture_default_str();
  tar_cmd->add_flag("--force,-f", py_force, "Replace OUT if it exists");
  tar_cmd->footer(Footer(
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
  auto* parquet_cmd = export_cmd->add_subcommand(
      "parquet",
      "Write one Parquet file with a row per experiment (pandas, polars, DuckDB, Spark)");
  parquet_cmd->add_option("STORE", py_store, "Store directory")->required();
  parquet_cmd->add_option("OUT", py_out, "Output .parquet (not inside the store)")->required();
  parquet_cmd->add_option("--row-group-rows", row_group_rows, "Rows per row group")
      ->transform(Integer<int>(1))
      ->capture_default_str();
  parquet_cmd->add_flag("--force,-f", py_force, "Replace OUT if it exists");
  parquet_cmd->footer(Footer(
      "Writes one row per experiment in design order: experiment, parameters, status columns\n"
      "and every outcome (scalars as columns, fixed-shape arrays as fixed-size lists), row\n"
      "group by row group in bounded memory. A store without a design writes its records as\n"
      "run, step and one column per series. OUT is written as 'export tar' writes its own\n"
      "(replaced only with --force). Needs the runstore Python package with pyarrow\n"
      "(runstore[arrow]) in $RUNSTORE_PYTHON (default python3).",
      "  runstore export parquet /scratch/sweep results.parquet\n"
      "  duckdb -c \"SELECT state, count(*) FROM 'results.parquet' GROUP BY state\""));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
        std::cerr << unknown;
        return kExitUsage;
      }
    }
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  *command = app.get_subcommands().at(0)->get_name();
  if (*export_cmd) *command += " " + export_cmd->get_subcommands().at(0)->get_name();
  if (*info_cmd) return RunInfo(info);
  if (*ls_cmd) return RunLs(ls);
  if (*cat_cmd) {
    cat.run_set = run_opt->count() > 0 || run_str_opt->count() > 0;
    cat.run_is_string = run_str_opt->count() > 0;
    if (first_step_opt->count() > 0) cat.first_step = first_step;
    if (last_step_opt->count() > 0) cat.last_step = last_step;
    return RunCat(cat);
  }
  if (*get_cmd) return RunGet(get);
  if (*verify_cmd) return RunVerify(verify);
  if (*csv_cmd) return RunExportCsv(exp);
  if (*tar_cmd) {
    std::vector<std::string> extra = {"--chunk-rows", std::to_string(chunk_rows), "--compresslevel",
                                      std::to_string(compresslevel)};
    if (g_skip_damaged) extra.push_back("--skip-damaged");
    return RunExportPython("tar", py_store, py_out, py_force, extra);
  }
  if (*parquet_cmd) {
    std::vector<std::string> extra = {"--row-group-rows", std::to_string(row_group_rows)};
    if (g_skip_damaged) extra.push_back("--skip-damaged");
    return RunExportPython("parquet", py_store, py_out, py_force, extra);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace runstore::cli

int main(int argc, char** argv) {
  using runstore::cli::kExitOther;
  std::string command;
  int rc;
  try {
    rc = runstore::cli::Main(argc, argv, &command);
  } catch (const std::filesystem::filesystem_error& e) {
    rc = runstore::cli::ReportError("error", runstore::Status::IOError(e.what(), e.code().value()));
  } catch (const std::bad_alloc&) {
    std::cerr << "runstore: error: out of memory\n";
    rc = kExitOther;
  } catch (const std::exception& e) {
    std::cerr << "runstore: error: " << e.what() << "\n";
    rc = kExitOther;
  }
  // Every command (and --help) succeeds only if what it printed was written.
  return runstore::cli::FinishStdout(command, rc);
}
