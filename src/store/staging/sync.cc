// SyncStaging (runstore/sync.h): what a crashed or preempted staging writer
// left, shipped into the store (docs/design.md#staging).
#include "runstore/sync.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "format/claim.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "store/compact/compacted.h"
#include "store/staging/staging.h"

namespace runstore {

using compact::ForEachReplaced;
namespace {

constexpr char kSegmentsDir[] = "segments";

struct LeaseState {
  std::string text;
  std::string kind;       // "writer", "sync", or empty if unreadable
  std::string writer_id;  // of a writer's lease
};

// A lease is a few lines (staging::Lease::Beat); a file named like one and
// larger than this is not one, and is never read whole.
constexpr uint64_t kMaxLeaseBytes = 4096;
constexpr std::string_view kLeaseFirstLine = "runstore lease\n";  // then "kind ...", ...

// The lease at `path`: its state, or why it is not a lease (a special file,
// or larger than any lease): Corruption naming it. NotFound if gone. A
// regular file of a lease's size whose text does not read (a lease that a
// power cut tore: beats after the first are not synced) is a lease of an
// unknown kind, as before: alive if it changes, dead otherwise.
Result<LeaseState> ReadLease(Env* env, const std::string& path) {
  auto file = env->NewRandomAccessFile(path);  // refuses what is not a regular file
  if (!file.ok()) {
    // Not a regular file (IOError without an errno), or a directory: not a
    // lease. Anything else (no permission, out of descriptors, EIO) is what
    // it is, and stops the sync.
    const Status& e = file.status();
    if (e.code() == StatusCode::kIOError && (e.sys_errno() == 0 || e.sys_errno() == EISDIR)) {
      return Status::Corruption(path + ": not a lease: " + e.message());
    }
    return e;
  }
  RUNSTORE_ASSIGN_OR_RETURN(const uint64_t size, (*file)->Size());
  if (size > kMaxLeaseBytes) {
    return Status::Corruption(path + ": not a lease: " + std::to_string(size) +
                              " bytes, where a lease has at most " +
                              std::to_string(kMaxLeaseBytes));
  }
  std::string buf(size, '\0');
  std::string_view got;
  RUNSTORE_RETURN_IF_ERROR((*file)->Read(0, buf.size(), buf.data(), &got));
  LeaseState st;
  st.text = std::string(got);
  if (!st.text.starts_with(kLeaseFirstLine)) return st;
  size_t pos = 0;
  while (pos < st.text.size()) {
    size_t end = st.text.find('\n', pos);
    if (end == std::string::npos) end = st.text.size();
    const std::string_view line(st.text.data() + pos, end - pos);
    if (line.starts_with("kind ")) st.kind = std::string(line.substr(5));
    if (line.starts_with("writer_id ")) st.writer_id = std::string(line.substr(10));
    pos = end + 1;
  }
  return st;
}

// Every lease in `dir` but `own`, by token. What is named like a lease but
// is not one goes to `damaged` ("name: why", once each) and protects
// nothing: a writer rewrites its lease through a rename, whole, so a live
// writer's lease always reads.
Result<std::map<std::string, LeaseState>> ReadLeases(Env* env, const std::string& dir,
                                                     const std::string& own,
                                                     std::map<std::string, std::string>* damaged) {
  RUNSTORE_ASSIGN_OR_RETURN(auto children, env->GetChildren(dir));
  std::map<std::string, LeaseState> leases;
  for (const std::string& c : children) {
    std::string token;
    if (!staging::ParseLeaseName(c, &token) || token == own) continue;
    auto st = ReadLease(env, dir + "/" + c);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kNotFound) continue;  // its owner just ended
      if (st.status().code() != StatusCode::kCorruption) return st.status();
      damaged->emplace(c, st.status().message());
      continue;
    }
    leases.emplace(token, std::move(st).value());
  }
  return leases;
}

