// Store::Compact (docs/design.md#compaction): removing what earlier
// compactions left, planning, claiming the inputs, merging them into
// temporary parts, publishing the parts, and removing the inputs.
#include "store/compact/compact.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "format/claim.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "store/compact/compact_internal.h"
#include "util/random.h"

namespace runstore::compact {
using read::LoadedSegment;
using read::SnapshotImpl;

namespace {

Status RemoveIfThere(Env* env, const std::string& path) {
  Status s = env->RemoveFile(path);
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

class Compaction {
 public:
  Compaction(Env* env, const std::string& store_path, CompactionHost* host,
             const CompactOptions& options, CompactReport* report)
      : env_(env),
        dir_(store_path + "/" + kSegmentsDir),
        host_(host),
        options_(options),
        report_(report),
        token_(RandomHex16()),
        writer_id_(std::string(kCompactWriterPrefix) + token_) {}

  ~Compaction() {
    // On any failure: what this compaction made and did not publish goes.
    // (A crash leaves it to the next compaction, through the lease.)
    for (const std::string& name : temps_) (void)RemoveIfThere(env_, dir_ + "/" + name);
    (void)ReleaseClaims();
    if (lease_) (void)lease_->Remove();
  }

  Status Run() {
    RUNSTORE_ASSIGN_OR_RETURN(CompactionView view, host_->RefreshForCompaction());
    RUNSTORE_RETURN_IF_ERROR(CheckUndamaged(view));
    if (!options_.dry_run) {
      RUNSTORE_ASSIGN_OR_RETURN(lease_, Lease::Start(env_, dir_, token_, options_.lease_refresh_s));
      RUNSTORE_RETURN_IF_ERROR(RemoveLeftovers(view));
      if (!report_->removed_leftovers.empty()) {
        RUNSTORE_ASSIGN_OR_RETURN(view, host_->RefreshForCompaction());
      }
    }
    RUNSTORE_ASSIGN_OR_RETURN(std::vector<std::string> inputs, PlanNames(view, Candidates(view)));
    if (options_.dry_run) return Report(view, inputs);
    if (inputs.empty()) {
      RUNSTORE_RETURN_IF_ERROR(lease_->Remove());
      lease_.reset();
      return Report(view, inputs);
    }
    // Claim the inputs, then plan again on a fresh view with those claimed:
    // another compaction may have taken some, or published meanwhile.
    RUNSTORE_RETURN_IF_ERROR(Claim(inputs));
    RUNSTORE_ASSIGN_OR_RETURN(view, host_->RefreshForCompaction());
    RUNSTORE_RETURN_IF_ERROR(CheckUndamaged(view));
    std::vector<uint32_t> claimed;
    const auto& segs = view.snapshot->segments();
    for (uint32_t i = 0; i < segs.size(); ++i) {
      if (claimed_names_.contains(FileOf(*segs[i]))) claimed.push_back(i);
    }
    RUNSTORE_ASSIGN_OR_RETURN(inputs, PlanNames(view, claimed));
    if (!inputs.empty()) {
      RUNSTORE_RETURN_IF_ERROR(Merge(view, inputs));
      RUNSTORE_RETURN_IF_ERROR(Publish());
    }
    RUNSTORE_RETURN_IF_ERROR(ReleaseClaims());
    RUNSTORE_RETURN_IF_ERROR(lease_->Remove());
    lease_.reset();
    return Report(view, inputs);
  }

 private:
  static Status CheckUndamaged(const CompactionView& view) {
    const auto& damaged = view.snapshot->DamagedSegments();
    if (damaged.empty()) return Status::OK();
    return Status::FailedPrecondition("compaction needs every segment readable, and " +
                                      damaged.front().file +
                                      " is damaged: " + damaged.front().status.ToString());
  }

  std::string FileOf(const LoadedSegment& seg) const {
    return seg.file.substr(std::string(kSegmentsDir).size() + 1);
  }

  // An unsealed segment that adopt_unsealed lets this compaction merge: a
  // writer's (a compaction's parts are published sealed) with a commit, or
  // with a header and no commit (a writer killed before its first commit,
  // whose flushed bytes no reader reads: adopted with nothing merged, so
  // that its bytes are reclaimed). A staging claim (kClaimSize bytes, less
  // than a header) is never one.
  bool Adoptable(const LoadedSegment& seg) const {
    return options_.adopt_unsealed && !seg.index.sealed &&
           (!seg.index.commits.empty() || seg.index.file_size >= format::kSegmentHeaderSize) &&
           !seg.index.header.writer_id.starts_with(kCompactWriterPrefix);
  }

  // Sealed segments (and, with adopt_unsealed, crashed writers' unsealed
  // ones) that pass the filters, without series whose blocks
  // disagree on their type (which of them defines the series depends on
  // commit order, so none of them is moved).
  std::vector<uint32_t> Candidates(const CompactionView& view) const {
    const SnapshotImpl& snap = *view.snapshot;
    const StoreSchema schema = snap.Schema();
    std::set<std::string> conflicted;
    for (const auto& seg : snap.segments()) {
      for (const auto& b : seg->index.blocks) {
        auto it = schema.find(b.header.name.str());
        if (it == schema.end()) continue;
        const SeriesSchema& s = it->second;
        if (b.header.dtype != s.dtype || b.header.variable_shape != s.variable_shape ||
            (!s.variable_shape && b.header.dims != s.shape)) {
          conflicted.insert(b.header.name);
        }
      }
    }
    std::vector<uint32_t> out;
    const int64_t now = env_->NowNanos();
    const std::set<std::string> held = PartsWithRetainedInputs(view);
    for (uint32_t i = 0; i < snap.segments().size(); ++i) {
      const LoadedSegment& seg = *snap.segments()[i];
      if (!(seg.index.sealed || Adoptable(seg)) || held.contains(FileOf(seg))) continue;
      if (options_.older_than_s > 0 &&
          static_cast<double>(now - seg.index.header.created_ns) < options_.older_than_s * 1e9) {
        continue;
      }
      if (options_.smaller_than_bytes > 0 && seg.index.file_size >= options_.smaller_than_bytes) {
        continue;
      }
      const bool holds_conflict = std::any_of(
          seg.index.blocks.begin(), seg.index.blocks.end(),
          [&](const format::BlockInfo& b) { return conflicted.contains(b.header.name); });
      if (holds_conflict) continue;
      out.push_back(i);
    }
    return out;
  }

  // The planner's run sets (about 20 bytes a run per segment: 30 MiB for
  // 10,000 segments of 100 runs) are freed by now, but glibc keeps freed
  // small chunks resident inside its heap, where the merge's budget does not
  // count them; they are handed back before the merge starts
  // (docs/design.md#compaction-memory).
  static void ReturnFreedHeap() {
#if defined(__GLIBC__)
    ::malloc_trim(0);
#endif
  }

  // The least bound among the claims of segments that may be staged and
  // not yet published (docs/design.md#compaction-and-staging): placeholders
  // in segments/ holding a claim record. INT64_MAX if there is none. An
  // empty placeholder claims nothing that was staged (its record is synced
  // before the staged file exists).
  Result<int64_t> StagedNotBefore(const CompactionView& view) {
    int64_t bound = INT64_MAX;
    report_->staged.clear();
    for (const auto& [name, seg] : view.all) {
      if (!seg->index.commits.empty() || seg->index.file_size != format::kClaimSize) continue;
      auto bytes = ReadFileToString(env_, seg->path());
      if (!bytes.ok()) {
        // Published or removed since the listing: then it is no claim.
        if (bytes.status().code() == StatusCode::kNotFound) continue;
        return bytes.status().WithContext("reading the placeholder " + seg->file);
      }
      const auto claim = format::DecodeClaim(*bytes, name);
      if (!claim) continue;
      report_->staged.push_back(seg->file);
      bound = std::min(bound, claim->not_before_ns);
    }
    return bound;
  }

  Result<std::vector<std::string>> PlanNames(const CompactionView& view,
                                             const std::vector<uint32_t>& candidates) {
    RUNSTORE_ASSIGN_OR_RETURN(const int64_t staged_not_before, StagedNotBefore(view));
    RUNSTORE_ASSIGN_OR_RETURN(Plan plan, PlanCompaction(*view.snapshot, candidates, writer_id_,
                                                        options_.min_inputs, staged_not_before));
    ReturnFreedHeap();
    const auto& segs = view.snapshot->segments();
    for (uint32_t i : plan.excluded) {
      if (std::find(report_->excluded.begin(), report_->excluded.end(), segs[i]->file) ==
          report_->excluded.end()) {
        report_->excluded.push_back(segs[i]->file);
      }
    }
    for (uint32_t i : plan.held_back) {
      if (std::find(report_->held_back.begin(), report_->held_back.end(), segs[i]->file) ==
          report_->held_back.end()) {
        report_->held_back.push_back(segs[i]->file);
      }
    }
    std::vector<std::string> names;
    for (uint32_t i : plan.inputs) names.push_back(FileOf(*segs[i]));
    time_ns_ = plan.time_ns;
    return names;
  }

  // Each input's claim `<name>.claim`, created O_EXCL and holding this
  // compaction's token: two running compactions never share an input. An
  // input claimed by another is left out.
  Status Claim(const std::vector<std::string>& inputs) {
    for (const std::string& name : inputs) {
      const std::string path = dir_ + "/" + name + std::string(kClaimSuffix);
      auto f = env_->NewWritableFile(path, /*exclusive=*/true);
      if (!f.ok()) {
        if (f.status().code() == StatusCode::kAlreadyExists) continue;
        return f.status();
      }
      claims_.push_back(path);
      RUNSTORE_RETURN_IF_ERROR((*f)->Append(token_ + "\n"));
      RUNSTORE_RETURN_IF_ERROR((*f)->Close());
      claimed_names_.insert(name);
    }
    return Status::OK();
  }

  Status ReleaseClaims() {
    Status first;
    for (const std::string& path : claims_) {
      Status s = RemoveIfThere(env_, path);
      if (first.ok()) first = s;
    }
    claims_.clear();
    return first;
  }

  Status Merge(const CompactionView& view, const std::vector<std::string>& inputs) {
    std::vector<std::shared_ptr<const LoadedSegment>> segs;
    format::Replaces replaces;
    for (const std::string& name : inputs) {
      const auto& seg = view.all.at(name);
      segs.push_back(seg);
      replaces.segments.push_back(IdOf(*seg));
      report_->input_bytes += seg->index.file_size;
      // An unsealed input: what is merged of it is its commits up to here.
      if (!seg->index.sealed) {
        adopted_.push_back(format::AdoptedSegment{IdOf(*seg), seg->index.committed_end});
        report_->adopted.push_back(seg->file);
      }
    }
    std::sort(adopted_.begin(), adopted_.end());
    // An input that is itself compacted passes on what it replaces and is
    // still there (a crash before its inputs were removed): those stay
    // replaced once the input is gone. What it replaced that is gone, and
    // what it names as replaced earlier, are named as replaced earlier: not
    // for readers (nothing is there to leave out, and naming them in the
    // replaces section would make the two groups overlap), but so that a
    // staged copy of one still counts as published for sync, and a writer
    // of its id still numbers past it (docs/design.md#compaction-replaces).
    std::vector<format::SegmentId> earlier;
    for (const CompactionGroup& g : view.resolution.groups) {
      if (!g.accepted || std::none_of(g.parts.begin(), g.parts.end(), [&](const std::string& p) {
            return std::find(inputs.begin(), inputs.end(), p) != inputs.end();
          })) {
        continue;
      }
      for (const format::SegmentId& id : g.replaces.segments) {
        auto it = view.all.find(format::SegmentFileName(id.writer_id, id.sequence));
        if (it != view.all.end() && IdOf(*it->second) == id) {
          replaces.segments.push_back(id);
        } else {
          earlier.push_back(id);
        }
      }
    }
    for (const auto& seg : segs) {
      auto it = seg->index.footer_sections.find(format::kFooterSectionReplacedEarlier);
      if (it == seg->index.footer_sections.end()) continue;
      format::Replaces r;
      // Refused rather than dropped: the output would no longer name them.
      RUNSTORE_RETURN_IF_ERROR(format::DecodeReplaces(it->second, seg->file, &r, it->first));
      earlier.insert(earlier.end(), r.segments.begin(), r.segments.end());
    }
    auto sort_unique = [](std::vector<format::SegmentId>* v) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    };
    sort_unique(&replaces.segments);
    sort_unique(&earlier);
    std::erase_if(earlier, [&](const format::SegmentId& id) {
      return std::binary_search(replaces.segments.begin(), replaces.segments.end(), id);
    });
    replaced_ = replaces.segments;
    MergeResult result;
    Status s = MergeSegments(env_, dir_, segs, writer_id_, time_ns_, std::move(replaces),
                             std::move(earlier), adopted_, options_, &result);
    temps_ = result.temp_names;
    RUNSTORE_RETURN_IF_ERROR(s);
    report_->input_records = result.input_records;
    report_->output_records = result.output_records;
    for (uint64_t b : result.part_bytes) report_->output_bytes += b;
    return Status::OK();
  }

  // Publishing (invariant 5): every part was synced by its seal; rename them
  // all into place and sync the directory. Only then are the inputs removed:
  // until the directory holds every part, readers read the inputs.
  Status Publish() {
    RUNSTORE_RETURN_IF_ERROR(lease_->status());
    std::vector<std::string> published;
    for (const std::string& tmp : temps_) {
      const std::string name = tmp.substr(0, tmp.size() - kTempSuffix.size());
      RUNSTORE_RETURN_IF_ERROR(env_->RenameFile(dir_ + "/" + tmp, dir_ + "/" + name));
      published.push_back(name);
    }
    temps_.clear();
    RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(dir_));
    // Does the output stand? Only a compaction that took over this one's
    // claims (believing it dead) can have published over the same inputs.
    RUNSTORE_ASSIGN_OR_RETURN(CompactionView view, host_->RefreshForCompaction());
    const CompactionGroup* mine = nullptr;
    for (const CompactionGroup& g : view.resolution.groups) {
      if (g.writer_id == writer_id_) mine = &g;
    }
    if (!mine || !mine->accepted) {
      for (const std::string& name : published)
        RUNSTORE_RETURN_IF_ERROR(RemoveIfThere(env_, dir_ + "/" + name));
      RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(dir_));
      if (mine && mine->voided) {
        return Status::FailedPrecondition(
            dir_ + ": the compacted segments " + writer_id_ +
            " were withdrawn: the writer of a segment it adopted committed after the "
            "compaction read it, so it was no crashed writer's (adopt_unsealed asserts that no "
            "writer runs); nothing was changed");
      }
      return Status::FailedPrecondition(
          dir_ + ": the compacted segments " + writer_id_ +
          " were withdrawn: another compaction published over the same inputs first");
    }
    for (const std::string& name : published)
      report_->outputs.push_back(std::string(kSegmentsDir) + "/" + name);
    if (options_.retain_inputs_s > 0) {
      for (const std::string& name : PresentInputs(view, *mine)) {
        report_->retained.push_back(std::string(kSegmentsDir) + "/" + name);
      }
      return Status::OK();
    }
    return RemoveInputs(view, *mine, /*report=*/false);
  }

