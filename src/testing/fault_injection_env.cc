#include "testing/fault_injection_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "env/path.h"

namespace runstore {
namespace {

// Bytes of removed or overwritten files kept at once so that the change can
// be undone (documented in the header).
constexpr uint64_t kMaxSavedBytes = uint64_t{256} << 20;

// "//" collapsed, trailing '/' stripped; the key under which files and
// directories are tracked.

bool IsAtOrUnder(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

// splitmix64: small, and the same sequence on every platform, so a seed
// printed by one machine replays on another.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [lo, hi].
uint64_t RandomIn(uint64_t* state, uint64_t lo, uint64_t hi) {
  const uint64_t span = hi - lo + 1;
  return span == 0 ? NextRandom(state) : lo + NextRandom(state) % span;
}

Status StaleHandleError(const std::string& path, const char* op) {
  return Status::IOError(path + ": " + op + ": handle opened before a simulated power loss", EIO);
}

}  // namespace

// Counts and filters the operations on one file; tracks its durability in
// the shared FileInfo.
class FaultInjectionEnv::FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base,
                    std::shared_ptr<FileInfo> info, uint64_t epoch)
      : env_(env),
        path_(std::move(path)),
        base_(std::move(base)),
        info_(std::move(info)),
        epoch_(epoch) {}

  using WritableFile::Append;  // the one-piece overload
  Status Append(std::span<const std::string_view> pieces) override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    const Fate fate = env_->CountOperationLocked("append", path_);
    if (fate == Fate::kCrash) return env_->FateError(fate, path_, "append");
    if (epoch_ != env_->epoch_) return StaleHandleError(path_, "append");
    const uint64_t before = base_->Size();
    if (fate == Fate::kFail) {
      // A short write: the first half of the bytes reach the file.
      size_t total = 0;
      for (const std::string_view piece : pieces) total += piece.size();
      size_t left = total / 2;
      std::vector<std::string_view> prefix;
      for (const std::string_view piece : pieces) {
        if (left == 0) break;
        prefix.push_back(piece.substr(0, std::min(left, piece.size())));
        left -= prefix.back().size();
      }
      (void)base_->Append(prefix);  // the injected error is what the caller sees
      info_->size += base_->Size() - before;
      return env_->FateError(fate, path_, "append");
    }
    Status s = base_->Append(pieces);
    info_->size += base_->Size() - before;
    return s;
  }

  Status WriteAt(uint64_t offset, std::string_view data) override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    const Fate fate = env_->CountOperationLocked("write", path_);
    if (fate == Fate::kCrash) return env_->FateError(fate, path_, "write");
    if (epoch_ != env_->epoch_) return StaleHandleError(path_, "write");
    if (fate == Fate::kFail) return env_->FateError(fate, path_, "write");
    // The rewritten bytes lie past the synced length (the base checks it), so
    // power loss treats them as any other unsynced bytes.
    return base_->WriteAt(offset, data);
  }

  Status Sync() override { return SyncUpTo(/*all=*/true, 0); }
  Status SyncPrefix(uint64_t length) override { return SyncUpTo(/*all=*/false, length); }

  Status Close() override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    const Fate fate = env_->CountOperationLocked("close", path_);
    if (fate == Fate::kCrash) return env_->FateError(fate, path_, "close");
    if (epoch_ != env_->epoch_) return StaleHandleError(path_, "close");
    Status s = base_->Close();
    if (fate == Fate::kFail) return env_->FateError(fate, path_, "close");
    return s;
  }

  uint64_t Size() const override { return base_->Size(); }

 private:
  // Sync (`all`) or SyncPrefix(length). Under the env's mutex, so an Append
  // from another thread lands wholly before or after it.
  Status SyncUpTo(bool all, uint64_t length) {
    std::lock_guard<std::mutex> lock(env_->mu_);
    const Fate fate = env_->CountOperationLocked(all ? "sync" : "sync prefix", path_);
    if (fate == Fate::kCrash) return env_->FateError(fate, path_, "sync");
    if (epoch_ != env_->epoch_) return StaleHandleError(path_, "sync");
    Status s = fate == Fate::kFail ? env_->FateError(fate, path_, "sync")
               : all               ? base_->Sync()
                                   : base_->SyncPrefix(length);
    if (!s.ok()) {
      info_->sync_failed = true;
      return s;
    }
    if (!info_->sync_failed) {
      info_->synced = all ? info_->size : std::max(info_->synced, std::min(length, info_->size));
    }
    return Status::OK();
  }

  FaultInjectionEnv* const env_;
  const std::string path_;
  const std::unique_ptr<WritableFile> base_;
  const std::shared_ptr<FileInfo> info_;
  const uint64_t epoch_;  // env_->epoch_ when opened
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : EnvWrapper(base) {}
FaultInjectionEnv::~FaultInjectionEnv() = default;

