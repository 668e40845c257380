// An Env that keeps every file in memory, for fast tests.
//
// It behaves like a POSIX file system where tests can observe the
// difference: a file is an inode shared by every handle (an open reader sees
// later appends, and keeps the old bytes after an unlink or a rename over
// it); directories exist only when created; errors carry the errno the
// kernel would give and map to the same codes as the POSIX env. Paths are
// compared after collapsing "//" and stripping a trailing '/'; "." and ".."
// components are not interpreted. Sync does nothing: memory never loses
// power (wrap the env in a FaultInjectionEnv for that).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "env/path.h"
#include "runstore/env.h"

namespace runstore {
namespace {

// The contents of one file. Shared by the name in the directory tree and by
// every open handle, like an inode.
struct FileState {
  mutable std::mutex mu;
  std::string data;  // guarded by mu
};

// True if `path` lies strictly inside directory `dir` (both normalised).
bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

class MemWritableFile final : public WritableFile {
 public:
  MemWritableFile(std::string path, std::shared_ptr<FileState> file)
      : path_(std::move(path)), file_(std::move(file)) {}

  using WritableFile::Append;  // the one-piece overload
  Status Append(std::span<const std::string_view> pieces) override {
    if (file_ == nullptr) return ClosedFileStatus(path_, "append");
    std::lock_guard<std::mutex> lock(file_->mu);
    for (const std::string_view piece : pieces) {
      file_->data.append(piece);
      size_ += piece.size();
    }
    return Status::OK();
  }

  Status WriteAt(uint64_t offset, std::string_view data) override {
    if (file_ == nullptr) return ClosedFileStatus(path_, "write");
    RUNSTORE_RETURN_IF_ERROR(CheckWriteAt(path_, offset, data.size(), synced_.load(), size_));
    std::lock_guard<std::mutex> lock(file_->mu);
    file_->data.replace(static_cast<size_t>(offset), data.size(), data);
    return Status::OK();
  }

  Status Sync() override { return SyncPrefix(size_); }

  Status SyncPrefix(uint64_t length) override {
    if (file_ == nullptr) return ClosedFileStatus(path_, "sync");
    RaiseSynced(&synced_, length);
    return Status::OK();
  }

  Status Close() override {
    if (file_ == nullptr) return ClosedFileStatus(path_, "close");
    file_.reset();
    return Status::OK();
  }

  uint64_t Size() const override { return size_; }

 private:
  const std::string path_;
  std::shared_ptr<FileState> file_;  // null once closed
  uint64_t size_ = 0;
  std::atomic<uint64_t> synced_{0};  // below it every byte is durable
};

// Owns a copy of the mapped prefix, so its bytes stay fixed however the file
// changes afterwards.
class MemMappedRegion final : public MappedRegion {
 public:
  explicit MemMappedRegion(std::string bytes) : bytes_(std::move(bytes)) {
    data_ = bytes_.data();
    size_ = bytes_.size();
  }

 private:
  const std::string bytes_;
};

class MemRandomAccessFile final : public RandomAccessFile {
 public:
  MemRandomAccessFile(std::string path, std::shared_ptr<FileState> file)
      : path_(std::move(path)), file_(std::move(file)) {}

  Status Read(uint64_t offset, size_t n, char* scratch, std::string_view* result) const override {
    std::lock_guard<std::mutex> lock(file_->mu);
    const std::string& data = file_->data;
    size_t len = 0;
    if (offset < data.size()) len = std::min<uint64_t>(n, data.size() - offset);
    if (len > 0) std::memcpy(scratch, data.data() + offset, len);
    *result = std::string_view(scratch, len);
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    std::lock_guard<std::mutex> lock(file_->mu);
    return static_cast<uint64_t>(file_->data.size());
  }

  Result<std::shared_ptr<const MappedRegion>> Map(uint64_t length) const override {
    std::lock_guard<std::mutex> lock(file_->mu);
    if (length > file_->data.size()) {
      return Status::InvalidArgument(path_ + ": map " + std::to_string(length) +
                                     " bytes: file has only " + std::to_string(file_->data.size()));
    }
    return std::shared_ptr<const MappedRegion>(
        new MemMappedRegion(file_->data.substr(0, static_cast<size_t>(length))));
  }

