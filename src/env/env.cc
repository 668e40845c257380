// Helpers declared in runstore/env.h that work over any Env.
#include "runstore/env.h"

#include <string>
#include <string_view>
#include <vector>

#include "env/path.h"

namespace runstore {
namespace {}  // namespace

std::vector<Result<FileInfo>> Env::GetChildrenInfo(const std::string& dir,
                                                   std::span<const std::string> names) {
  std::vector<Result<FileInfo>> out;
  out.reserve(names.size());
  for (const std::string& name : names) out.push_back(GetFileInfo(dir + "/" + name));
  return out;
}

Result<std::string> ReadFileToString(Env* env, const std::string& path) {
  RUNSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<RandomAccessFile> file,
                            env->NewRandomAccessFile(path));
  RUNSTORE_ASSIGN_OR_RETURN(const uint64_t size, file->Size());
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
