#include "store/staging/staging.h"

#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "env/path.h"
#include "format/format.h"
#include "runstore/sync.h"
#include "util/random.h"

namespace runstore {

double StagingLeaseBeatSeconds() { return 0.5; }

namespace staging {
namespace {

constexpr size_t kCopyChunk = 4u << 20;
constexpr char kTempSuffix[] = ".tmp";
constexpr char kLeaseSuffix[] = ".lease";
constexpr char kLeaseTempSuffix[] = ".lease.tmp";

bool IsToken(std::string_view t) {
  if (t.size() != 16) return false;
  for (char c : t) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool StripSuffix(std::string_view* s, std::string_view suffix) {
  if (s->size() < suffix.size() || s->substr(s->size() - suffix.size()) != suffix) return false;
  s->remove_suffix(suffix.size());
  return true;
}

// Whether `b` begins with the first `length` bytes of `a`.
Result<bool> StartsWith(Env* env, const std::string& b, const std::string& a, uint64_t length) {
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t b_size, env->GetFileSize(b));
  if (b_size < length) return false;
  RUNSTORE_ASSIGN_OR_RETURN(auto fa, env->NewRandomAccessFile(a));
  RUNSTORE_ASSIGN_OR_RETURN(auto fb, env->NewRandomAccessFile(b));
  std::vector<char> sa(kCopyChunk), sb(kCopyChunk);
  for (uint64_t off = 0; off < length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, length - off));
    std::string_view ra, rb;
    RUNSTORE_RETURN_IF_ERROR(fa->Read(off, n, sa.data(), &ra));
    RUNSTORE_RETURN_IF_ERROR(fb->Read(off, n, sb.data(), &rb));
    if (ra.size() != n) {
      return Status::IOError(a + ": shorter than the " + std::to_string(length) +
                             " bytes to publish (" + std::to_string(off + ra.size()) + ")");
    }
    if (ra != rb) return false;
    off += n;
  }
  return true;
}

// Whether `a` and `b` name one file (a hard link, a staging directory that
// is the store's segments/ under another spelling): then the staged copy is
// the published segment, and removing it would remove that.
Result<bool> SameFile(Env* env, const std::string& a, const std::string& b) {
  auto ia = env->GetFileId(a);
  if (!ia.ok()) {
    return ia.status().code() == StatusCode::kNotSupported ? Result<bool>(false) : ia.status();
  }
  RUNSTORE_ASSIGN_OR_RETURN(FileId ib, env->GetFileId(b));
  return *ia == ib;
}

// The state of a placeholder: NotFound, or whether it may be replaced by
// `length` bytes of `source` (it is still a placeholder), or already holds
// them (and possibly more commits after them).
Result<Published> CheckTarget(Env* env, const std::string& source, uint64_t length,
                              const std::string& target, bool* empty) {
  auto size = env->GetFileSize(target);
  if (!size.ok()) {
    if (size.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(target +
                              ": the placeholder that claims this segment number is gone; "
                              "not publishing " +
                              source + " over nothing (was it removed by hand?)");
    }
    return size.status();
  }
  RUNSTORE_ASSIGN_OR_RETURN(const bool same, SameFile(env, source, target));
  if (same) {
    return Status::InvalidArgument(
        source + " is the store's segment " + target +
        " itself (one file under two names), not a staged copy of it: nothing is published "
        "or removed; the staging directory must be apart from the store");
  }
  *empty = IsPlaceholderSize(*size);
  if (*empty) return Published::kShipped;
  // The same bytes, or more: a sync that shipped the committed prefix of a
  // killed writer's segment may have found commits in the page cache that a
  // power cut then took from staging (flushes, not yet synced there). The
  // store holds a valid, longer recovery of the same file; keep it.
  RUNSTORE_ASSIGN_OR_RETURN(bool holds, StartsWith(env, target, source, length));
  if (holds) return Published::kAlreadyThere;
  return Status::AlreadyExists(target + ": already published with other bytes (" +
                               std::to_string(*size) + " bytes) than the " +
                               std::to_string(length) + " of " + source + "; nothing was replaced");
}

}  // namespace

std::string NewOwnerToken() { return RandomHex16(); }

std::string TempName(std::string_view segment_name, std::string_view token) {
  return std::string(segment_name) + "." + std::string(token) + kTempSuffix;
}

