// The POSIX Env: every file-system call runstore makes on a real machine.
//
// Errors name the path (and the offset, for reads), the operation and
// strerror(errno), and carry errno as sys_errno. ENOENT maps to NotFound,
// EEXIST to AlreadyExists, everything else to IOError, so callers can branch
// on the code without parsing errno themselves.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env/page_cache.h"
#include "env/path.h"
#include "runstore/env.h"
#include "util/mutex.h"

namespace runstore {
namespace {

// "a FIFO", "a socket", ...: what a path is, for the error that refuses it.
std::string FileKindName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// The error for a file of the store that is not a regular file: IOError
// "<path>: is a FIFO, not a regular file" (errno EISDIR for a directory,
// ELOOP for a symbolic link, 0 otherwise). A store's files are all regular
// files that runstore made; opening anything else could block for ever (a
// FIFO), read without end (a device) or read a file outside the store (a
// link).
Status NotRegularFile(const std::string& path, mode_t mode) {
  const int err = S_ISDIR(mode) ? EISDIR : S_ISLNK(mode) ? ELOOP : 0;
  std::string msg = path + ": is " + FileKindName(mode) + ", not a regular file";
  if (S_ISLNK(mode)) msg += " (runstore never follows a link in place of a store's file)";
  return Status::IOError(std::move(msg), err);
}

// The error of an open(2) of `path` that failed with `err`: for the errors
// a special file gives (ELOOP: a symbolic link under O_NOFOLLOW; ENXIO: a
// socket, or a FIFO without a reader; EISDIR; ETXTBSY...), what the path is
// instead, so that the message says "is a socket", not "No such device".
Status OpenError(const std::string& path, const char* op, int err) {
  struct stat st;
  if (err != ENOENT && err != EACCES && err != EMFILE && err != ENFILE && err != ENOMEM &&
      ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return NotRegularFile(path, st.st_mode);
  }
  return ErrnoStatus(path + ": " + op, err);
}

// Opens `path` with `flags` (to which O_CLOEXEC, O_NOFOLLOW and O_NONBLOCK
// are added, so that neither a link nor a FIFO is ever followed or waited
// on) and checks with fstat that it is a regular file; O_NONBLOCK is then
// cleared (it means nothing for a regular file, but is not left behind).
// Every file the POSIX Env opens goes through here.
Result<int> OpenRegular(const std::string& path, int flags, const char* op) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return OpenError(path, op, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(path + ": " + op, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegularFile(path, st.st_mode);
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

FileInfo InfoOfStat(const struct stat& st) {
  return FileInfo{static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
                  static_cast<uint64_t>(st.st_ino)};
}

// `context` names the path and the operation, e.g. "/d/x.rss: open for writing".

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);  // An error here has nobody to report to.
  }

  using WritableFile::Append;  // the one-piece overload
  Status Append(std::span<const std::string_view> pieces) override {
    if (fd_ < 0) return ClosedFileStatus(path_, "append");
    uint64_t at = size_;
    for (std::string_view piece : pieces) {
      if (piece.size() >= kLargePieceBytes) NoteLarge(at, at + piece.size());
      at += piece.size();
    }
    // Gather into batches of at most IOV_MAX pieces; a short write (disk
    // nearly full, signal) resumes where the kernel stopped, part way through
    // a piece if need be.
    std::vector<struct iovec> iov;
    iov.reserve(std::min<size_t>(pieces.size(), IOV_MAX));
    size_t next = 0;  // first piece not yet in a batch
    while (next < pieces.size()) {
      iov.clear();
      while (next < pieces.size() && iov.size() < IOV_MAX) {
        const std::string_view piece = pieces[next++];
        if (piece.empty()) continue;
        iov.push_back({const_cast<char*>(piece.data()), piece.size()});
      }
      size_t first = 0;  // first iovec of the batch not fully written
      while (first < iov.size()) {
        // At most one writeback window per call (a longer first piece is cut
        // there), so that the disk starts on each window while the next is
        // copied into the page cache.
        size_t count = 0, bytes = 0;
        while (first + count < iov.size() &&
               (count == 0 || bytes + iov[first + count].iov_len <= kWritebackBytes)) {
          bytes += iov[first + count++].iov_len;
        }
        struct iovec& end = iov[first + count - 1];
        const size_t cut = bytes > kWritebackBytes ? bytes - kWritebackBytes : 0;
        end.iov_len -= cut;
        const ssize_t n = ::writev(fd_, iov.data() + first, static_cast<int>(count));
        end.iov_len += cut;
        if (n < 0) {
          if (errno == EINTR) continue;
          return ErrnoStatus(path_ + ": append at offset " + std::to_string(size_), errno);
        }
        size_ += static_cast<uint64_t>(n);
        StartWriteback();
        size_t done = static_cast<size_t>(n);
        while (first < iov.size() && done >= iov[first].iov_len) {
          done -= iov[first].iov_len;
          ++first;
        }
        if (done > 0) {
          iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
          iov[first].iov_len -= done;
        }
      }
    }
    return Status::OK();
  }

