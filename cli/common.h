// common.h: pieces shared by the runstore CLI's commands: the one mapping from
// StatusCode to exit code, error reporting, opening a store read-only, parsing
// run ids and integers, the checks on output paths, buffered output with error
// checks, and byte counts for humans.
//
// Thread safety: none of this is meant for use from several threads.
#ifndef RUNSTORE_CLI_COMMON_H_
#define RUNSTORE_CLI_COMMON_H_

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "runstore/store.h"
#include "runstore/text.h"

namespace runstore::cli {

// The text formats are the library's (runstore/text.h), shared with the
// Python package's exports.
using text::AppendBase64;
using text::AppendCsvCell;
using text::AppendElement;
using text::AppendJsonString;
using text::AppendPrintable;
using text::AppendRun;
using text::AppendValue;
using text::JsonPrintable;
using text::OutFormat;
using text::Printable;
using text::ShapeText;

// Exit codes of the `runstore` program (documented in every --help).
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,       // bad command line (reported by CLI11)
  kExitCorruption = 2,  // StatusCode::kCorruption
  kExitNotFound = 3,    // StatusCode::kNotFound: store, series, run or key
  kExitIOError = 4,     // StatusCode::kIOError, also failures writing output
  kExitOther = 5,       // InvalidArgument, NotSupported, FailedPrecondition, ...
  kExitResource = 6,    // StatusCode::kResourceExhausted: out of descriptors or memory
};

// The only place where library status codes become exit codes.
int ExitCodeFor(const Status& status);

// The text appended to every subcommand's --help.
std::string ExitCodeHelp();

// Prints "runstore: <command>: <status>" to stderr and returns its exit code
// ("runstore: <status>" for an empty command). The message, which may name
// series, runs and files of a store, is written through Printable, as is
// every string of a store that the commands print as text (cli/README.md,
// "Strings from a store").
int ReportError(std::string_view command, const Status& status);

// Prints "runstore: <command>: <message>" and the hint to --help to stderr and
// returns kExitUsage: for a command line that parsed but makes no sense.
int ReportUsageError(std::string_view command, std::string_view message);

// Flushes stdout and returns `rc`, or, if anything written to stdout was lost
// (a full disk, a closed descriptor: `runstore ls STORE > /dev/full`) and rc
// is kExitOk, reports an IOError and returns kExitIOError. Called once, when
// the command is done.
int FinishStdout(std::string_view command, int rc);

// Puts the complete temporary file `tmp` at `path`: renamed over whatever is
// there if `replace`, else linked, which fails with AlreadyExists if `path`
// appeared since CheckMayCreate (on file systems without hard links: renamed
// after one more check), then unlinked. IOError naming both otherwise.
Status PlaceFile(const std::string& tmp, const std::string& path, bool replace);

// Set by the global flag --skip-damaged (main.cc): every command opens the
// store with OnDamaged::kSkip.
extern bool g_skip_damaged;

// Opens the store at `path` read-only; never creates or writes anything.
// With skip_damaged, segments that cannot be read are left out
// (OnDamaged::kSkip) instead of failing the open.
Result<std::unique_ptr<Store>> OpenStoreReadOnly(const std::string& path, bool skip_damaged);

// How a command opens its store: OpenStoreReadOnly with g_skip_damaged. Each
// segment left out is reported on stderr, one line each:
//   runstore: left out damaged segment segments/w-00000001.rss: Corruption: offset 0: ...
// On failure the error is reported (ReportOpenError) and *rc set to its exit
// code; the result is then null.
std::unique_ptr<Store> OpenStoreForCommand(std::string_view command, const std::string& path,
                                           int* rc);

// ReportError for an error opening a store, followed, when it is the error of
// one damaged or unreadable segment file and --skip-damaged was not given, by
// a line saying that --skip-damaged reads the other segments.
int ReportOpenError(std::string_view command, const Status& status);

// Whether `s`, from opening a store, is the error of one segment file that
// could not be read (Corruption or IOError naming a segments/*.rss file):
// what OnDamaged::kSkip leaves out instead.
bool IsDamagedSegmentError(const Status& s);

// What ran out, for a ResourceExhausted status: "out of file descriptors"
// (EMFILE, ENFILE), "out of memory" (ENOMEM), ...; empty for another status.
std::string ResourceText(const Status& s);

// "Corruption: offset 0: segment header is damaged": the segment's error
// without the file name that DamagedSegment::file already gives.
std::string DamageText(const DamagedSegment& d);

// A run id from the command line (`option` names it in messages: "--run",
// "RUN"). With force_string, `text` as a string. Otherwise an integer when all
// of `text` is one (ParseDecimal), a string when it does not start like a
// number (a digit, a sign or '.' before a digit, a space), and InvalidArgument
// when it starts like one but is not an int64 ("1x", "1.5", "0x10", " 1",
// "99999999999999999999"): taken as a string it would select another run
// than the one meant, or none. The message says to use --run-str for a string.
Result<RunId> ParseRunArg(const std::string& text, bool force_string, std::string_view option);

// How a command-line integer parsed: decimal digits with an optional '-', and
// nothing else (no '+', spaces, hex or octal prefixes, digit separators).
enum class DecimalText { kOk, kMalformed, kOutOfRange };

template <typename T>
DecimalText ParseDecimal(std::string_view text, T* out) {
  if (text.empty() || text.front() == '+') return DecimalText::kMalformed;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  if (ec == std::errc::result_out_of_range && p == end) return DecimalText::kOutOfRange;
  if (ec != std::errc() || p != end) return DecimalText::kMalformed;
  return DecimalText::kOk;
}

// InvalidArgument naming both paths if `out`, with symlinks and relative parts
// resolved, is the store directory or lies inside it: no command writes into
// the store it reads (an export into it would be read back, and `get -o
// STORE/RUNSTORE` would destroy the store's marker).
Status CheckOutsideStore(const std::string& store, const std::string& out);

// AlreadyExists if `path` exists (even as a dangling symlink) and !force: the
// commands that write a file refuse to replace one unless --force, as zstd
// and gzip do.
Status CheckMayCreate(const std::string& path, bool force);

// 1536 -> "1.5 KiB"; exact below 1 KiB.
std::string HumanBytes(uint64_t bytes);

// Buffered output to stdout or a file that reports write errors as IOError
// (with errno) instead of losing them.
class Output {
 public:
  // Writes to stdout; not closed.
  Output();
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Creates (truncates) `path` for writing; IOError if that fails. Messages
  // name `display` (default: `path`), e.g. the final name of a temporary.
  static Result<std::unique_ptr<Output>> Create(const std::string& path,
                                                const std::string& display = "");

  void Write(std::string_view s) {
    buf_.append(s);
    if (buf_.size() >= kFlushBytes) FlushBuffer();
  }
  // Writes `n` bytes straight to the file, bypassing the buffer (after
  // flushing it), for large zero-copy payloads.
  void WriteDirect(const char* data, size_t n);
  // Total bytes handed to Write/WriteDirect.
  uint64_t bytes_written() const { return bytes_ + buf_.size(); }
  // Flushes, and closes a file (without fsync). Returns the first error seen.
  Status Close();
  // The first error seen so far (writes after an error are dropped).
  const Status& status() const { return status_; }

 private:
  static constexpr size_t kFlushBytes = 1 << 20;
  Output(FILE* f, std::string path, bool owned);
  void FlushBuffer();
  void Fail(const char* what);

  FILE* f_;
  std::string path_;
  bool owned_;
  std::string buf_;
  uint64_t bytes_ = 0;
  Status status_;
};

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_COMMON_H_