bool ParseTempName(std::string_view name, std::string* segment_name, std::string* token) {
  if (!StripSuffix(&name, kTempSuffix) || name.size() < 18 || name[name.size() - 17] != '.') {
    return false;
  }
  const std::string_view t = name.substr(name.size() - 16);
  if (!IsToken(t)) return false;
  *token = std::string(t);
  *segment_name = std::string(name.substr(0, name.size() - 17));
  return true;
}

std::string LeaseName(std::string_view token) { return std::string(token) + kLeaseSuffix; }

bool ParseLeaseName(std::string_view name, std::string* token) {
  if (!StripSuffix(&name, kLeaseSuffix) || !IsToken(name)) return false;
  *token = std::string(name);
  return true;
}

bool ParseLeaseTempName(std::string_view name, std::string* token) {
  if (!StripSuffix(&name, kLeaseTempSuffix) || !IsToken(name)) return false;
  *token = std::string(name);
  return true;
}

Status ClaimSegment(Env* env, const std::string& segments_dir, const std::string& name,
                    const format::SegmentClaim& claim) {
  const std::string path = segments_dir + "/" + name;
  RUNSTORE_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path, /*exclusive=*/true));
  // The record synced before the claim counts: a compactor that finds the
  // placeholder empty takes it for one under which nothing was staged.
  Status s = f->Append(format::EncodeClaim(claim, name));
  if (s.ok()) s = f->Sync();
  const Status c = f->Close();
  if (s.ok()) s = c;
  if (!s.ok()) {
    // Not a claim: the number stays taken, by an empty segment.
    (void)env->RemoveFile(path);
    return s.WithContext("claim " + path);
  }
  return Status::OK();
}

bool IsPlaceholderSize(uint64_t size) { return size < format::kSegmentHeaderSize; }

Status CheckApart(Env* env, const std::string& staging_dir, const std::string& store_dir) {
  // A directory and its ancestors, by identity, up to the root (whose ".."
  // is itself).
  const auto chain = [&](const std::string& dir) -> Result<std::vector<FileId>> {
    std::vector<FileId> ids;
    std::string path = dir;
    for (int depth = 0; depth < 4096; ++depth) {
      RUNSTORE_ASSIGN_OR_RETURN(FileId id, env->GetFileId(path));
      if (!ids.empty() && id == ids.back()) break;
      ids.push_back(id);
      path += "/..";
    }
    return ids;
  };
  // A staging directory not made yet would be made inside its parent: apart
  // unless that parent is the store or inside it.
  std::string dir = staging_dir;
  bool made = true;
  if (Status e = env->FileExists(dir); e.code() == StatusCode::kNotFound) {
    dir = ParentDir(dir);
    made = false;
  }
  auto staging = chain(dir);
  if (!staging.ok() && (staging.status().code() == StatusCode::kNotSupported ||
                        (!made && staging.status().code() == StatusCode::kNotFound))) {
    return Status::OK();  // no parent either: making the directory says so
  }
  RUNSTORE_RETURN_IF_ERROR(staging.status());
  RUNSTORE_ASSIGN_OR_RETURN(const std::vector<FileId> store, chain(store_dir));
  const std::string why =
      ": a staging directory must be apart from the store (node-local scratch), or a sync "
      "would take the store's own segments for staged copies";
  for (size_t i = 0; i < staging->size(); ++i) {
    if ((*staging)[i] != store.front()) continue;
    return Status::InvalidArgument("staging directory " + staging_dir +
                                   (i == 0 && made ? " is the store " : " lies inside the store ") +
                                   store_dir + why);
  }
  for (size_t j = 1; made && j < store.size(); ++j) {
    if (store[j] == staging->front()) {
      return Status::InvalidArgument("staging directory " + staging_dir + " holds the store " +
                                     store_dir + why);
    }
  }
  return Status::OK();
}

namespace {
// kAlreadyThere once the store's directory is synced.
Result<Published> DurableAlreadyThere(Env* env, const std::string& segments_dir) {
  RUNSTORE_RETURN_IF_ERROR(env->SyncDir(segments_dir));
  return Published::kAlreadyThere;
}
}  // namespace