 private:
  const std::string path_;
  const std::shared_ptr<FileState> file_;
};

class MemEnv final : public Env {
 public:
  MemEnv() : dirs_{"/", "."} {}

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& raw_path,
                                                        bool exclusive) override {
    const std::string path = NormalizePath(raw_path);
    const char* op = exclusive ? ": create exclusively" : ": open for writing";
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(path)) return ErrnoStatus(path + op, exclusive ? EEXIST : EISDIR);
    RUNSTORE_RETURN_IF_ERROR(CheckParentLocked(path, op));
    std::shared_ptr<FileState>& file = files_[path];
    if (file == nullptr) {
      file = std::make_shared<FileState>();
    } else if (exclusive) {
      return ErrnoStatus(path + op, EEXIST);
    } else {
      // O_TRUNC: the same inode, emptied, as every open reader will see.
      std::lock_guard<std::mutex> file_lock(file->mu);
      file->data.clear();
    }
    return std::unique_ptr<WritableFile>(new MemWritableFile(path, file));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = files_.find(path);
    if (it == files_.end()) {
      return ErrnoStatus(path + ": open for reading", dirs_.count(path) ? EISDIR : ENOENT);
    }
    return std::unique_ptr<RandomAccessFile>(new MemRandomAccessFile(path, it->second));
  }

