#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace runstore::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kCorruption:
      return kExitCorruption;
    case StatusCode::kNotFound:
      return kExitNotFound;
    case StatusCode::kIOError:
      return kExitIOError;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotSupported:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return kExitOther;
    case StatusCode::kResourceExhausted:
      return kExitResource;
  }
  return kExitOther;
}

std::string ExitCodeHelp() {
  return "Exit codes:\n"
         "  0  success\n"
         "  1  usage error (bad command line)\n"
         "  2  corruption: a checksum or structure check failed (the message names the\n"
         "     file and offset)\n"
         "  3  not found: no store at the path, or no such series, run or step\n"
         "  4  I/O error reading the store or writing the output (standard output too)\n"
         "  5  other errors: invalid argument (e.g. an output inside the store), an output\n"
         "     that exists (without --force), unsupported (newer) format version, ...\n"
         "  6  out of a resource: file descriptors (ulimit -n) or memory; nothing is wrong\n"
         "     with the store, and the command may succeed with more of it\n";
}

int ReportError(std::string_view command, const Status& status) {
  std::cout.flush();
  std::cerr << "runstore: ";
  if (!command.empty()) std::cerr << command << ": ";
  std::cerr << Printable(status.ToString()) << "\n";
  return ExitCodeFor(status);
}

int ReportUsageError(std::string_view command, std::string_view message) {
  std::cout.flush();
  std::cerr << "runstore: " << command << ": " << Printable(message) << "\n"
            << "Run with --help for more information.\n";
  return kExitUsage;
}

int FinishStdout(std::string_view command, int rc) {
  // std::cout writes through stdout's buffer (sync_with_stdio): flushing it
  // flushes stdout. A write that failed earlier left the error flags set, and
  // errno is what it was then only if nothing has failed since.
  errno = 0;
  std::cout.flush();
  int e = errno;
  if (std::fflush(stdout) != 0) e = errno;
  const bool failed = !std::cout || std::ferror(stdout) != 0;
  if (!failed || rc != kExitOk) return rc;  // a failed command has reported its error
  std::string message = "standard output: write failed";
  if (e != 0) message += std::string(": ") + std::strerror(e);
  return ReportError(command, Status::IOError(message, e));
}

bool g_skip_damaged = false;

Result<std::unique_ptr<Store>> OpenStoreReadOnly(const std::string& path, bool skip_damaged) {
  StoreOptions options;
  options.read_only = true;
  options.create_if_missing = false;
  options.on_damaged = skip_damaged ? OnDamaged::kSkip : OnDamaged::kFail;
  return Store::Open(path, options);
}

bool IsDamagedSegmentError(const Status& s) {
  if (s.code() != StatusCode::kCorruption && s.code() != StatusCode::kIOError) return false;
  const std::string& m = s.message();
  const size_t at = m.find("segments/");
  return at != std::string::npos && m.find(".rss", at) != std::string::npos;
}

std::string ResourceText(const Status& s) {
  if (s.code() != StatusCode::kResourceExhausted) return {};
  switch (s.sys_errno()) {
    case EMFILE:
      return "out of file descriptors (the process's limit, ulimit -n)";
    case ENFILE:
      return "out of file descriptors (the system's table of open files is full)";
    case ENOMEM:
      return "out of memory or of memory mappings";
    default:
      return "out of a resource";
  }
}

std::string DamageText(const DamagedSegment& d) {
  std::string_view m = d.status.message();
  // The message starts with the file, relative to the store or as a full path.
  if (const size_t at = m.find(d.file + ": ");
      at != std::string_view::npos && (at == 0 || m[at - 1] == '/') &&
      m.substr(0, at).find(' ') == std::string_view::npos) {
    m.remove_prefix(at + d.file.size() + 2);
  }
  return std::string(StatusCodeName(d.status.code())) + ": " + std::string(m);
}

int ReportOpenError(std::string_view command, const Status& status) {
  const int rc = ReportError(command, status);
  if (!g_skip_damaged && IsDamagedSegmentError(status)) {
    std::cerr << "runstore: " << command
              << ": to read the other segments, leaving this one out, run with --skip-damaged\n";
  }
  return rc;
}

std::unique_ptr<Store> OpenStoreForCommand(std::string_view command, const std::string& path,
                                           int* rc) {
  auto store = OpenStoreReadOnly(path, g_skip_damaged);
  if (!store.ok()) {
    *rc = ReportOpenError(command, store.status());
    return nullptr;
  }
  const auto& damaged = (*store)->GetSnapshot()->DamagedSegments();
  if (!damaged.empty()) {
    std::cout.flush();
    for (const DamagedSegment& d : damaged) {
      std::cerr << Printable("runstore: left out damaged segment " + d.file + ": " + DamageText(d))
                << "\n";
    }
  }
  *rc = kExitOk;
  return std::move(store).value();
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A digit, a sign or '.' before a digit, or a space: what a reader takes for
// the start of a number.
bool StartsLikeANumber(std::string_view s) {
  if (s.empty()) return false;
  if (IsDigit(s[0]) || std::isspace(static_cast<unsigned char>(s[0]))) return true;
  size_t i = 0;
  if (s[i] == '-' || s[i] == '+') ++i;
  if (i < s.size() && s[i] == '.') ++i;
  return i > 0 && i < s.size() && IsDigit(s[i]);
}

}  // namespace