  Status WriteAt(uint64_t offset, std::string_view data) override {
    if (fd_ < 0) return ClosedFileStatus(path_, "write");
    RUNSTORE_RETURN_IF_ERROR(CheckWriteAt(path_, offset, data.size(), synced_.load(), size_));
    for (size_t done = 0; done < data.size();) {
      const ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(path_ + ": write at offset " + std::to_string(offset + done), errno);
      }
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  Status Sync() override {
    RUNSTORE_RETURN_IF_ERROR(SyncPrefix(size_));
    written_back_ = size_;
    return Status::OK();
  }

  Status SyncPrefix(uint64_t length) override {
    if (fd_ < 0) return ClosedFileStatus(path_, "sync");
    // After a failed fdatasync the kernel may already have dropped the dirty
    // pages, so a retry that succeeds proves nothing; report and let the
    // caller treat the file as lost. Touches nothing the appending thread
    // owns: written_back_ stays its own, and synced_ only grows.
    if (::fdatasync(fd_) != 0) return ErrnoStatus(path_ + ": fdatasync", errno);
    RaiseSynced(&synced_, length);
    KeepSyncedLarge(length);
    return Status::OK();
  }

  Status Close() override {
    if (fd_ < 0) return ClosedFileStatus(path_, "close");
    const int fd = fd_;
    fd_ = -1;
    // On Linux the descriptor is released even when close fails, and EINTR
    // must not be retried (the number may already be reused by another thread).
    if (::close(fd) != 0 && errno != EINTR) return ErrnoStatus(path_ + ": close", errno);
    return Status::OK();
  }

  uint64_t Size() const override { return size_; }

  bool Removed() const override {
    struct stat st;
    return fd_ >= 0 && ::fstat(fd_, &st) == 0 && st.st_nlink == 0;
  }

  // Appends the first `length` bytes of the file open as `in` (EOF before
  // them is an IOError naming `from`): in the kernel where the file systems
  // allow it (copy_file_range), else through a buffer.
  Status AppendCopyOf(int in, const std::string& from, uint64_t length) {
    constexpr size_t kChunk = size_t{4} << 20;
    uint64_t done = 0;
    bool in_kernel = true;
    std::vector<char> buf;
    while (done < length) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, length - done));
      ssize_t got;
      if (in_kernel) {
        // At the descriptor's own offset, which Append writes at next.
        off_t in_off = static_cast<off_t>(done);
        got = ::copy_file_range(in, &in_off, fd_, nullptr, n, 0);
        if (got < 0 && done == 0 &&
            (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP)) {
          in_kernel = false;  // not between these files: copy through a buffer
          continue;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return ErrnoStatus(path_ + ": copy from " + from, errno);
      } else {
        buf.resize(kChunk);
        got = ::pread(in, buf.data(), n, static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return ErrnoStatus(from + ": read", errno);
        if (got > 0) {
          RUNSTORE_RETURN_IF_ERROR(Append(std::string_view(buf.data(), static_cast<size_t>(got))));
          done += static_cast<uint64_t>(got);
          continue;
        }
      }
      if (got == 0) return ShorterThanCopy(from, done, length);  // shrank meanwhile
      done += static_cast<uint64_t>(got);
      size_ += static_cast<uint64_t>(got);
      StartWriteback();
    }
    return Status::OK();
  }

