// Helpers declared in runstore/env.h that work over any Env.
#include "runstore/env.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "env/path.h"

namespace runstore {
namespace {}  // namespace

Result<std::unique_ptr<WritableFile>> Env::NewCopyOf(const std::string& from, uint64_t length,
                                                     const std::string& to) {
  RUNSTORE_ASSIGN_OR_RETURN(auto in, NewRandomAccessFile(from));
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, in->Size());
  if (size < length) return ShorterThanCopy(from, size, length);
  RUNSTORE_ASSIGN_OR_RETURN(auto out, NewWritableFile(to, /*exclusive=*/true));
  Status s;
  if (length > 0) {
    auto map = in->Map(length);
    s = map.status();
    constexpr uint64_t kChunk = uint64_t{4} << 20;
    for (uint64_t off = 0; off < length && s.ok();) {
      const size_t n = static_cast<size_t>(std::min(kChunk, length - off));
      s = out->Append(std::string_view((*map)->data() + off, n));
      off += n;
    }
  }
  if (!s.ok()) {
    (void)out->Close();
    (void)RemoveFile(to);
    return s;
  }
  return out;
}

Result<FileId> Env::GetFileId(const std::string& path) {
  return Status::NotSupported(path + ": this Env does not tell files apart by identity");
}

std::vector<Result<FileInfo>> Env::GetChildrenInfo(const std::string& dir,
                                                   std::span<const std::string> names) {
  std::vector<Result<FileInfo>> out;
  out.reserve(names.size());
  for (const std::string& name : names) out.push_back(GetFileInfo(dir + "/" + name));
  return out;
}

Result<std::string> ReadFileToString(Env* env, const std::string& path, uint64_t max_bytes) {
  RUNSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<RandomAccessFile> file,
                            env->NewRandomAccessFile(path));
  RUNSTORE_ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size > max_bytes) {
    return Status::Corruption(path + ": " + std::to_string(size) +
                              " bytes, more than such a file can hold (" +
                              std::to_string(max_bytes) + ")");
  }
  std::string contents;
  contents.resize(size);
  std::string_view got;
  RUNSTORE_RETURN_IF_ERROR(file->Read(0, contents.size(), contents.data(), &got));
  // Read may hand back bytes it holds elsewhere instead of filling scratch.
  if (got.data() != contents.data()) contents.assign(got);
  contents.resize(got.size());  // the file may have shrunk since Size()
  return contents;
}

Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents) {
  // The order is the publish protocol (docs/design.md#invariant-5), and each step
  // guards against a specific crash:
  //  - Sync before the rename: otherwise the rename can reach the disk before
  //    the data, and a crash leaves `path` naming an empty or partial file
  //    where the old, complete one used to be.
  //  - Rename rather than write in place: a reader or a crash sees the old
  //    contents or the new, never a mixture.
  //  - SyncDir after the rename: until then the rename itself may be lost and
  //    `path` may revert to the old contents after a crash; callers that
  //    report success must not return before it.
  const std::string tmp = path + ".tmp";
  Status s = [&]() -> Status {
    RUNSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<WritableFile> file,
                              env->NewWritableFile(tmp, /*exclusive=*/false));
    RUNSTORE_RETURN_IF_ERROR(file->Append(contents));
    RUNSTORE_RETURN_IF_ERROR(file->Sync());
    RUNSTORE_RETURN_IF_ERROR(file->Close());
    return env->RenameFile(tmp, path);
  }();
  if (!s.ok()) {
    // Best effort: a leftover .tmp is harmless (the next attempt truncates
    // it) but untidy.
    (void)env->RemoveFile(tmp);
    return s;
  }
  return env->SyncDir(ParentDir(path));
}

}  // namespace runstore
