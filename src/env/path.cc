#include "env/path.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace runstore {

std::string NormalizePath(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (const char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out.push_back(c);
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string ParentDir(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  const size_t slash = p.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(p.substr(0, slash));
}

std::string ResourceText(int err) {
  switch (err) {
    case EMFILE: {
      struct rlimit rl;
      std::string limit;
      if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        limit = ", " + std::to_string(rl.rlim_cur) + " (ulimit -n)";
      }
      return "out of file descriptors: the process has as many open as its limit allows" + limit;
    }
    case ENFILE:
      return "out of file descriptors: the system's table of open files is full";
    case ENOMEM:
      return "out of memory, or of memory mappings (vm.max_map_count)";
    case EAGAIN:
      return "a resource is temporarily exhausted (locked memory, processes)";
    default:
      return {};
  }
}

Status ErrnoStatus(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status(StatusCode::kNotFound, std::move(msg), err);
    case EEXIST:
      return Status(StatusCode::kAlreadyExists, std::move(msg), err);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
      // The process ran out of something; the file is not at fault.
      return Status(StatusCode::kResourceExhausted, msg + " (" + ResourceText(err) + ")", err);
    default:
      return Status(StatusCode::kIOError, std::move(msg), err);
  }
}

Status ShorterThanCopy(const std::string& from, uint64_t size, uint64_t length) {
  return Status::IOError(from + ": has " + std::to_string(size) + " bytes, fewer than the " +
                         std::to_string(length) + " to copy");
}

Status ClosedFileStatus(const std::string& path, const char* op) {
  return Status::FailedPrecondition(path + ": " + op + ": file is closed");
}

Status CheckWriteAt(const std::string& path, uint64_t offset, uint64_t n, uint64_t synced,
                    uint64_t size) {
  if (offset >= synced && offset <= size && n <= size - offset) return Status::OK();
  return Status::InvalidArgument(
      path + ": write of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
      ": only bytes appended since the last sync (offsets " + std::to_string(synced) + " to " +
      std::to_string(size) + ") may be rewritten");
}

}  // namespace runstore