Result<RunId> ParseRunArg(const std::string& text, bool force_string, std::string_view option) {
  if (force_string) return RunId(text);
  int64_t v = 0;
  switch (ParseDecimal(text, &v)) {
    case DecimalText::kOk:
      return RunId(v);
    case DecimalText::kOutOfRange:
      return Status::InvalidArgument(std::string(option) + " '" + text +
                                     "' does not fit a 64-bit signed integer; for the string "
                                     "run id '" +
                                     text + "', use --run-str");
    case DecimalText::kMalformed:
      break;
  }
  if (StartsLikeANumber(text)) {
    return Status::InvalidArgument(std::string(option) + " '" + text +
                                   "' is not an integer (a run id that starts like a number "
                                   "must be one); for the string run id '" +
                                   text + "', use --run-str");
  }
  return RunId(text);
}

Status CheckOutsideStore(const std::string& store, const std::string& out) {
  namespace fs = std::filesystem;
  // weakly_canonical resolves the symlinks of the part that exists, and the
  // rest lexically ('..' included); a trailing '/' leaves an empty last part.
  auto resolve = [](const std::string& p, fs::path* r) {
    std::error_code ec;
    *r = fs::weakly_canonical(fs::absolute(p, ec), ec);
    if (!ec && r->filename().empty()) *r = r->parent_path();
    return !ec;
  };
  fs::path s, o;
  if (!resolve(store, &s) || !resolve(out, &o)) return Status::OK();  // opening will say why
  const auto [si, oi] = std::mismatch(s.begin(), s.end(), o.begin(), o.end());
  if (si != s.end()) return Status::OK();
  std::string message = out + ": refusing to write inside the store " + store;
  fs::path plain = fs::absolute(out).lexically_normal();
  if (plain.filename().empty()) plain = plain.parent_path();
  if (o != plain) {
    message += " (" + out + " resolves to " + o.string() + ")";
  }
  return Status::InvalidArgument(message + "; write it elsewhere");
}

Status CheckMayCreate(const std::string& path, bool force) {
  if (force) return Status::OK();
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    return Status::AlreadyExists(path + " exists; use --force (-f) to replace it");
  }
  return Status::OK();
}

Status PlaceFile(const std::string& tmp, const std::string& path, bool replace) {
  auto failed = [&](int e) {
    return Status::IOError(path + ": cannot rename " + tmp + " into place: " + std::strerror(e), e);
  };
  if (!replace) {
    if (link(tmp.c_str(), path.c_str()) == 0) {
      unlink(tmp.c_str());
      return Status::OK();
    }
    const int e = errno;
    if (e == EEXIST) return CheckMayCreate(path, false);
    if (e != EPERM && e != EOPNOTSUPP && e != ENOSYS) return failed(e);
    RUNSTORE_RETURN_IF_ERROR(CheckMayCreate(path, false));  // no hard links here
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return failed(errno);
  return Status::OK();
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

Output::Output() : Output(stdout, "standard output", false) {}

Output::Output(FILE* f, std::string path, bool owned)
    : f_(f), path_(std::move(path)), owned_(owned) {}

Output::~Output() {
  if (owned_ && f_ != nullptr) std::fclose(f_);
}

Result<std::unique_ptr<Output>> Output::Create(const std::string& path,
                                               const std::string& display) {
  const std::string& name = display.empty() ? path : display;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int e = errno;
    return Status::IOError(name + ": cannot create: " + std::strerror(e), e);
  }
  return std::unique_ptr<Output>(new Output(f, name, true));
}

void Output::Fail(const char* what) {
  if (!status_.ok()) return;
  const int e = errno;
  status_ = Status::IOError(path_ + ": " + what + ": " + std::strerror(e), e);
}

void Output::FlushBuffer() {
  if (!buf_.empty() && status_.ok()) {
    if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) Fail("write failed");
  }
  bytes_ += buf_.size();
  buf_.clear();
}

void Output::WriteDirect(const char* data, size_t n) {
  FlushBuffer();
  if (status_.ok() && n > 0 && std::fwrite(data, 1, n, f_) != n) Fail("write failed");
  bytes_ += n;
}

Status Output::Close() {
  FlushBuffer();
  if (f_ != nullptr) {
    if (std::fflush(f_) != 0) Fail("write failed");
    if (owned_) {
      if (std::fclose(f_) != 0) Fail("close failed");
      f_ = nullptr;
    }
  }
  return status_;
}

}  // namespace runstore::cli
