// env.h: the file-system seam. Every file-system call runstore makes goes
// through an Env, so that tests can substitute an in-memory file system or a
// fault-injecting wrapper that drops unsynced data, fails the Nth operation
// with EIO or ENOSPC, or simulates a crash (the tests' fault-injecting env,
// docs/reliability.md "Crash tests").
//
// Thread safety: an Env may be used from any number of threads at once. A
// WritableFile is used by one thread at a time; a RandomAccessFile and a
// MappedRegion may be shared between threads.
#ifndef RUNSTORE_ENV_H_
#define RUNSTORE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/status.h"

namespace runstore {

// A file opened for appending. Bytes become durable only after Sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends the concatenation of `pieces` at the end of the file (one writev
  // where the platform allows). On failure the file's length is unspecified
  // between the old and the new length.
  virtual Status Append(std::span<const std::string_view> pieces) = 0;
  Status Append(std::string_view data) {
    return Append(std::span<const std::string_view>(&data, 1));
  }
  // Overwrites bytes appended since the last Sync: [offset, offset + size)
  // must lie between the synced length and Size(), else InvalidArgument. For
  // a header that is known only once what follows it has been written. Like
  // appended bytes, durable only after Sync().
  virtual Status WriteAt(uint64_t offset, std::string_view data) = 0;
  // Makes everything appended so far durable (fdatasync).
  virtual Status Sync() = 0;
  // Makes the first `length` bytes (at most Size()) durable. Unlike the other
  // calls it may run on another thread while Append and WriteAt go on past
  // `length`: the bytes past it are not promised (fdatasync may happen to
  // write some of them) and stay rewritable. Not concurrently with Close, and
  // at most one at a time. For a writer that syncs a commit while it writes
  // the next one.
  virtual Status SyncPrefix(uint64_t length) = 0;
  // Closes the file; does not sync. Further calls fail.
  virtual Status Close() = 0;
  // Bytes appended so far, including any that failed part way.
  virtual uint64_t Size() const = 0;
  // Whether the file has lost its last name (removed while open): what is
  // written to it can then never be read by anyone. False where the Env
  // cannot tell.
  virtual bool Removed() const { return false; }
};

// A read-only mapping of a file prefix. The bytes stay valid and unchanged for
// as long as this object lives, even after the file is closed or unlinked.
class MappedRegion {
 public:
  virtual ~MappedRegion() = default;
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // Drops the pages that lie wholly inside [begin, begin + n), which must be
  // within the region, from the process's resident memory. The bytes stay
  // valid: they are read again from the file (page cache) when touched. For
  // reads that stream through more data than should stay resident.
  virtual void ReleasePages(const char* /*begin*/, size_t /*n*/) const {}
  // The same for the whole region.
  void ReleasePages() const { ReleasePages(data_, size_); }

 protected:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// What stat(2) says of a file, for telling whether it changed: a file
// replaced or rewritten has a different size, modification time or inode.
struct FileInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // 0 where the Env keeps no times
  uint64_t inode = 0;    // 0 where the Env has no inodes
  friend bool operator==(const FileInfo&, const FileInfo&) = default;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into scratch; *result points at the bytes
  // read (in scratch or elsewhere). Fewer than n bytes are returned only at
  // end of file.
  virtual Status Read(uint64_t offset, size_t n, char* scratch, std::string_view* result) const = 0;
  // The file's current length (it may still grow if a writer is appending).
  virtual Result<uint64_t> Size() const = 0;
  // The open file's size, modification time and inode (fstat); by default
  // the size alone.
  virtual Result<FileInfo> Info() const {
    auto size = Size();
    if (!size.ok()) return size.status();
    return FileInfo{*size, 0, 0};
  }
  // Maps the first `length` bytes read-only. `length` must not exceed Size().
  virtual Result<std::shared_ptr<const MappedRegion>> Map(uint64_t length) const = 0;
  // The offset of the first byte at or after `offset` that the file system
  // holds data for, UINT64_MAX if none: a scan may skip the holes of a
  // sparse file (they read as zeros). By default `offset` (no holes known).
  virtual uint64_t NextData(uint64_t offset) const { return offset; }
  // A hint that [offset, offset + n) is about to be read whole: the file
  // system may start reading it now, in large requests, and exactly it
  // (posix_fadvise WILLNEED). Never changes what is read.
  virtual void WillNeed(uint64_t /*offset*/, uint64_t /*n*/) const {}
};

// Which file a path names: two paths name one file (or directory) exactly
// when their FileIds are equal, whatever their spelling, symbolic links or
// bind mounts.
struct FileId {
  uint64_t device = 0;
  uint64_t inode = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX environment. Never deleted.
  static Env* Default();