// The "<token>.lease.tmp" files among `children` (a listing of the staging
// directory) whose token has no lease in any of `reads`: left by an owner
// killed inside its first beat (before the rename that makes its lease);
// since a writer writes its lease before anything else it stages, nothing
// else of the token exists.
std::set<std::string> LeaseTempsWithoutLease(
    const std::vector<std::string>& children,
    const std::vector<std::map<std::string, LeaseState>>& reads) {
  std::set<std::string> out;
  for (const std::string& c : children) {
    std::string token;
    if (!staging::ParseLeaseTempName(c, &token)) continue;
    if (std::none_of(reads.begin(), reads.end(), [&](const auto& r) { return r.count(token); })) {
      out.insert(c);
    }
  }
  return out;
}

// How many bytes of a staged segment to publish: all of a sealed one; of an
// unsealed one the committed prefix, which reads in the store as a crashed
// writer's segment (docs/format.md "Recovery").
Result<uint64_t> BytesToPublish(Env* env, const std::string& path, const std::string& name) {
  RUNSTORE_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  format::SegmentIndex index;
  RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(*file, name, &index));
  if (index.sealed) return size;
  return index.commits.empty() ? 0 : index.committed_end;
}

class Syncer {
 public:
  Syncer(Env* env, std::string staging_dir, std::string store_path, const SyncOptions& options,
         SyncReport* report)
      : env_(env),
        staging_(std::move(staging_dir)),
        segments_(std::move(store_path) + "/" + kSegmentsDir),
        options_(options),
        report_(report) {}

  Status Run(const std::string& store_path) {
    RUNSTORE_RETURN_IF_ERROR(CheckDirs(store_path));
    token_ = staging::NewOwnerToken();
    // Our own lease, so that a sync running beside us leaves our temporaries.
    RUNSTORE_ASSIGN_OR_RETURN(auto lease,
                              staging::Lease::Start(env_, staging_, token_, "sync", ""));
    Status s = ShipAndClean();
    const Status l = lease->Stop();
    return s.ok() ? l : s;
  }

 private:
  Status CheckDirs(const std::string& store_path) {
    RUNSTORE_RETURN_IF_ERROR(CheckStoreAndStaging(store_path));
    return staging::CheckApart(env_, staging_, store_path);
  }

  Status CheckStoreAndStaging(const std::string& store_path) {
    auto staging_is_dir = env_->IsDirectory(staging_);
    if (!staging_is_dir.ok()) {
      return staging_is_dir.status().WithContext("staging directory " + staging_);
    }
    if (!*staging_is_dir) {
      return Status::InvalidArgument("staging directory " + staging_ + " is not a directory");
    }
    if (Status m = env_->FileExists(store_path + "/RUNSTORE"); !m.ok()) {
      return m.code() == StatusCode::kNotFound
                 ? Status::NotFound(store_path + " is not a runstore store (no RUNSTORE marker)")
                 : m;
    }
    auto seg_is_dir = env_->IsDirectory(segments_);
    if (!seg_is_dir.ok()) return seg_is_dir.status().WithContext("store segments directory");
    return Status::OK();
  }

  // Which leases beat while we watched: a lease that is new or changed
  // between any two of our reads is alive; one we saw in the first read and
  // that never changed is dead (its owner stopped beating for longer than
  // the beat interval). A lease gone by the last read was removed by its
  // owner on a clean close.
  void Classify(const std::vector<std::map<std::string, LeaseState>>& reads) {
    const auto& first = reads.front();
    std::set<std::string> tokens;
    for (const auto& r : reads) {
      for (const auto& [t, st] : r) tokens.insert(t);
    }
    for (const std::string& t : tokens) {
      bool alive = false;
      const LeaseState* last = nullptr;
      const LeaseState* seen = nullptr;
      for (const auto& r : reads) {
        auto it = r.find(t);
        if (it == r.end()) continue;
        if (seen && seen->text != it->second.text) alive = true;
        seen = last = &it->second;
      }
      if (!first.count(t)) alive = true;  // appeared while we watched
      if (options_.force) alive = false;
      if (alive) {
        if (last->kind == "writer") alive_ids_.insert(last->writer_id);
        if (last->kind != "writer" && last->kind != "sync") unknown_alive_ = true;
      } else if (first.count(t)) {
        dead_[t] = first.at(t);
      }
    }
  }