uint64_t FaultInjectionEnv::operation_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}

void FaultInjectionEnv::FailOperation(uint64_t n, int err) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_at_ = n == 0 ? 0 : operations_ + n;
  fail_errno_ = err;
}

void FaultInjectionEnv::CrashAfter(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_armed_ = true;
  crash_after_ = operations_ + n;
}

bool FaultInjectionEnv::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

void FaultInjectionEnv::ResetCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  operations_ = 0;
  fail_at_ = 0;
  crash_armed_ = false;
  crashed_ = false;
}

FaultInjectionEnv::Fate FaultInjectionEnv::CountOperationLocked(const char* what,
                                                                const std::string& path) {
  const uint64_t op = ++operations_;
  Fate fate = Fate::kRun;
  if (crashed_ || (crash_armed_ && op > crash_after_)) {
    crashed_ = true;
    fate = Fate::kCrash;
  } else if (op == fail_at_) {
    fail_at_ = 0;
    fate = Fate::kFail;
  }
  // RUNSTORE_FAULT_TRACE=1: every operation on stderr, to read the sequence
  // a failing crash point ran.
  static const bool trace = std::getenv("RUNSTORE_FAULT_TRACE") != nullptr;
  if (trace) {
    std::fprintf(stderr, "fault env: %llu %s %s%s\n", static_cast<unsigned long long>(op), what,
                 path.c_str(),
                 fate == Fate::kCrash  ? " (refused: crashed)"
                 : fate == Fate::kFail ? " (failed: injected)"
                                       : "");
  }
  return fate;
}

Status FaultInjectionEnv::FateError(Fate fate, const std::string& path, const char* op) const {
  if (fate == Fate::kCrash) {
    return Status::IOError(path + ": " + op +
                               ": simulated crash (the machine stopped after operation " +
                               std::to_string(crash_after_) + "): " + std::strerror(EIO),
                           EIO);
  }
  return Status::IOError(path + ": " + op + ": injected fault (operation " +
                             std::to_string(operations_) + "): " + std::strerror(fail_errno_),
                         fail_errno_);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& raw_path, bool exclusive) {
  const std::string path = NormalizePath(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  const Fate fate = CountOperationLocked("open for writing", path);
  if (fate != Fate::kRun) return FateError(fate, path, "open for writing");
  const bool existed = target()->FileExists(path).ok();
  RUNSTORE_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> base_file,
                            target()->NewWritableFile(path, exclusive));
  std::shared_ptr<FileInfo>& info = files_[path];
  if (info == nullptr) {
    info = std::make_shared<FileInfo>();
  } else {
    *info = FileInfo{};  // truncated: the same inode, so open handles share this
  }
  if (!existed) {
    pending_.push_back({PendingChange::Kind::kCreateFile, ParentDir(path), path, {}, std::nullopt});
  }
  return std::unique_ptr<WritableFile>(
      new FaultWritableFile(this, path, std::move(base_file), info, epoch_));
}