Result<Published> PublishSegment(Env* env, const std::string& source, uint64_t length,
                                 const std::string& segments_dir, const std::string& name,
                                 const std::string& token) {
  const std::string target = segments_dir + "/" + name;
  bool empty = false;
  RUNSTORE_ASSIGN_OR_RETURN(Published state, CheckTarget(env, source, length, target, &empty));
  // Already there: renamed into place by a publisher that may have died
  // before it synced the directory, so the name may not be durable yet. The
  // caller removes the staged copy next, so make it durable first, or a
  // power cut could take back the rename after that removal.
  if (state == Published::kAlreadyThere) return DurableAlreadyThere(env, segments_dir);

  // 1. The bytes under a temporary name that carries our token, so that a
  // sync can tell a dead publisher's leftover from a live one's.
  const std::string temp = segments_dir + "/" + TempName(name, token);
  {
    // Copied by the Env: in the kernel where it can (Env::NewCopyOf).
    auto out = env->NewCopyOf(source, length, temp);
    if (!out.ok() && out.status().code() == StatusCode::kAlreadyExists) {
      // Our own leftover of an attempt that failed part way.
      RUNSTORE_RETURN_IF_ERROR(env->RemoveFile(temp));
      out = env->NewCopyOf(source, length, temp);
    }
    if (!out.ok()) return out.status().WithContext("publishing " + source + " as " + target);
    // 2. Durable before the rename, or a power cut could leave the name
    // pointing at a short file.
    Status s = (*out)->Sync();
    const Status c = (*out)->Close();
    if (s.ok()) s = c;
    if (!s.ok()) {
      (void)env->RemoveFile(temp);
      return s.WithContext("publishing " + source + " as " + target);
    }
  }
  // 3. Look again just before the rename: another sync may have published
  // the same segment meanwhile. (Between this look and the rename a
  // concurrent sync can still rename the same bytes into place; ours then
  // replaces them with the same bytes, which changes nothing a reader can
  // see.)
  Result<Published> again = CheckTarget(env, source, length, target, &empty);
  if (!again.ok() || *again == Published::kAlreadyThere) {
    (void)env->RemoveFile(temp);
    if (!again.ok()) return again;
    return DurableAlreadyThere(env, segments_dir);
  }
  Status s = env->RenameFile(temp, target);
  if (!s.ok()) {
    (void)env->RemoveFile(temp);
    return s.WithContext("publishing " + source);
  }
  // 4. The new name durable before the caller removes the staged copy.
  RUNSTORE_RETURN_IF_ERROR(env->SyncDir(segments_dir));
  return Published::kShipped;
}

// ---- Lease.

Lease::Lease(Env* env, std::string dir, std::string token, std::string kind, std::string writer_id)
    : env_(env),
      dir_(std::move(dir)),
      token_(std::move(token)),
      kind_(std::move(kind)),
      writer_id_(std::move(writer_id)) {}

Result<std::unique_ptr<Lease>> Lease::Start(Env* env, std::string dir, std::string token,
                                            std::string kind, std::string writer_id) {
  std::unique_ptr<Lease> lease(
      new Lease(env, std::move(dir), std::move(token), std::move(kind), std::move(writer_id)));
  Status s = lease->Beat(/*durable=*/true);
  // A forced sync running beside a sync takes every lease for dead without
  // watching, and may remove a sync's lease temporary between its write and
  // its rename (NotFound). The first lease must exist before the sync
  // publishes anything, so it is written again; a later beat is just
  // missed (Loop). A writer's lease is what keeps its open segment in
  // staging, so there it stays an error: forcing a sync while a writer runs
  // is the caller's mistake (docs/design.md#staging).
  for (int attempt = 1; s.code() == StatusCode::kNotFound && lease->kind_ == "sync" && attempt < 5;
       ++attempt) {
    s = lease->Beat(/*durable=*/true);
  }
  RUNSTORE_RETURN_IF_ERROR(s);
  lease->thread_ = std::thread([l = lease.get()] { l->Loop(); });
  return lease;
}

Lease::~Lease() { (void)Stop(); }

Status Lease::Beat(bool durable) {
  // Through a temporary and a rename, so that a reader never sees a half
  // written lease. Only the first beat is synced: the lease must outlive a
  // power cut, so that a sync afterwards knows the temporaries named by its
  // token for a dead owner's; which beat it shows then does not matter.
  const std::string path = dir_ + "/" + LeaseName(token_);
  const std::string temp = path + ".tmp";
  const std::string text = "runstore lease\nkind " + kind_ + "\nwriter_id " + writer_id_ +
                           "\nbeat " + std::to_string(++beats_) + "\n";
  RUNSTORE_ASSIGN_OR_RETURN(auto f, env_->NewWritableFile(temp, /*exclusive=*/false));
  Status s = f->Append(text);
  if (s.ok() && durable) s = f->Sync();
  const Status c = f->Close();
  if (s.ok()) s = c;
  if (s.ok()) s = env_->RenameFile(temp, path);
  if (s.ok() && durable) s = env_->SyncDir(dir_);
  return s.WithContext("lease " + path);
}