 private:
  // A large piece (a large value, written from the caller's memory: see
  // docs/format.md) is handed to the process's page-cache budget once a sync
  // has made it durable, and leaves the cache when newer ones exceed it
  // (env/page_cache.h): docs/design.md#large-values-leave-the-page-cache-once-durable.
  static constexpr uint64_t kLargePieceBytes = uint64_t{1} << 20;

  void NoteLarge(uint64_t begin, uint64_t end) {
    MutexLock lock(&large_mu_);
    if (!large_.empty() && large_.back().second == begin) {
      large_.back().second = end;  // adjacent: one range
    } else {
      large_.emplace_back(begin, end);
    }
  }

  // Hands the whole pages of the large ranges below `synced` to the budget; a
  // range that reaches past it waits for the sync that covers it.
  void KeepSyncedLarge(uint64_t synced) {
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    std::vector<std::pair<uint64_t, uint64_t>> durable;
    std::shared_ptr<const std::string> path;
    {
      MutexLock lock(&large_mu_);
      size_t done = 0;
      for (; done < large_.size() && large_[done].second <= synced; ++done) {
        const uint64_t first = (large_[done].first + page - 1) / page * page;
        const uint64_t end = large_[done].second / page * page;
        if (end > first) durable.emplace_back(first, end);
      }
      large_.erase(large_.begin(), large_.begin() + static_cast<ptrdiff_t>(done));
      if (durable.empty()) return;
      if (shared_path_ == nullptr) shared_path_ = std::make_shared<const std::string>(path_);
      path = shared_path_;
    }
    page_cache::Keep(path, fd_, durable);
  }

  // Appended bytes are handed to the disk a window at a time
  // (sync_file_range WRITE: start writeback, wait for nothing), as RocksDB's
  // bytes_per_sync does. The next Sync then waits only for the last window
  // instead of writing everything since the previous one: an 8 MiB append +
  // fdatasync takes ~30% less time on a virtio disk. Durability is unchanged:
  // only Sync promises anything.
  static constexpr uint64_t kWritebackBytes = uint64_t{1} << 20;

  void StartWriteback() {
#ifdef SYNC_FILE_RANGE_WRITE
    const uint64_t pending = size_ - written_back_;
    if (pending < kWritebackBytes) return;
    // A failure here is only a lost hint; Sync reports real write errors.
    (void)::sync_file_range(fd_, static_cast<off_t>(written_back_), static_cast<off_t>(pending),
                            SYNC_FILE_RANGE_WRITE);
    written_back_ = size_;
#endif
  }

  const std::string path_;
  int fd_;
  uint64_t size_ = 0;
  uint64_t written_back_ = 0;  // writeback started (or synced) below this offset
  // Below it every byte is durable; written by SyncPrefix from another thread.
  std::atomic<uint64_t> synced_{0};
  // Appended by Append, dropped by SyncPrefix, which may run on another thread.
  Mutex large_mu_;
  std::vector<std::pair<uint64_t, uint64_t>> large_ RUNSTORE_GUARDED_BY(large_mu_);
  // path_, shared with the page-cache budget, made at the first large piece.
  std::shared_ptr<const std::string> shared_path_ RUNSTORE_GUARDED_BY(large_mu_);
};

class PosixMappedRegion final : public MappedRegion {
 public:
  PosixMappedRegion(void* base, size_t length) {
    data_ = static_cast<const char*>(base);
    size_ = length;
  }
  ~PosixMappedRegion() override {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  // A read-only shared file mapping: dropped pages are faulted in again from
  // the page cache, so MADV_DONTNEED loses nothing.
  using MappedRegion::ReleasePages;  // the whole region
  void ReleasePages(const char* begin, size_t n) const override {
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
    // The mapping's last page holds nothing past the region's end: a range
    // that reaches the end owns it wholly.
    const uintptr_t last = reinterpret_cast<uintptr_t>(begin) + n;
    const uintptr_t end =
        begin + n == data_ + size_ ? (last + page - 1) & ~(page - 1) : last & ~(page - 1);
    if (data_ != nullptr && end > first) {
      ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
    }
  }
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Status Read(uint64_t offset, size_t n, char* scratch, std::string_view* result) const override {
    *result = {};
    if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
      return Status::InvalidArgument(path_ + ": read at offset " + std::to_string(offset) +
                                     ": offset out of range");
    }
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, scratch + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(path_ + ": read " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset + done),
                           errno);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    *result = std::string_view(scratch, done);
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(path_ + ": fstat", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<FileInfo> Info() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(path_ + ": fstat", errno);
    return InfoOfStat(st);
  }