  Status ShipAndClean() {
    std::vector<std::map<std::string, LeaseState>> reads;
    RUNSTORE_ASSIGN_OR_RETURN(auto l0, ReadLeases(env_, staging_, token_, &damaged_leases_));
    reads.push_back(std::move(l0));
    RUNSTORE_ASSIGN_OR_RETURN(auto children0, env_->GetChildren(staging_));
    const std::set<std::string> temps0 = LeaseTempsWithoutLease(children0, reads);
    Progress(0, 0);
    if (!options_.force) {
      std::this_thread::sleep_for(std::chrono::duration<double>(options_.wait_s));
      RUNSTORE_ASSIGN_OR_RETURN(auto l1, ReadLeases(env_, staging_, token_, &damaged_leases_));
      reads.push_back(std::move(l1));
    }
    // The staged segments, listed after the watch and before the last read:
    // a writer writes its lease before its first segment, so the lease of
    // any segment listed here is in that read.
    RUNSTORE_ASSIGN_OR_RETURN(auto children, env_->GetChildren(staging_));
    RUNSTORE_ASSIGN_OR_RETURN(auto l2, ReadLeases(env_, staging_, token_, &damaged_leases_));
    reads.push_back(std::move(l2));
    Classify(reads);
    // Lease temporaries with no lease, there before the watch and after it
    // (with force: at once): their owner died in its first beat.
    const std::set<std::string> temps1 = LeaseTempsWithoutLease(children, reads);
    for (const std::string& c : temps0) {
      if (temps1.count(c)) orphan_lease_temps_.push_back(c);
    }

    std::map<std::string, std::vector<uint64_t>> staged;  // writer id -> numbers
    for (const std::string& c : children) {
      std::string id;
      uint64_t seq;
      if (format::ParseSegmentFileName(c, &id, &seq)) staged[id].push_back(seq);
    }
    size_t total = 0, done = 0;
    for (const auto& [id, seqs] : staged) total += seqs.size();
    Progress(0, total);
    Status first_error;
    std::set<std::string> ids_left;  // writer ids with segments still staged
    for (auto& [id, seqs] : staged) {
      std::sort(seqs.begin(), seqs.end());
      if (unknown_alive_ || alive_ids_.count(id)) {
        for (uint64_t seq : seqs) report_->skipped.push_back(format::SegmentFileName(id, seq));
        ids_left.insert(id);
        Progress(done += seqs.size(), total);
        continue;
      }
      // In order: a segment names the one before it as sealed, so that one
      // must be in the store first (docs/format.md "Recovery", rule 9).
      for (uint64_t seq : seqs) {
        Status s = ShipOne(format::SegmentFileName(id, seq));
        Progress(++done, total);
        if (!s.ok()) {
          if (first_error.ok()) first_error = s;
          ids_left.insert(id);
          break;
        }
      }
      if (Status d = env_->SyncDir(staging_); !d.ok() && first_error.ok()) first_error = d;
    }
    Progress(total, total);
    if (Status c = CleanLeftovers(ids_left); !c.ok() && first_error.ok()) first_error = c;
    for (const auto& [name, why] : damaged_leases_) {
      // Reported like a damaged staged segment, once everything else is
      // shipped; left for a person to look at.
      report_->damaged_leases.push_back(name + ": " + why);
      if (first_error.ok()) {
        first_error = Status::Corruption(why +
                                         " (skipped; everything else was synced; remove it "
                                         "once you know what it is)");
      }
    }
    return first_error;
  }

  void Progress(size_t done, size_t total) const {
    if (options_.progress) options_.progress(done, total, report_->bytes_shipped);
  }