  // Removes the present inputs of accepted group `g`: first the segments it
  // adopted, each only while it holds no commit past what was merged of it
  // (RemoveAdopted), and the others only if every adopted one went, so that
  // a group that stops standing (an adopted segment's writer was alive)
  // still has every input for its readers (docs/design.md#adoption).
  Status RemoveInputs(const CompactionView& view, const CompactionGroup& g, bool report) {
    std::vector<std::string> inputs = PresentInputs(view, g);
    for (const format::AdoptedSegment& a : g.adopted) {
      const std::string name = format::SegmentFileName(a.id.writer_id, a.id.sequence);
      auto it = std::find(inputs.begin(), inputs.end(), name);
      if (it == inputs.end()) continue;
      RUNSTORE_ASSIGN_OR_RETURN(const bool removed, RemoveAdopted(name, a));
      if (!removed) return env_->SyncDir(dir_);
      inputs.erase(it);
      if (report) report_->removed_leftovers.push_back(std::string(kSegmentsDir) + "/" + name);
    }
    for (const std::string& name : inputs) {
      RUNSTORE_RETURN_IF_ERROR(RemoveIfThere(env_, dir_ + "/" + name));
      if (report) report_->removed_leftovers.push_back(std::string(kSegmentsDir) + "/" + name);
    }
    return env_->SyncDir(dir_);
  }