  Result<std::shared_ptr<const MappedRegion>> Map(uint64_t length) const override {
    if (length == 0) return std::shared_ptr<const MappedRegion>(new PosixMappedRegion(nullptr, 0));
    RUNSTORE_ASSIGN_OR_RETURN(const uint64_t size, Size());
    // Touching a mapped page wholly past the end of the file raises SIGBUS, so
    // a mapping longer than the file is refused rather than made.
    if (length > size || length > std::numeric_limits<size_t>::max()) {
      return Status::InvalidArgument(path_ + ": map " + std::to_string(length) +
                                     " bytes: file has only " + std::to_string(size));
    }
    void* base = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) {
      return ErrnoStatus(path_ + ": mmap " + std::to_string(length) + " bytes", errno);
    }
    // The mapping holds its own reference to the file, so it outlives fd_ and
    // even an unlink. Its bytes stay unchanged only because runstore never
    // rewrites published bytes (docs/design.md#invariant-4); a truncation by
    // another process would make reads of the region fault.
    return std::shared_ptr<const MappedRegion>(
        new PosixMappedRegion(base, static_cast<size_t>(length)));
  }

  uint64_t NextData(uint64_t offset) const override {
    if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) return UINT64_MAX;
    const off_t at = ::lseek(fd_, static_cast<off_t>(offset), SEEK_DATA);
    if (at >= 0) return static_cast<uint64_t>(at);
    // ENXIO: no data at or past offset; anything else (a file system
    // without SEEK_DATA): read on from offset.
    return errno == ENXIO ? UINT64_MAX : offset;
  }

  void WillNeed(uint64_t offset, uint64_t n) const override {
    // Linux reads at most max(readahead window, largest device request) per
    // WILLNEED call and silently drops the rest; a later read of the dropped
    // tail then starts a whole readahead window past the range. So the range
    // is asked for in pieces no larger than the smallest such limit (128 KiB,
    // the default window). Pages read this way carry no readahead marker:
    // reading them, or faulting them through a mapping, reads nothing more.
    constexpr uint64_t kPiece = uint64_t{128} << 10;
    // Only what the file holds: a hint past its end would cost a call per
    // 128 KiB of nothing (and a length from a damaged index, a loop of 2^47).
    struct stat st;
    if (::fstat(fd_, &st) != 0 || offset >= static_cast<uint64_t>(st.st_size)) return;
    n = std::min<uint64_t>(n, static_cast<uint64_t>(st.st_size) - offset);
    for (uint64_t done = 0; done < n; done += kPiece) {
      (void)::posix_fadvise(fd_, static_cast<off_t>(offset + done),
                            static_cast<off_t>(std::min(kPiece, n - done)), POSIX_FADV_WILLNEED);
    }
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override {
    // O_TRUNC only once the file is known to be a regular one: a FIFO or a
    // device in its place is refused untouched.
    RUNSTORE_ASSIGN_OR_RETURN(const int fd,
                              OpenRegular(path, O_WRONLY | O_CREAT | (exclusive ? O_EXCL : 0),
                                          exclusive ? "create exclusively" : "open for writing"));
    if (!exclusive && ::ftruncate(fd, 0) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(path + ": truncate", err);
    }
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Result<std::unique_ptr<WritableFile>> NewCopyOf(const std::string& from, uint64_t length,
                                                  const std::string& to) override {
    RUNSTORE_ASSIGN_OR_RETURN(const int in, OpenRegular(from, O_RDONLY, "open for reading"));
    struct stat st;
    Status s;
    if (::fstat(in, &st) != 0) {
      s = ErrnoStatus(from + ": stat", errno);
    } else if (static_cast<uint64_t>(st.st_size) < length) {
      s = ShorterThanCopy(from, static_cast<uint64_t>(st.st_size), length);
    }
    if (!s.ok()) {
      ::close(in);
      return s;
    }
    auto out = NewWritableFile(to, /*exclusive=*/true);
    if (!out.ok()) {
      ::close(in);
      return out.status();
    }
    s = static_cast<PosixWritableFile*>(out->get())->AppendCopyOf(in, from, length);
    ::close(in);
    if (!s.ok()) {
      (void)(*out)->Close();
      (void)RemoveFile(to);
      return s;
    }
    return out;
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    RUNSTORE_ASSIGN_OR_RETURN(const int fd, OpenRegular(path, O_RDONLY, "open for reading"));
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  Status FileExists(const std::string& path) override {
    // The name itself: a link in place of a store's file exists (and is
    // refused when opened, naming what it is), even when it dangles.
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus(path + ": stat", errno);
    return Status::OK();
  }

  Result<bool> IsDirectory(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path + ": stat", errno);
    return S_ISDIR(st.st_mode);
  }

  Result<FileId> GetFileId(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path + ": stat", errno);
    return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }

  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(dir + ": opendir", errno);
    std::vector<std::string> names;
    while (true) {
      errno = 0;  // readdir returns nullptr both at the end and on error
      const struct dirent* entry = ::readdir(d);
      if (entry == nullptr) break;
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return ErrnoStatus(dir + ": readdir", err);
    return names;
  }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path + ": stat", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<FileInfo> GetFileInfo(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path + ": stat", errno);
    return InfoOf(st);
  }

  static FileInfo InfoOf(const struct stat& st) { return InfoOfStat(st); }

  std::vector<Result<FileInfo>> GetChildrenInfo(const std::string& dir,
                                                std::span<const std::string> names) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Env::GetChildrenInfo(dir, names);  // each reports its own error
    std::vector<Result<FileInfo>> out;
    out.reserve(names.size());
    for (const std::string& name : names) {
      struct stat st;
      if (::fstatat(fd, name.c_str(), &st, 0) != 0) {
        out.push_back(ErrnoStatus(dir + "/" + name + ": stat", errno));
      } else {
        out.push_back(InfoOf(st));
      }
    }
    ::close(fd);
    return out;
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoStatus(path + ": mkdir", errno);
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus(path + ": unlink", errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(from + ": rename to " + to, errno);
    }
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    int fd;
    do {
      fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus(dir + ": open directory for sync", errno);
    Status s;
    // EINVAL means this file system cannot sync a directory (some FUSE and
    // network file systems); there is nothing more we could do for it.
    if (::fsync(fd) != 0 && errno != EINVAL) s = ErrnoStatus(dir + ": fsync directory", errno);
    ::close(fd);
    return s;
  }

  Status CheckWritableDir(const std::string& dir) override {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(dir + ": stat", errno);
    if (!S_ISDIR(st.st_mode)) return ErrnoStatus(dir + ": check writable", ENOTDIR);
    if (::access(dir.c_str(), W_OK) != 0) return ErrnoStatus(dir + ": access for writing", errno);
    // A read-only mount is a property of the file system, not of the
    // directory's permission bits, and not every file system reports it
    // through access(); the mount flag is authoritative.
    struct statvfs vfs;
    if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoStatus(dir + ": statvfs", errno);
    if (vfs.f_flag & ST_RDONLY) return ErrnoStatus(dir + ": check writable", EROFS);
    return Status::OK();
  }

  int64_t NowNanos() override {
    struct timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
};

}  // namespace

Env* Env::Default() {
  // Never deleted, so that threads still running at exit may use it.
  static Env* const env = new PosixEnv;
  return env;
}

}  // namespace runstore