  Status FileExists(const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.count(path) || dirs_.count(path)) return Status::OK();
    return ErrnoStatus(path + ": access", ENOENT);
  }

  Result<bool> IsDirectory(const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(path)) return true;
    if (files_.count(path)) return false;
    return ErrnoStatus(path + ": stat", ENOENT);
  }

  // No links here: a path's identity is its spelling with "." and ".."
  // resolved.
  Result<FileId> GetFileId(const std::string& raw_path) override {
    std::vector<std::string_view> parts;
    const std::string normal = NormalizePath(raw_path);
    std::string_view rest = normal;
    while (!rest.empty()) {
      const size_t slash = rest.find('/');
      const std::string_view part = rest.substr(0, slash);
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
      if (part.empty() || part == ".") continue;
      if (part == "..") {
        if (!parts.empty()) parts.pop_back();
        continue;
      }
      parts.push_back(part);
    }
    std::string path = normal.starts_with('/') ? "" : ".";
    for (std::string_view part : parts) path += "/" + std::string(part);
    if (path.empty()) path = "/";
    const std::string key = path.starts_with("./") ? path.substr(2) : path;
    std::lock_guard<std::mutex> lock(mu_);
    if (!files_.count(key) && !dirs_.count(key) && key != "/" && key != ".") {
      return ErrnoStatus(key + ": stat", ENOENT);
    }
    return FileId{0, std::hash<std::string>()(key)};
  }

  Result<std::vector<std::string>> GetChildren(const std::string& raw_dir) override {
    const std::string dir = NormalizePath(raw_dir);
    std::lock_guard<std::mutex> lock(mu_);
    if (!dirs_.count(dir))
      return ErrnoStatus(dir + ": opendir", files_.count(dir) ? ENOTDIR : ENOENT);
    std::vector<std::string> names;
    const auto add_children = [&](const auto& paths) {
      for (const auto& entry : paths) {
        const std::string& path = KeyOf(entry);
        if (path != dir && ParentDir(path) == dir)
          names.push_back(path.substr(path.rfind('/') + 1));
      }
    };
    add_children(files_);
    add_children(dirs_);
    return names;
  }

  Result<uint64_t> GetFileSize(const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = files_.find(path);
    if (it == files_.end()) {
      // stat(2) reports some size for a directory; nothing here relies on it.
      if (dirs_.count(path)) return uint64_t{0};
      return ErrnoStatus(path + ": stat", ENOENT);
    }
    std::lock_guard<std::mutex> file_lock(it->second->mu);
    return static_cast<uint64_t>(it->second->data.size());
  }

  Status CreateDir(const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(path) || files_.count(path)) return ErrnoStatus(path + ": mkdir", EEXIST);
    RUNSTORE_RETURN_IF_ERROR(CheckParentLocked(path, ": mkdir"));
    dirs_.insert(path);
    return Status::OK();
  }

  Status RemoveFile(const std::string& raw_path) override {
    const std::string path = NormalizePath(raw_path);
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.erase(path) == 0)
      return ErrnoStatus(path + ": unlink", dirs_.count(path) ? EISDIR : ENOENT);
    return Status::OK();
  }

  Status RenameFile(const std::string& raw_from, const std::string& raw_to) override {
    const std::string from = NormalizePath(raw_from);
    const std::string to = NormalizePath(raw_to);
    const std::string op = ": rename to " + to;
    std::lock_guard<std::mutex> lock(mu_);
    const bool from_is_dir = dirs_.count(from) > 0;
    if (!from_is_dir && !files_.count(from)) return ErrnoStatus(from + op, ENOENT);
    if (!dirs_.count(ParentDir(to)))
      return ErrnoStatus(from + op, files_.count(ParentDir(to)) ? ENOTDIR : ENOENT);
    if (from == to) return Status::OK();
    if (!from_is_dir) {
      if (dirs_.count(to)) return ErrnoStatus(from + op, EISDIR);
      // Any reader of the old `to` keeps its inode, as after rename(2).
      auto node = files_.extract(from);
      node.key() = to;
      files_.erase(to);
      files_.insert(std::move(node));
      return Status::OK();
    }
    // A directory: `to` must be absent or an empty directory, and not inside `from`.
    if (files_.count(to)) return ErrnoStatus(from + op, ENOTDIR);
    if (IsUnder(to, from)) return ErrnoStatus(from + op, EINVAL);
    if (dirs_.count(to) && HasChildrenLocked(to)) return ErrnoStatus(from + op, ENOTEMPTY);
    dirs_.erase(to);
    const auto move_tree = [&](auto& paths) {
      std::vector<std::string> moved;
      for (const auto& entry : paths) {
        const std::string& path = KeyOf(entry);
        if (path == from || IsUnder(path, from)) moved.push_back(path);
      }
      for (const std::string& path : moved) {
        auto node = paths.extract(path);
        SetKey(node, to + path.substr(from.size()));
        paths.insert(std::move(node));
      }
    };
    move_tree(files_);
    move_tree(dirs_);
    return Status::OK();
  }

  Status SyncDir(const std::string& raw_dir) override {
    const std::string dir = NormalizePath(raw_dir);
    std::lock_guard<std::mutex> lock(mu_);
    if (!dirs_.count(dir)) {
      return ErrnoStatus(dir + ": open directory for sync", files_.count(dir) ? ENOTDIR : ENOENT);
    }
    return Status::OK();
  }

  Status CheckWritableDir(const std::string& raw_dir) override {
    const std::string dir = NormalizePath(raw_dir);
    std::lock_guard<std::mutex> lock(mu_);
    if (dirs_.count(dir)) return Status::OK();
    return ErrnoStatus(dir + ": check writable", files_.count(dir) ? ENOTDIR : ENOENT);
  }

  int64_t NowNanos() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

 private:
  static const std::string& KeyOf(const std::string& path) { return path; }
  template <typename V>
  static const std::string& KeyOf(const std::pair<const std::string, V>& entry) {
    return entry.first;
  }
  template <typename Node>
  static void SetKey(Node& node, std::string key) {
    if constexpr (requires { node.key(); }) {
      node.key() = std::move(key);
    } else {
      node.value() = std::move(key);
    }
  }

  // NotFound unless the directory that would hold `path` exists.
  Status CheckParentLocked(const std::string& path, const char* op) const {
    const std::string parent = ParentDir(path);
    if (path.empty()) return ErrnoStatus(std::string("(empty path)") + op, ENOENT);
    if (dirs_.count(parent)) return Status::OK();
    return ErrnoStatus(path + op, files_.count(parent) ? ENOTDIR : ENOENT);
  }

  bool HasChildrenLocked(const std::string& dir) const {
    const auto under = [&](const auto& paths) {
      return std::any_of(paths.begin(), paths.end(),
                         [&](const auto& entry) { return IsUnder(KeyOf(entry), dir); });
    };
    return under(files_) || under(dirs_);
  }

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<FileState>> files_;  // guarded by mu_
  // Every directory that exists; a path is never in both files_ and dirs_.
  std::set<std::string> dirs_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Env> NewMemEnv() { return std::make_unique<MemEnv>(); }

}  // namespace runstore
