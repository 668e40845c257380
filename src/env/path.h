// Helpers shared by the envs and the store: path spelling and errno mapping.
#ifndef RUNSTORE_ENV_PATH_H_
#define RUNSTORE_ENV_PATH_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "runstore/status.h"

namespace runstore {

// Collapses repeated '/' and strips a trailing '/' (except of "/" itself).
std::string NormalizePath(std::string_view path);

// The directory that holds `path`: "a/b/c" -> "a/b", "/c" -> "/", "c" -> ".";
// trailing '/' are ignored.
std::string ParentDir(std::string_view path);

// "context: strerror(err)" as NotFound (ENOENT), AlreadyExists (EEXIST),
// ResourceExhausted (EMFILE, ENFILE, ENOMEM, EAGAIN: with what ran out, and
// for EMFILE the process's limit) or IOError, with err as the status's
// sys_errno.
Status ErrnoStatus(const std::string& context, int err);

// What ran out, for a ResourceExhausted of errno `err` ("out of file
// descriptors: ..."); empty for an errno that is no resource.
std::string ResourceText(int err);

// Env::NewCopyOf's IOError for a source of `size` bytes, fewer than `length`.
Status ShorterThanCopy(const std::string& from, uint64_t size, uint64_t length);

// FailedPrecondition for a call on a closed file.
Status ClosedFileStatus(const std::string& path, const char* op);

// WritableFile::WriteAt's contract: OK if [offset, offset + n) lies within
// [synced, size), InvalidArgument naming the file and the ranges otherwise.
Status CheckWriteAt(const std::string& path, uint64_t offset, uint64_t n, uint64_t synced,
                    uint64_t size);

// Raises a synced length to `length` unless it is past it already: what
// WritableFile::SyncPrefix records, from a thread other than the appender's.
inline void RaiseSynced(std::atomic<uint64_t>* synced, uint64_t length) {
  uint64_t was = synced->load();
  while (was < length && !synced->compare_exchange_weak(was, length)) {
  }
}

}  // namespace runstore

#endif  // RUNSTORE_ENV_PATH_H_