  // Removes adopted segment `name` if it still holds only what was merged of
  // it (true), or leaves it (false). No pid, lock or clock can prove its
  // writer dead, so the file is read through a handle opened before the
  // removal, and read again after it: a commit that landed between the two
  // (a writer alive after all, which the caller asserted none was) is put
  // back under its name with the publish protocol, and the group stops
  // standing. A writer whose file was removed fails its next sync (the POSIX
  // Env's, docs/design.md#adoption) instead of committing into a file no one
  // can read.
  Result<bool> RemoveAdopted(const std::string& name, const format::AdoptedSegment& a) {
    const std::string path = dir_ + "/" + name;
    auto file = env_->NewRandomAccessFile(path);
    if (!file.ok()) {
      return file.status().code() == StatusCode::kNotFound ? Result<bool>(true) : file.status();
    }
    format::SegmentIndex index;
    RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(**file, path, &index));
    if (!(IdOfIndex(index) == a.id)) return true;  // another file took the name: not ours
    if (index.committed_end > a.committed_end) return false;
    RUNSTORE_RETURN_IF_ERROR(RemoveIfThere(env_, path));
    RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(**file, path, &index));
    if (index.committed_end <= a.committed_end) return true;
    // Committed to meanwhile: back under its name, whole.
    RUNSTORE_ASSIGN_OR_RETURN(const uint64_t size, (*file)->Size());
    // A name of this compaction's token: a crash leaves it to the next one.
    const std::string tmp = dir_ + "/" + writer_id_ + ".restore." + name + std::string(kTempSuffix);
    {
      RUNSTORE_ASSIGN_OR_RETURN(auto out, env_->NewWritableFile(tmp, /*exclusive=*/true));
      std::string buf(std::min<uint64_t>(size, uint64_t{4} << 20), '\0');
      for (uint64_t at = 0; at < size;) {
        std::string_view got;
        RUNSTORE_RETURN_IF_ERROR(
            (*file)->Read(at, std::min<uint64_t>(buf.size(), size - at), buf.data(), &got));
        if (got.empty()) break;
        RUNSTORE_RETURN_IF_ERROR(out->Append(got));
        at += got.size();
      }
      RUNSTORE_RETURN_IF_ERROR(out->Sync());
      RUNSTORE_RETURN_IF_ERROR(out->Close());
    }
    RUNSTORE_RETURN_IF_ERROR(env_->RenameFile(tmp, path));
    RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(dir_));
    return false;
  }

  static format::SegmentId IdOfIndex(const format::SegmentIndex& index) {
    return format::SegmentId{index.header.writer_id, index.header.sequence,
                             index.header.created_ns};
  }

  // The present segments that accepted group `g` replaces, by file name.
  static std::vector<std::string> PresentInputs(const CompactionView& view,
                                                const CompactionGroup& g) {
    std::vector<std::string> out;
    for (const format::SegmentId& id : g.replaces.segments) {
      const std::string name = format::SegmentFileName(id.writer_id, id.sequence);
      if (view.resolution.replaced.contains(name)) out.push_back(name);
    }
    return out;
  }

  // Whether the replacement made by `g` is at least retain_inputs_s old, by
  // the newest of its parts' created_ns.
  bool PastRetention(const CompactionView& view, const CompactionGroup& g) const {
    if (options_.retain_inputs_s <= 0) return true;
    int64_t created = 0;
    for (const std::string& part : g.parts) {
      auto it = view.all.find(part);
      if (it != view.all.end()) created = std::max(created, it->second->index.header.created_ns);
    }
    return static_cast<double>(env_->NowNanos() - created) >= options_.retain_inputs_s * 1e9;
  }

  // Parts of accepted groups whose inputs are still there: never merged
  // again, so that a replaced segment is always removed before the segment
  // that replaces it is (a crash between the two would bring it back).
  static std::set<std::string> PartsWithRetainedInputs(const CompactionView& view) {
    std::set<std::string> out;
    for (const CompactionGroup& g : view.resolution.groups) {
      if (g.accepted && !PresentInputs(view, g).empty()) out.insert(g.parts.begin(), g.parts.end());
    }
    return out;
  }

  // What earlier compactions left: segments an accepted compaction replaces
  // (a crash before their removal), and the temporaries, claims, leases and
  // unpublished parts of compactions whose lease is stale.
  Status RemoveLeftovers(const CompactionView& view) {
    std::vector<std::string> remove;
    for (const CompactionGroup& g : view.resolution.groups) {
      if (!g.accepted) continue;
      const std::vector<std::string> inputs = PresentInputs(view, g);
      if (inputs.empty()) continue;
      if (PastRetention(view, g)) {
        RUNSTORE_RETURN_IF_ERROR(RemoveInputs(view, g, /*report=*/true));
        continue;
      }
      for (const std::string& name : inputs) {
        report_->retained.push_back(std::string(kSegmentsDir) + "/" + name);
      }
    }
    RUNSTORE_ASSIGN_OR_RETURN(auto children, env_->GetChildren(dir_));
    std::set<std::string> not_standing;  // parts of groups that do not stand
    for (const CompactionGroup& g : view.resolution.groups) {
      if (!g.accepted) not_standing.insert(g.parts.begin(), g.parts.end());
    }
    std::map<std::string, std::vector<std::string>> by_token;
    // Claims without a token: one being created right now, or one whose
    // unsynced token a power cut took. Removed if still empty after the
    // observation.
    std::vector<std::string> empty_claims;
    for (const std::string& c : children) {
      std::string token;
      if (c.ends_with(kClaimSuffix)) {
        auto r = ReadFileToString(env_, dir_ + "/" + c);
        if (!r.ok()) continue;  // removed meanwhile, or unreadable: left alone
        if (r->empty()) empty_claims.push_back(c);
        token = r->substr(0, r->find('\n'));
      } else if (c.ends_with(kLeaseSuffix) || c.ends_with(kTempSuffix) ||
                 not_standing.contains(c)) {
        token = TokenOfName(c);
      }
      if (token.empty() || token == token_) continue;
      by_token[token].push_back(c);
    }
    std::set<std::string> tokens;
    for (const auto& [t, files] : by_token) tokens.insert(t);
    RUNSTORE_ASSIGN_OR_RETURN(
        std::set<std::string> stale,
        StaleTokens(env_, dir_, tokens,
                    tokens.empty() && empty_claims.empty() ? 0 : options_.lease_expiry_s));
    for (const std::string& c : empty_claims) {
      auto r = ReadFileToString(env_, dir_ + "/" + c);
      if (r.ok() && r->empty()) remove.push_back(c);
    }
    for (const std::string& t : stale) {
      // The lease last: while it is there, a file of the token may still be
      // found and judged by it.
      std::vector<std::string> files = by_token[t];
      std::stable_partition(files.begin(), files.end(),
                            [](const std::string& f) { return !f.ends_with(kLeaseSuffix); });
      remove.insert(remove.end(), files.begin(), files.end());
    }
    for (const std::string& name : remove) {
      RUNSTORE_RETURN_IF_ERROR(RemoveIfThere(env_, dir_ + "/" + name));
      report_->removed_leftovers.push_back(std::string(kSegmentsDir) + "/" + name);
    }
    if (!remove.empty()) RUNSTORE_RETURN_IF_ERROR(env_->SyncDir(dir_));
    return Status::OK();
  }

  Status Report(const CompactionView& view, const std::vector<std::string>& inputs) {
    for (const std::string& name : inputs) {
      report_->inputs.push_back(std::string(kSegmentsDir) + "/" + name);
      if (options_.dry_run) {
        const auto& seg = view.all.at(name);
        report_->input_bytes += seg->index.file_size;
        for (const auto& b : seg->index.blocks) report_->input_records += b.header.count;
      }
    }
    return Status::OK();
  }

  Env* const env_;
  const std::string dir_;
  CompactionHost* const host_;
  const CompactOptions& options_;
  CompactReport* const report_;
  const std::string token_;
  const std::string writer_id_;
  std::unique_ptr<Lease> lease_;
  int64_t time_ns_ = 0;
  std::vector<std::string> claims_;  // paths
  std::set<std::string> claimed_names_;
  std::vector<format::SegmentId> replaced_;
  std::vector<format::AdoptedSegment> adopted_;  // unsealed inputs, sorted
  std::vector<std::string> temps_;               // names of parts not yet published
};

}  // namespace

Status RunCompaction(Env* env, const std::string& store_path, CompactionHost* host,
                     const CompactOptions& options, CompactReport* report) {
  *report = CompactReport();
  report->dry_run = options.dry_run;
  if (options.memory_bytes < (16u << 20)) {
    return Status::InvalidArgument("compaction memory_bytes must be at least 16 MiB, got " +
                                   std::to_string(options.memory_bytes));
  }
  if (options.segment_bytes < (1u << 16)) {
    return Status::InvalidArgument("compaction segment_bytes must be at least 64 KiB");
  }
  if (options.older_than_s < 0 || options.lease_refresh_s < 0 || options.lease_expiry_s < 0 ||
      !(options.retain_inputs_s >= 0)) {
    return Status::InvalidArgument("compaction times must not be negative");
  }
  const auto start = std::chrono::steady_clock::now();
  Compaction c(env, store_path, host, options, report);
  Status s = c.Run();
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace runstore::compact