Status FaultInjectionEnv::CreateDir(const std::string& raw_path) {
  const std::string path = NormalizePath(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  const Fate fate = CountOperationLocked("mkdir", path);
  if (fate != Fate::kRun) return FateError(fate, path, "mkdir");
  RUNSTORE_RETURN_IF_ERROR(target()->CreateDir(path));
  pending_.push_back({PendingChange::Kind::kCreateDir, ParentDir(path), path, {}, std::nullopt});
  return Status::OK();
}

Status FaultInjectionEnv::RemoveFile(const std::string& raw_path) {
  const std::string path = NormalizePath(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  const Fate fate = CountOperationLocked("unlink", path);
  if (fate != Fate::kRun) return FateError(fate, path, "unlink");
  std::optional<SavedFile> saved = SaveFileLocked(path);
  const Status s = target()->RemoveFile(path);
  if (!s.ok()) {
    if (saved) saved_bytes_ -= saved->contents.size();
    return s;
  }
  files_.erase(path);
  pending_.push_back(
      {PendingChange::Kind::kRemoveFile, ParentDir(path), path, {}, std::move(saved)});
  return Status::OK();
}

Status FaultInjectionEnv::RenameFile(const std::string& raw_from, const std::string& raw_to) {
  const std::string from = NormalizePath(raw_from);
  const std::string to = NormalizePath(raw_to);
  std::lock_guard<std::mutex> lock(mu_);
  const Fate fate = CountOperationLocked("rename", from + " -> " + to);
  if (fate != Fate::kRun) return FateError(fate, from, ("rename to " + to).c_str());
  std::optional<SavedFile> saved;
  if (from != to) saved = SaveFileLocked(to);
  const Status s = target()->RenameFile(from, to);
  if (!s.ok() || from == to) {
    if (saved) saved_bytes_ -= saved->contents.size();
    return s;
  }
  files_.erase(to);
  MoveTrackedLocked(from, to);
  pending_.push_back({PendingChange::Kind::kRename, ParentDir(to), to, from, std::move(saved)});
  return Status::OK();
}

Status FaultInjectionEnv::SyncDir(const std::string& raw_dir) {
  const std::string dir = NormalizePath(raw_dir);
  std::lock_guard<std::mutex> lock(mu_);
  const Fate fate = CountOperationLocked("fsync directory", dir);
  if (fate != Fate::kRun) return FateError(fate, dir, "fsync directory");
  RUNSTORE_RETURN_IF_ERROR(target()->SyncDir(dir));
  std::erase_if(pending_, [&](const PendingChange& change) {
    if (change.dir != dir) return false;
    ForgetPendingLocked(change);
    return true;
  });
  return Status::OK();
}

std::optional<FaultInjectionEnv::SavedFile> FaultInjectionEnv::SaveFileLocked(
    const std::string& path) {
  const Result<bool> is_dir = target()->IsDirectory(path);
  if (!is_dir.ok() || *is_dir) return std::nullopt;
  const Result<uint64_t> size = target()->GetFileSize(path);
  if (!size.ok() || *size > kMaxSavedBytes - saved_bytes_) return std::nullopt;
  Result<std::string> contents = ReadFileToString(target(), path, UINT64_MAX);
  if (!contents.ok()) return std::nullopt;
  saved_bytes_ += contents->size();
  SavedFile saved{std::move(contents).value(), nullptr};
  const auto it = files_.find(path);
  if (it != files_.end()) saved.info = it->second;
  return saved;
}

void FaultInjectionEnv::ForgetPendingLocked(const PendingChange& change) {
  if (change.saved) saved_bytes_ -= change.saved->contents.size();
}

void FaultInjectionEnv::MoveTrackedLocked(const std::string& from, const std::string& to) {
  std::vector<std::string> moved;
  for (const auto& [path, info] : files_) {
    if (IsAtOrUnder(path, from)) moved.push_back(path);
  }
  for (const std::string& path : moved) {
    auto node = files_.extract(path);
    node.key() = to + path.substr(from.size());
    files_.insert(std::move(node));
  }
}

Status FaultInjectionEnv::SimulatePowerLoss(DropMode mode, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  Status first_error;
  const auto note = [&](Status s) {
    if (first_error.ok() && !s.ok()) first_error = std::move(s);
  };
  // Directory changes first, newest first, so that each undo finds the names
  // as they were just after the change it reverts; then the data of the files
  // under the names they are left with.
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) note(UndoLocked(*it));
  uint64_t rng_state = seed;
  for (const auto& [path, info] : files_) {
    note(DropUnsyncedLocked(path, *info, mode, &rng_state));
  }
  // The reboot: what is on the base env now is the durable state.
  files_.clear();
  pending_.clear();
  saved_bytes_ = 0;
  fail_at_ = 0;
  crash_armed_ = false;
  crashed_ = false;
  ++epoch_;
  return first_error;
}

Status FaultInjectionEnv::UndoLocked(PendingChange& change) {
  switch (change.kind) {
    case PendingChange::Kind::kCreateFile: {
      files_.erase(change.path);
      const Status s = target()->RemoveFile(change.path);
      return s.code() == StatusCode::kNotFound ? Status::OK() : s;
    }
    case PendingChange::Kind::kCreateDir:
      return EmptyDirLocked(change.path);
    case PendingChange::Kind::kRemoveFile:
      if (!change.saved) return Status::OK();  // too large to keep: stays removed
      RUNSTORE_RETURN_IF_ERROR(WriteBaseFileLocked(change.path, change.saved->contents));
      if (change.saved->info) files_[change.path] = change.saved->info;
      return Status::OK();
    case PendingChange::Kind::kRename:
      if (target()->FileExists(change.path).ok()) {
        RUNSTORE_RETURN_IF_ERROR(target()->RenameFile(change.path, change.from));
        files_.erase(change.from);
        MoveTrackedLocked(change.path, change.from);
      }
      if (!change.saved) return Status::OK();  // `to` did not exist, or was too large
      RUNSTORE_RETURN_IF_ERROR(WriteBaseFileLocked(change.path, change.saved->contents));
      if (change.saved->info) files_[change.path] = change.saved->info;
      return Status::OK();
  }
  return Status::OK();
}

Status FaultInjectionEnv::EmptyDirLocked(const std::string& dir) {
  Result<std::vector<std::string>> children = target()->GetChildren(dir);
  if (!children.ok()) {
    return children.status().code() == StatusCode::kNotFound ? Status::OK() : children.status();
  }
  for (const std::string& name : *children) {
    const std::string path = dir == "/" ? "/" + name : dir + "/" + name;
    RUNSTORE_ASSIGN_OR_RETURN(const bool is_dir, target()->IsDirectory(path));
    if (is_dir) {
      RUNSTORE_RETURN_IF_ERROR(EmptyDirLocked(path));
    } else {
      RUNSTORE_RETURN_IF_ERROR(target()->RemoveFile(path));
    }
  }
  std::erase_if(files_, [&](const auto& entry) { return IsAtOrUnder(entry.first, dir); });
  return Status::OK();
}

Status FaultInjectionEnv::WriteBaseFileLocked(const std::string& path,
                                              const std::string& contents) {
  // No Sync: after the simulated reboot the base env itself never loses data.
  RUNSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<WritableFile> file,
                            target()->NewWritableFile(path, /*exclusive=*/false));
  RUNSTORE_RETURN_IF_ERROR(file->Append(contents));
  return file->Close();
}