  Status ShipOne(const std::string& name) {
    const std::string path = staging_ + "/" + name;
    auto length = BytesToPublish(env_, path, name);
    if (!length.ok()) {
      if (length.status().code() == StatusCode::kNotFound)
        return Status::OK();  // shipped meanwhile
      return length.status().WithContext("staged segment " + path + " (left in staging)");
    }
    if (*length > 0) {
      auto p = staging::PublishSegment(env_, path, *length, segments_, name, token_);
      if (!p.ok()) {
        if (p.status().code() == StatusCode::kNotFound &&
            env_->FileExists(path).code() == StatusCode::kNotFound) {
          return Status::OK();  // another sync shipped it and removed it meanwhile
        }
        if (p.status().code() != StatusCode::kNotFound) return p.status();
        // The placeholder is gone: the segment may have been published (by
        // its writer, killed before it removed the staged copy) and then
        // merged away by a compaction. Then a compacted segment names it,
        // by its header's writer id, number and creation time.
        RUNSTORE_ASSIGN_OR_RETURN(bool compacted, CompactedAway(path, name));
        if (!compacted) return p.status();
        report_->already_published.push_back(name);
        Status r = env_->RemoveFile(path);
        if (!r.ok() && r.code() != StatusCode::kNotFound) return r;
        return Status::OK();
      }
      if (*p == staging::Published::kShipped) {
        report_->shipped.push_back(name);
        report_->bytes_shipped += *length;
      } else {
        report_->already_published.push_back(name);
      }
    } else {
      // No commit in it: its placeholder in the store reads as the empty
      // segment it is.
      report_->cleaned.push_back(name);
    }
    // Only after the publication is durable (PublishSegment synced the
    // store's directory).
    Status r = env_->RemoveFile(path);
    if (!r.ok() && r.code() != StatusCode::kNotFound) return r;
    return Status::OK();
  }