void Lease::Loop() {
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(StagingLeaseBeatSeconds()));
  MutexLock lock(&mu_);
  auto next = std::chrono::steady_clock::now() + interval;
  while (!stop_) {
    if (cv_.WaitUntil(&mu_, next) || stop_) continue;
    if (std::chrono::steady_clock::now() < next) continue;
    next += interval;
    mu_.Unlock();
    Status s = Beat(/*durable=*/false);
    mu_.Lock();
    if (s.code() == StatusCode::kNotFound && kind_ == "sync") continue;  // see Start
    if (!s.ok() && error_.ok()) error_ = s;
  }
}

Status Lease::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return error_;
    stopped_ = true;
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  const std::string path = dir_ + "/" + LeaseName(token_);
  Status s = env_->RemoveFile(path);
  if (!s.ok() && s.code() != StatusCode::kNotFound && error_.ok()) error_ = s;
  (void)env_->RemoveFile(path + ".tmp");  // left by a beat that failed part way
  return error_;
}

// ---- Shipper.

Shipper::Shipper(Env* env, std::string staging_dir, std::string segments_dir, std::string token,
                 std::unique_ptr<Lease> lease, std::string writer_id, uint64_t first_seq)
    : env_(env),
      staging_dir_(std::move(staging_dir)),
      segments_dir_(std::move(segments_dir)),
      token_(std::move(token)),
      writer_id_(std::move(writer_id)),
      lease_(std::move(lease)),
      claim_from_(first_seq) {
  thread_ = std::thread([this] { Loop(); });
}

Shipper::~Shipper() { (void)Close(); }

void Shipper::Enqueue(std::string name, uint64_t ticket) {
  MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(name), ticket});
  cv_.SignalAll();
}

uint64_t Shipper::shipped() const {
  MutexLock lock(&mu_);
  return shipped_;
}

Result<Claimed> Shipper::ClaimFrom(uint64_t from) {
  // Another writer with the same id (on this node or another) may hold the
  // next numbers: take the first free one (docs/design.md#writer-ids).
  constexpr uint64_t kMaxNumbersTaken = 100000;
  // The writer's commits in the segment staged under this number come
  // later than this (OpenSegment makes them so, whatever the clock does).
  const format::SegmentClaim claim{env_->NowNanos(), token_};
  for (uint64_t seq = from;; ++seq) {
    const std::string name = format::SegmentFileName(writer_id_, seq);
    Status s = ClaimSegment(env_, segments_dir_, name, claim);
    if (s.ok()) {
      // Durable before the staged file exists, so that a staged segment
      // always has its placeholder after a power cut.
      RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(segments_dir_));
      return Claimed{seq, claim.not_before_ns};
    }
    if (s.code() != StatusCode::kAlreadyExists || seq - from == kMaxNumbersTaken) {
      return s.WithContext("claiming a segment number for writer '" + writer_id_ + "'");
    }
  }
}

Result<Claimed> Shipper::TakeClaim(uint64_t from) {
  MutexLock lock(&mu_);
  while (true) {
    if (!claimed_ && !claim_wanted_ && claim_error_.ok()) {
      claim_from_ = std::max(claim_from_, from);
      claim_wanted_ = true;
      cv_.SignalAll();
    }
    while (!claimed_ && claim_error_.ok()) cv_.Wait(&mu_);
    if (!claim_error_.ok()) {
      Status s = claim_error_;
      claim_error_ = Status::OK();  // the next roll tries again
      claim_wanted_ = false;
      return s;
    }
    const Claimed claimed = *claimed_;
    claimed_.reset();
    claim_from_ = std::max(claim_from_, claimed.seq + 1);
    claim_wanted_ = true;  // the next segment's, ahead of need
    cv_.SignalAll();
    if (claimed.seq >= from) return claimed;
    // Claimed before the writer moved past it (its staged name was taken):
    // a placeholder under which nothing is staged, read as an empty
    // segment. It is removed, as at Close, so that it holds no compaction
    // back.
    mu_.Unlock();
    (void)env_->RemoveFile(segments_dir_ + "/" + format::SegmentFileName(writer_id_, claimed.seq));
    mu_.Lock();
  }
}

