// commands.h: the subcommands of the `runstore` program. Each one's
// registration (registry.h) parses the command line into these option structs;
// each Run* function does the work and returns the process exit code
// (common.h), having printed any error as "runstore: <command>: <status>" on
// stderr.
//
// Which commands may write to a store is said once, in cli/commands.tsv.
#ifndef RUNSTORE_CLI_COMMANDS_H_
#define RUNSTORE_CLI_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/reader.h"
#include "runstore/types.h"

namespace runstore::cli {

struct InfoOptions {
  std::string store;
  bool json = false;
};
int RunInfo(const InfoOptions& o);

struct LsOptions {
  std::string store;
  bool runs = false;
  bool json = false;
  bool all = false;
};
int RunLs(const LsOptions& o);

struct CatOptions {
  std::string store;
  std::string name;
  std::string run;  // filter, parsed with ParseRunArg; see run_set
  bool run_set = false;
  bool run_is_string = false;                    // --run-str
  std::optional<int64_t> first_step, last_step;  // --first-step, --last-step (inclusive)
  std::string format = "text";
  int64_t limit = -1;  // < 0: no limit
};
int RunCat(const CatOptions& o);

struct GetOptions {
  std::string store;
  std::string run;
  bool run_is_string = false;
  std::string name;
  int64_t step = 0;
  std::string out;     // "-" for stdout
  bool force = false;  // replace an existing `out`
};
int RunGet(const GetOptions& o);

struct VerifyOptions {
  std::string store;
  bool json = false;
};
int RunVerify(const VerifyOptions& o);

struct ExportCsvOptions {
  std::string store;
  std::string outdir;
  std::vector<std::string> names;  // empty: every series
  bool all = false;                // include reserved '~' series
  int max_columns = 16;            // split fixed shapes up to this many elements
};
int RunExportCsv(const ExportCsvOptions& o);

// One record of a ScanBatch, with its value's bytes (valid while the batch
// lives).
struct Row {
  bool run_is_string = false;
  int64_t run_int = 0;
  std::string_view run_str;
  int64_t step = 0;
  std::span<const int64_t> shape;
  const char* data = nullptr;
  size_t nbytes = 0;
};

// Row `i` of `batch`.
Row GetRow(const ScanBatch& batch, size_t i);

// A file name for a series: bytes outside [A-Za-z0-9._-] (and a leading '.')
// become %XX; names whose escape exceeds 200 bytes are cut and end in '~' and
// a 64-bit hash of the full name. Distinct names give distinct file names.
std::string SafeFileName(std::string_view series_name);

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_COMMANDS_H_
