#include "common.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
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
         "  4  I/O error reading the store or writing the output\n"
         "  5  other errors: invalid argument, unsupported (newer) format version, ...\n";
}

int ReportError(std::string_view command, const Status& status) {
  std::cout.flush();
  std::cerr << "runstore: " << command << ": " << status.ToString() << "\n";
  return ExitCodeFor(status);
}

Result<std::unique_ptr<Store>> OpenStoreReadOnly(const std::string& path) {
  StoreOptions options;
  options.read_only = true;
  options.create_if_missing = false;
  return Store::Open(path, options);
}

RunId ParseRunArg(const std::string& text, bool force_string) {
  if (!force_string && !text.empty()) {
    int64_t v = 0;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (ec == std::errc() && p == end) return RunId(v);
  }
  return RunId(text);
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

uint32_t ReadMarkerFormatVersion(const std::string& store_path) {
  std::ifstream in(store_path + "/RUNSTORE");
  std::string line;
  while (std::getline(in, line)) {
    constexpr std::string_view kKey = "format_version ";
    if (line.rfind(kKey, 0) == 0) {
      uint32_t v = 0;
      const char* b = line.data() + kKey.size();
      std::from_chars(b, line.data() + line.size(), v);
      return v;
    }
  }
  return 0;
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