  // Whether a compaction in the store names the staged segment at `path` as
  // one it replaced.
  Result<bool> CompactedAway(const std::string& path, const std::string& name) {
    RUNSTORE_ASSIGN_OR_RETURN(auto file, env_->NewRandomAccessFile(path));
    format::SegmentIndex index;
    RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(*file, name, &index));
    const format::SegmentId id{index.header.writer_id, index.header.sequence,
                               index.header.created_ns};
    RUNSTORE_ASSIGN_OR_RETURN(auto children, env_->GetChildren(segments_));
    bool found = false;
    RUNSTORE_RETURN_IF_ERROR(ForEachReplaced(
        env_, segments_, children, [&](const format::SegmentId& s) { found |= s == id; }));
    return found;
  }

  // Temporaries of dead publishers in the store's segments/, the claims of
  // dead writers under which nothing is staged, and the dead leases, once
  // nothing they protected is left in staging.
  Status CleanLeftovers(const std::set<std::string>& ids_left) {
    // Removes dir/name; what is gone already (another sync) is not an error.
    auto remove = [&](const std::string& dir, const std::string& name,
                      const std::string& reported) -> Status {
      Status r = env_->RemoveFile(dir + "/" + name);
      if (!r.ok() && r.code() != StatusCode::kNotFound) return r;
      if (r.ok()) report_->cleaned.push_back(reported);
      return Status::OK();
    };
    RUNSTORE_ASSIGN_OR_RETURN(auto in_store, env_->GetChildren(segments_));
    for (const std::string& c : in_store) {
      std::string segment, token;
      if (!staging::ParseTempName(c, &segment, &token)) continue;
      if (!dead_.count(token) && token != token_) continue;  // live, or another node's
      RUNSTORE_RETURN_IF_ERROR(remove(segments_, c, std::string(kSegmentsDir) + "/" + c));
    }
    RUNSTORE_RETURN_IF_ERROR(ReleaseDeadClaims(in_store, remove));
    // The removals durable before the leases that name their tokens go: a
    // power cut could otherwise bring back a temporary with no lease left
    // to tell whose it is, or a claim that nobody would release.
    RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(segments_));
    for (const auto& [token, st] : dead_) {
      if (st.kind == "writer" && ids_left.count(st.writer_id)) continue;
      for (const std::string& name :
           {staging::LeaseName(token), staging::LeaseName(token) + ".tmp"}) {
        RUNSTORE_RETURN_IF_ERROR(remove(staging_, name, name));
      }
    }
    for (const std::string& name : orphan_lease_temps_) {
      RUNSTORE_RETURN_IF_ERROR(remove(staging_, name, name));
    }
    return env_->SyncDir(staging_);
  }

  // A dead writer's claims in the store under which nothing is staged here
  // (the number it claimed ahead, a staged segment without a commit that
  // was just removed): removed, so that they hold back no compaction
  // (docs/design.md#compaction-and-staging). A claim is the dead writer's
  // only if it holds the writer's token, the name of its lease: another
  // writer with the same id, alive on another node, keeps its own. The
  // files of the dead writers' ids are looked at, and every file if a dead
  // lease was torn (its writer id unreadable).
  template <typename Remove>
  Status ReleaseDeadClaims(const std::vector<std::string>& in_store, const Remove& remove) {
    std::set<std::string> dead_ids, dead_tokens;
    bool any_id = false;
    for (const auto& [token, st] : dead_) {
      if (st.kind == "sync") continue;
      dead_tokens.insert(token);
      if (st.kind == "writer") {
        dead_ids.insert(st.writer_id);
      } else {
        any_id = true;
      }
    }
    if (dead_tokens.empty()) return Status::OK();
    RUNSTORE_ASSIGN_OR_RETURN(auto staged_now, env_->GetChildren(staging_));
    const std::set<std::string> staged(staged_now.begin(), staged_now.end());
    for (const std::string& c : in_store) {
      std::string id;
      uint64_t seq;
      if (!format::ParseSegmentFileName(c, &id, &seq) || (!any_id && !dead_ids.count(id)) ||
          staged.count(c)) {
        continue;
      }
      const std::string path = segments_ + "/" + c;
      auto size = env_->GetFileSize(path);
      if (!size.ok() || *size != format::kClaimSize) continue;
      auto bytes = ReadFileToString(env_, path);
      if (!bytes.ok()) continue;
      const auto claim = format::DecodeClaim(*bytes, c);
      if (!claim || !dead_tokens.count(claim->owner_token)) continue;
      RUNSTORE_RETURN_IF_ERROR(remove(segments_, c, std::string(kSegmentsDir) + "/" + c));
    }
    return Status::OK();
  }

  Env* const env_;
  const std::string staging_;
  const std::string segments_;
  const SyncOptions options_;
  SyncReport* const report_;
  std::string token_;
  std::set<std::string> alive_ids_;
  std::vector<std::string> orphan_lease_temps_;
  bool unknown_alive_ = false;  // a live lease that names no writer we can read
  std::map<std::string, LeaseState> dead_;
  std::map<std::string, std::string> damaged_leases_;  // name -> why
};

}  // namespace

Status SyncStaging(const std::string& staging_dir, const std::string& store_path,
                   const SyncOptions& options, SyncReport* report) {
  SyncReport local;
  // Watching for less than two beats would take live writers for dead.
  if (!options.force && !(options.wait_s >= 2 * StagingLeaseBeatSeconds())) {
    char msg[200];
    std::snprintf(msg, sizeof(msg),
                  "sync must watch the leases for at least %g s (two beats) to tell live writers "
                  "from dead ones, got a wait of %g s; use force if no writer can be running",
                  2 * StagingLeaseBeatSeconds(), options.wait_s);
    return Status::InvalidArgument(msg);
  }
  Syncer syncer(options.env ? options.env : Env::Default(), staging_dir, store_path, options,
                report ? report : &local);
  return syncer.Run(store_path);
}

}  // namespace runstore