bool Shipper::ClaimReady() {
  MutexLock lock(&mu_);
  if (claimed_) return true;
  if (!claim_error_.ok() || !claim_wanted_) {
    claim_error_ = Status::OK();  // the shared file system may be back
    claim_wanted_ = true;
    cv_.SignalAll();
  }
  return false;
}

Status Shipper::status() const {
  MutexLock lock(&mu_);
  return !error_.ok() ? error_ : last_claim_error_;
}

bool Shipper::idle() const {
  MutexLock lock(&mu_);
  return queue_.empty();
}

Status Shipper::WaitShipped(uint64_t ticket) {
  MutexLock lock(&mu_);
  while (shipped_ < ticket && error_.ok() && !(stop_ && queue_.empty())) cv_.Wait(&mu_);
  if (shipped_ >= ticket) return Status::OK();
  if (!error_.ok()) return error_;
  return Status::FailedPrecondition("ticket " + std::to_string(ticket) +
                                    " was not shipped before the writer closed");
}

Status Shipper::ShipOne(const std::string& name) {
  const std::string source = staging_dir_ + "/" + name;
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, env_->GetFileSize(source));
  RUNSTORE_ASSIGN_OR_RETURN(Published p,
                            PublishSegment(env_, source, size, segments_dir_, name, token_));
  (void)p;
  // Removed from staging only once its publication is durable: a crash
  // before leaves it for `runstore sync`, which finds it published. The
  // removal itself need not be durable (no directory sync here): a staged
  // file that a power cut brings back is found published by the next sync
  // and removed then.
  return env_->RemoveFile(source);
}

void Shipper::Loop() {
  MutexLock lock(&mu_);
  while (true) {
    while (queue_.empty() && !stop_ && !ClaimWantedLocked()) cv_.Wait(&mu_);
    // A claim first: a roll may be waiting for it, and it is quick.
    if (ClaimWantedLocked()) {
      const uint64_t from = claim_from_;
      mu_.Unlock();
      Result<Claimed> claimed = ClaimFrom(from);
      mu_.Lock();
      claim_wanted_ = false;
      if (claimed.ok()) {
        claimed_ = *claimed;
        claim_from_ = claimed->seq + 1;
        last_claim_error_ = Status::OK();
      } else {
        claim_error_ = last_claim_error_ = claimed.status();
      }
      cv_.SignalAll();
      continue;
    }
    if (queue_.empty()) break;
    Item item = queue_.front();
    if (!item.name.empty() && error_.ok()) {
      mu_.Unlock();
      Status s = ShipOne(item.name);
      mu_.Lock();
      if (!s.ok() && error_.ok()) {
        error_ = Status(s.code(), "shipping " + item.name + " from staging " + staging_dir_ +
                                      " failed, so it and the writer's later segments stay "
                                      "there for `runstore sync`: " +
                                      s.message());
      }
    }
    if (error_.ok()) shipped_ = std::max(shipped_, item.ticket);
    queue_.pop_front();
    cv_.SignalAll();
  }
}

Status Shipper::Close() {
  std::unique_ptr<Lease> lease;
  {
    MutexLock lock(&mu_);
    if (closed_) return error_;
    closed_ = true;
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  lease = std::move(lease_);
  // The number claimed ahead and never used: its placeholder would be an
  // empty segment for ever, and its claim would hold back compaction of
  // what is committed after it. (A crash leaves it so; a sync of this
  // staging directory removes it once it finds the writer dead.)
  if (claimed_) {
    // Durable before the lease goes: a power cut must not bring back a
    // claim whose lease, the only sign that its writer is dead, is gone.
    Status r =
        env_->RemoveFile(segments_dir_ + "/" + format::SegmentFileName(writer_id_, claimed_->seq));
    if (r.code() == StatusCode::kNotFound) r = Status::OK();  // a forced sync took it
    if (r.ok()) r = env_->SyncDir(segments_dir_);
    if (!r.ok() && error_.ok()) error_ = r.WithContext("removing the claim taken ahead");
    claimed_.reset();
  }
  // The lease goes last: once it is gone a sync may take what is left in
  // staging for a dead writer's (a shipping error leaves segments there).
  if (lease) {
    Status s = lease->Stop();
    if (!s.ok() && error_.ok()) error_ = s;
  }
  cv_.SignalAll();
  return error_;
}

}  // namespace staging
}  // namespace runstore