Status FaultInjectionEnv::DropUnsyncedLocked(const std::string& path, const FileInfo& info,
                                             DropMode mode, uint64_t* rng_state) {
  if (info.synced >= info.size) return Status::OK();
  Result<std::string> read = ReadFileToString(target(), path, UINT64_MAX);
  if (!read.ok()) {
    return read.status().code() == StatusCode::kNotFound ? Status::OK() : read.status();
  }
  std::string contents = std::move(read).value();
  const uint64_t synced = std::min<uint64_t>(info.synced, contents.size());
  const uint64_t unsynced = contents.size() - synced;
  if (unsynced == 0) return Status::OK();
  uint64_t keep = synced;
  switch (mode) {
    case DropMode::kDropUnsynced:
      break;
    case DropMode::kKeepRandomPrefix:
      keep = synced + RandomIn(rng_state, 0, unsynced);
      break;
    case DropMode::kTornGarbage: {
      keep = synced + RandomIn(rng_state, 1, unsynced);
      const uint64_t begin = RandomIn(rng_state, synced, keep - 1);
      const uint64_t end = RandomIn(rng_state, begin + 1, keep);
      const bool zeros = NextRandom(rng_state) % 2 == 0;
      for (uint64_t i = begin; i < end; ++i) {
        contents[i] = zeros ? '\0' : static_cast<char>(NextRandom(rng_state));
      }
      break;
    }
  }
  contents.resize(keep);
  return WriteBaseFileLocked(path, contents);
}

}  // namespace runstore