  // Creates a file for appending. With `exclusive`, fails with AlreadyExists
  // if the path exists (O_EXCL); otherwise an existing file is truncated.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                bool exclusive) = 0;
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Creates `to` exclusively (AlreadyExists if it exists) holding the first
  // `length` bytes of `from` (IOError if it has fewer), and returns it open
  // at its end, not yet synced: the copy step of publishing a staged segment.
  // By default written from a mapping of `from`; the POSIX Env copies in the
  // kernel (copy_file_range: no pages mapped into the process, and done by
  // the server on NFS 4.2).
  virtual Result<std::unique_ptr<WritableFile>> NewCopyOf(const std::string& from, uint64_t length,
                                                          const std::string& to);

  // OK if path exists; NotFound if not; IOError on other failures.
  virtual Status FileExists(const std::string& path) = 0;
  // True for a directory, false for any other kind of file; NotFound if absent.
  virtual Result<bool> IsDirectory(const std::string& path) = 0;
  // Names (not paths) of the entries of dir, without "." and "..", in any order.
  virtual Result<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  virtual Result<uint64_t> GetFileSize(const std::string& path) = 0;
  // The file's size, modification time and inode; by default the size alone.
  virtual Result<FileInfo> GetFileInfo(const std::string& path) {
    auto size = GetFileSize(path);
    if (!size.ok()) return size.status();
    return FileInfo{*size, 0, 0};
  }
  // GetFileInfo of dir/name for each of `names`, in their order: what
  // opening a store of many segments asks. By default one GetFileInfo each;
  // the POSIX Env resolves `dir` once and each name relative to it.
  virtual std::vector<Result<FileInfo>> GetChildrenInfo(const std::string& dir,
                                                        std::span<const std::string> names);
  // The identity of the file or directory at `path`, following symbolic
  // links (stat(2)'s device and inode); NotFound if absent. By default
  // NotSupported.
  virtual Result<FileId> GetFileId(const std::string& path);
  // Creates one directory level. AlreadyExists if it exists.
  virtual Status CreateDir(const std::string& path) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)). Durable only after
  // SyncDir of the directory that holds `to`.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries (creations, renames, removals) durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // OK if the process may create files in dir; IOError (EACCES/EROFS) if not.
  virtual Status CheckWritableDir(const std::string& dir) = 0;

  // Wall-clock time in nanoseconds since the Unix epoch.
  virtual int64_t NowNanos() = 0;
};

// An Env that hands every call to another, `target` (not owned), for an Env
// that changes a few of them: a test's fault, a benchmark's clock. Override
// what changes. NewCopyOf and GetChildrenInfo keep Env's defaults, which are
// made of the calls below, so that an Env that changes how files are opened
// or looked at changes those too.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override {
    return target_->NewWritableFile(path, exclusive);
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    return target_->NewRandomAccessFile(path);
  }
  Status FileExists(const std::string& path) override { return target_->FileExists(path); }
  Result<bool> IsDirectory(const std::string& path) override { return target_->IsDirectory(path); }
  Result<std::vector<std::string>> GetChildren(const std::string& dir) override {
    return target_->GetChildren(dir);
  }
  Result<uint64_t> GetFileSize(const std::string& path) override {
    return target_->GetFileSize(path);
  }
  Result<FileInfo> GetFileInfo(const std::string& path) override {
    return target_->GetFileInfo(path);
  }
  Result<FileId> GetFileId(const std::string& path) override { return target_->GetFileId(path); }
  Status CreateDir(const std::string& path) override { return target_->CreateDir(path); }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  Status SyncDir(const std::string& dir) override { return target_->SyncDir(dir); }
  Status CheckWritableDir(const std::string& dir) override {
    return target_->CheckWritableDir(dir);
  }
  int64_t NowNanos() override { return target_->NowNanos(); }

 private:
  Env* const target_;
};

// An Env that keeps every file in memory. Sync is a no-op (all data is
// durable); combine with FaultInjectionEnv to model power loss. The caller
// owns the returned Env.
std::unique_ptr<Env> NewMemEnv();

// Helpers built on any Env.

// The largest file ReadFileToString reads unless told otherwise: the files
// it is used for (leases, claims) hold a few dozen bytes.
inline constexpr uint64_t kMaxReadFileBytes = uint64_t{64} << 20;
// The whole of the regular file at `path`. A file larger than `max_bytes`
// is refused (Corruption naming the file and both sizes) before anything is
// allocated for it: a huge or sparse file in place of a small one cannot
// make the caller allocate its size.
Result<std::string> ReadFileToString(Env* env, const std::string& path,
                                     uint64_t max_bytes = kMaxReadFileBytes);
// Publishes `contents` at `path`: writes `path.tmp`, syncs it, renames it into
// place and syncs the directory (docs/design.md#invariant-5).
Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents);

}  // namespace runstore

#endif  // RUNSTORE_ENV_H_
