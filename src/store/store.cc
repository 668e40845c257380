#include "runstore/store.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "env/page_cache.h"
#include "env/path.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "store/catalog.h"
#include "store/compact/compact.h"
#include "store/compact/compacted.h"
#include "store/read/segment_cache.h"
#include "store/read/snapshot.h"
#include "store/writer/writer_impl.h"
#include "util/mutex.h"
#include "util/random.h"

namespace runstore {
using compact::CompactedResolution;
using compact::CompactionHost;
using compact::CompactionView;
using compact::kCompactWriterPrefix;
using compact::ResolveCompacted;
using compact::RunCompaction;

using read::LoadedSegment;
using read::SegmentCache;
using read::SnapshotImpl;
using writer::WriterImpl;
namespace {

static_assert(kFormatVersion == format::kSegmentFormatVersion);

constexpr char kMarkerName[] = "RUNSTORE";
constexpr char kSegmentsDir[] = "segments";

// The marker is small: read at most this much of it, so that a huge file (or
// a device) named RUNSTORE cannot make opening read or allocate without end.
constexpr size_t kMaxMarkerBytes = 4096;

// Segments to load before loading them on more than one thread pays (a
// thread costs tens of microseconds, a segment a few, or a network round
// trip for its stat on a shared file system), and the most threads used.
constexpr size_t kParallelLoadSegments = 512;
constexpr size_t kMaxLoadThreads = 8;

Result<std::string> ReadMarker(Env* env, const std::string& path) {
  RUNSTORE_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  std::string buf(kMaxMarkerBytes + 1, '\0');
  std::string_view got;
  RUNSTORE_RETURN_IF_ERROR(file->Read(0, buf.size(), buf.data(), &got));
  if (got.size() > kMaxMarkerBytes) {
    return Status::Corruption(path + ": not a runstore marker file (larger than " +
                              std::to_string(kMaxMarkerBytes) + " bytes)");
  }
  return std::string(got);
}

// Every open store's locks are held across fork(2) (docs/design.md#fork). A
// writer refreshes its store from the thread that appends (at the first
// series the store's snapshot did not know), which may not be a thread the
// program knows to be inside the store; a fork meanwhile would leave the
// store's lock (and the one its writers reach it through) held in the child
// by a thread that does not exist there. So a fork waits for the refreshes
// under way, and the child finds every store whole. The writers' lock is
// taken first, as a writer's refresh takes it before the store's; both
// before the segment budget's lock, which a refresh may take under them
// (prepare handlers run in reverse order of registration, and the budget
// registers first: Store::Open asks it first).
class StoreLocks {
 public:
  static StoreLocks& Process() {
    // Never deleted: stores may be destroyed by threads still running at exit.
    static StoreLocks* const locks = [] {
      auto* l = new StoreLocks;
      the_locks_ = l;
      ::pthread_atfork(&BeforeFork, &AfterFork, &AfterFork);
      return l;
    }();
    return *locks;
  }
  // `writers`: the lock a store's writers reach it through; `store`: its own.
  void Add(Mutex* writers, Mutex* store) {
    MutexLock lk(&mu_);
    locks_.emplace(writers, store);
  }
  void Remove(Mutex* writers, Mutex* store) {
    MutexLock lk(&mu_);
    locks_.erase({writers, store});
  }

 private:
  // Every lock of every store is held across fork() and given back on both
  // sides: an acquisition the analysis cannot pair, by design.
  static void BeforeFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS {
    the_locks_->mu_.Lock();
    for (const auto& [writers, store] : the_locks_->locks_) writers->Lock();
    for (const auto& [writers, store] : the_locks_->locks_) store->Lock();
  }
  static void AfterFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& [writers, store] : the_locks_->locks_) {
      store->Unlock();
      writers->Unlock();
    }
    the_locks_->mu_.Unlock();
  }
  static inline StoreLocks* the_locks_ = nullptr;
  Mutex mu_;
  std::set<std::pair<Mutex*, Mutex*>> locks_ RUNSTORE_GUARDED_BY(mu_);
};

class StoreImpl final : public Store, public CompactionHost {
 public:
  StoreImpl(Env* env, std::string path, StoreOptions options, uint32_t version)
      : env_(env), path_(std::move(path)), options_(options), version_(version) {
    StoreLocks::Process().Add(&schema_host_->mu, &mu_);
  }

  const std::string& path() const override { return path_; }
  uint32_t format_version() const override { return version_; }

  Result<std::unique_ptr<Writer>> NewWriter(const WriterOptions& options) override {
    if (options_.read_only) {
      return Status::FailedPrecondition(path_ + ": store was opened read-only");
    }
    // The schema of the current snapshot, without a refresh, so that opening
    // a writer lists nothing; the writer asks for the latest the first time
    // it defines a series not in it, so that a conflicting dtype committed
    // since is still refused at Append (docs/design.md#writer-ids).
    std::shared_ptr<const Snapshot> snap = GetSnapshot();
    SchemaRefresher refresh = [host = schema_host_]() -> Result<std::optional<StoreSchema>> {
      MutexLock lk(&host->mu);
      if (host->store == nullptr) return std::optional<StoreSchema>();
      RUNSTORE_ASSIGN_OR_RETURN(auto now, host->store->Refresh());
      return std::optional<StoreSchema>(static_cast<const SnapshotImpl&>(*now).Schema());
    };
    return WriterImpl::Open(env_, path_ + "/" + kSegmentsDir, options,
                            static_cast<const SnapshotImpl&>(*snap).Schema(), std::move(refresh));
  }

  ~StoreImpl() override {
    {
      MutexLock lk(&schema_host_->mu);
      schema_host_->store = nullptr;
    }
    // Not under the writers' lock: a fork takes the two in the other order.
    StoreLocks::Process().Remove(&schema_host_->mu, &mu_);
  }

  std::shared_ptr<const Snapshot> GetSnapshot() override {
    MutexLock lk(&mu_);
    return current_;
  }

  Status Compact(const CompactOptions& options, CompactReport* report) override {
    if (options_.read_only && !options.dry_run) {
      return Status::FailedPrecondition(path_ + ": store was opened read-only");
    }
    CompactReport ignored;
    return RunCompaction(env_, path_, this, options, report ? report : &ignored);
  }

  Result<CompactionView> RefreshForCompaction() override {
    MutexLock lk(&mu_);
    RUNSTORE_RETURN_IF_ERROR(RefreshLocked());
    CompactionView v;
    v.snapshot = std::static_pointer_cast<const SnapshotImpl>(current_);
    v.all = {loaded_.begin(), loaded_.end()};
    v.resolution = resolution_;
    return v;
  }

  Result<std::shared_ptr<const Snapshot>> Refresh() override {
    MutexLock lk(&mu_);
    RUNSTORE_RETURN_IF_ERROR(RefreshLocked());
    return current_;
  }

  RefreshStats last_refresh() const override {
    MutexLock lk(&mu_);
    return stats_;
  }

  Result<uint64_t> WriteCatalog() override {
    if (options_.read_only) {
      return Status::FailedPrecondition(path_ + ": store was opened read-only");
    }
    MutexLock lk(&mu_);
    RUNSTORE_RETURN_IF_ERROR(RefreshLocked());
    return WriteCatalogLocked();
  }

 private:
  // Bytes that gave sealed indexes in one refresh, by segment name.
  using FreshReads = std::map<std::string, std::shared_ptr<const SegmentReads>>;
  // A segment file a refresh loads.
  struct ToLoad {
    std::string name;
    std::string writer_id;
    uint64_t seq;
    std::shared_ptr<const LoadedSegment> old;  // its state at the last refresh
  };

  // The catalog's entries: every sealed segment whose index reads were
  // recorded, their bytes taken from `fresh` (what the refresh that calls it
  // read, by segment name) or read again from the file, where they must hash
  // as they did when the index was read (a segment whose file changed since
  // is left out: the catalog is a cache).
  Result<uint64_t> WriteCatalogLocked(const FreshReads& fresh = {}) RUNSTORE_REQUIRES(mu_) {
    std::vector<std::pair<const std::string*, const LoadedSegment*>> sealed;
    for (const auto& [name, seg] : loaded_) {
      if (seg->index.sealed && seg->reads) sealed.emplace_back(&name, seg.get());
    }
    // In name order, as the directory is read.
    std::sort(sealed.begin(), sealed.end(),
              [](const auto& a, const auto& b) { return *a.first < *b.first; });
    std::vector<std::shared_ptr<const SegmentReads>> reads(sealed.size());
    std::vector<Status> failed(LoadThreads(sealed.size()));
    ForBatches(sealed.size(), [&](size_t b, size_t e, size_t k) {
      for (size_t i = b; i < e; ++i) {
        if (auto it = fresh.find(*sealed[i].first); it != fresh.end()) {
          reads[i] = it->second;
          continue;
        }
        const LoadedSegment& seg = *sealed[i].second;
        auto file = env_->NewRandomAccessFile(seg.path());
        Result<std::shared_ptr<const SegmentReads>> again =
            file.ok() ? ReadAgain(**file, *seg.reads) : file.status();
        // A segment removed meanwhile is left out; another error fails the
        // write.
        if (again.ok()) {
          reads[i] = std::move(again).value();
        } else if (again.status().code() != StatusCode::kNotFound && failed[k].ok()) {
          failed[k] = again.status();
        }
      }
    });
    for (Status& f : failed) {
      if (!f.ok()) return std::move(f).WithContext("writing the catalog");
    }
    std::map<std::string, CatalogEntry> entries;
    for (size_t i = 0; i < sealed.size(); ++i) {
      if (reads[i]) entries[*sealed[i].first] = CatalogEntry{sealed[i].second->info, reads[i]};
    }
    reads.clear();
    RUNSTORE_RETURN_IF_ERROR(Catalog::Write(env_, path_, entries));
    catalog_size_ = entries.size();
    return uint64_t{entries.size()};
  }

  // A segment that a later segment of its writer names as sealed must be
  // sealed: one without its seal was cut or damaged, not left open by a
  // crash, and reading it as a crashed writer's tail would drop records
  // silently (and bring back records that its resume markers hid). Such a
  // predecessor is read afresh, then reported to `damage` and left out of
  // `next`.
  Status CheckSealedPredecessors(std::map<std::string, std::shared_ptr<const LoadedSegment>>* next,
                                 const std::function<Status(const std::string&, Status)>& damage) {
    for (auto& [name, seg] : *next) {
      const uint64_t pred = seg->index.header.sealed_predecessor;
      if (pred == 0) continue;
      const std::string pred_name = format::SegmentFileName(seg->index.header.writer_id, pred);
      auto it = next->find(pred_name);
      if (it == next->end() || it->second->index.sealed) continue;
      // Read it afresh before calling it damaged: on a network file system an
      // open handle may report a size cached from before the seal.
      std::string pred_id;
      uint64_t pred_seq;
      format::ParseSegmentFileName(pred_name, &pred_id, &pred_seq);
      RefreshStats again;  // counted once, by the refresh that loaded it
      auto fresh = LoadSegment(pred_name, pred_id, pred_seq, nullptr, &again, /*catalog=*/nullptr);
      if (fresh.ok() && (*fresh)->index.sealed) {
        it->second = std::move(fresh).value();
        continue;
      }
      if (!fresh.ok() && !IsDamage(fresh.status())) return fresh.status();
      const std::string rel = std::string(kSegmentsDir) + "/" + pred_name;
      Status s = fresh.ok()
                     ? Status::Corruption(
                           format::AtOffset(rel, (*fresh)->index.committed_end) +
                           "the segment's seal is missing, but its writer sealed it: " + seg->file +
                           " names it as its sealed predecessor; the file is "
                           "cut or damaged after its last readable commit")
                     : fresh.status();
      RUNSTORE_RETURN_IF_ERROR(damage(rel, std::move(s)));
      it->second = nullptr;
    }
    std::erase_if(*next, [](const auto& kv) { return kv.second == nullptr; });
    return Status::OK();
  }

  // Reads the catalog, once, at Open (later refreshes read only segments new
  // to them), once the listing and its stats (`infos`) bound how large it
  // can be: a file larger than a catalog of these segments is ignored before
  // anything is allocated for it. A missing, damaged or ignored catalog only
  // costs time: every segment is read (catalog_status_ says why).
  void ReadCatalogOnce(const std::vector<Result<FileInfo>>& infos) RUNSTORE_REQUIRES(mu_) {
    if (catalog_read_ || !options_.use_catalog) return;
    catalog_read_ = true;
    std::vector<FileInfo> sizes;
    for (const auto& info : infos) {
      if (info.ok()) sizes.push_back(*info);
    }
    auto c = Catalog::Read(env_, path_, Catalog::MaxBytes(sizes));
    if (c.ok()) {
      catalog_ = std::move(c).value();
      catalog_size_ = catalog_->size();
    } else if (c.status().code() != StatusCode::kNotFound) {
      catalog_status_ = c.status();
    }
  }

  // What of the listing `children` to load, sorted by name: segment files
  // not read before or not sealed when they were (with their state then).
  // `seen`: how many of the loaded segments the listing still has.
  std::vector<ToLoad> ToLoadOf(const std::vector<std::string>& children, size_t* seen,
                               RefreshStats* stats) RUNSTORE_REQUIRES(mu_) {
    std::vector<ToLoad> to_load;
    *seen = 0;
    for (const auto& name : children) {
      // A sealed segment read before is looked up and left (the common case,
      // and the whole of a refresh where nothing changed).
      auto old = loaded_.find(name);
      if (old != loaded_.end() && old->second->index.sealed) {
        ++*seen;
        ++stats->unchanged;
        continue;
      }
      ToLoad t{name, {}, 0, nullptr};
      if (!format::ParseSegmentFileName(name, &t.writer_id, &t.seq)) continue;
      if (old != loaded_.end()) {
        ++*seen;
        t.old = old->second;
      }
      to_load.push_back(std::move(t));
    }
    std::sort(to_load.begin(), to_load.end(),
              [](const ToLoad& x, const ToLoad& y) { return x.name < y.name; });
    return to_load;
  }

  // The snapshot extended by what a refresh loaded (SnapshotImpl::Extend), in
  // proportion to the change rather than to the store, when the change is
  // new or grown segments only: none removed, none damaged, none of a
  // compaction or left out by one, every new segment's sealed predecessor
  // sealed. Returns false, having changed nothing, for any other change,
  // which the caller builds over every segment.
  bool ExtendLocked(
      const std::vector<ToLoad>& to_load,
      std::vector<std::optional<Result<std::shared_ptr<const LoadedSegment>>>>* loaded)
      RUNSTORE_REQUIRES(mu_) {
    std::vector<std::shared_ptr<const LoadedSegment>> added;
    std::vector<const LoadedSegment*> removed;
    std::map<std::string_view, const LoadedSegment*> names;
    for (size_t i = 0; i < to_load.size(); ++i) {
      if (!(*loaded)[i]->ok()) return false;
      const auto& seg = (*loaded)[i]->value();
      if (seg == to_load[i].old) continue;  // an open segment that did not grow
      const format::SegmentIndex& idx = seg->index;
      if (idx.footer_sections.contains(format::kFooterSectionReplaces) ||
          idx.header.writer_id.starts_with(kCompactWriterPrefix) ||
          resolution_.ignored.contains(to_load[i].name)) {
        return false;
      }
      if (to_load[i].old != nullptr) removed.push_back(to_load[i].old.get());
      added.push_back(seg);
      names.emplace(to_load[i].name, seg.get());
    }
    for (const auto& seg : added) {
      const uint64_t pred = seg->index.header.sealed_predecessor;
      if (pred == 0) continue;
      const std::string pred_name = format::SegmentFileName(seg->index.header.writer_id, pred);
      const LoadedSegment* p = nullptr;
      if (auto it = names.find(pred_name); it != names.end()) {
        p = it->second;
      } else if (auto old = loaded_.find(pred_name); old != loaded_.end()) {
        p = old->second.get();
      }
      if (p != nullptr && !p->index.sealed) return false;  // CheckSealedPredecessors decides
    }
    if (added.empty()) return true;  // nothing grew: the snapshot stands
    auto snap =
        SnapshotImpl::Extend(*static_cast<const SnapshotImpl*>(current_.get()), added, removed);
    if (snap == nullptr) return false;
    for (size_t i = 0; i < to_load.size(); ++i) loaded_[to_load[i].name] = (*loaded)[i]->value();
    current_ = std::move(snap);
    return true;
  }

  Status RefreshLocked() RUNSTORE_REQUIRES(mu_) {
    const std::string dir = path_ + "/" + kSegmentsDir;
    RefreshStats stats;
    auto children = env_->GetChildren(dir);
    if (!children.ok()) return children.status();
    std::vector<DamagedSegment> damaged;
    // Damage is local: a segment that cannot be read is reported by name,
    // and with OnDamaged::kSkip left out while the rest is served
    // (docs/design.md#damaged-segments).
    auto damage = [&](const std::string& rel, Status s) -> Status {
      if (options_.on_damaged != OnDamaged::kSkip) return s;
      damaged.push_back(DamagedSegment{rel, std::move(s)});
      return Status::OK();
    };
    size_t seen = 0;
    const std::vector<ToLoad> to_load = ToLoadOf(*children, &seen, &stats);
    const bool none_removed = seen == loaded_.size() && current_ != nullptr;
    if (to_load.empty() && none_removed) {
      // Every segment sealed and read before, none removed: nothing changed,
      // and the snapshot stands (a refresh costs the listing, not a rebuild).
      stats.segments = loaded_.size();
      stats.catalog_status = catalog_status_;
      stats_ = stats;
      return Status::OK();
    }
    const std::vector<Result<FileInfo>> infos = StatSegments(to_load);
    ReadCatalogOnce(infos);
    stats.catalog_status = catalog_status_;
    // What loading read of each sealed segment, for a catalog written at the
    // end of this refresh; dropped with it (segments keep a digest).
    std::vector<std::shared_ptr<const SegmentReads>> fresh_reads(to_load.size());
    auto loaded = LoadSegments(to_load, infos, catalog_.get(), &stats, &fresh_reads);
    // Read once, at Open: the entries it gave are copied out (a segment keeps
    // only the digest of its entry), and its buffer (about 700 bytes a
    // segment) is not held.
    catalog_ = nullptr;
    FreshReads fresh;
    auto keep_reads = [&](size_t i) {
      if (fresh_reads[i] != nullptr && !options_.read_only)
        fresh.emplace(to_load[i].name, fresh_reads[i]);
    };
    if (none_removed && ExtendLocked(to_load, &loaded)) {
      for (size_t i = 0; i < to_load.size(); ++i) keep_reads(i);
    } else {
      stats.rebuilt = true;
      std::map<std::string, std::shared_ptr<const LoadedSegment>> next;
      for (const auto& name : *children) {
        auto old = loaded_.find(name);
        if (old != loaded_.end() && old->second->index.sealed) next[name] = old->second;
      }
      for (size_t i = 0; i < to_load.size(); ++i) {
        const std::string& name = to_load[i].name;
        if (!loaded[i]->ok()) {
          const Status& s = loaded[i]->status();
          if (s.code() == StatusCode::kNotFound) continue;  // removed meanwhile
          if (!IsDamage(s)) return s;
          RUNSTORE_RETURN_IF_ERROR(damage(std::string(kSegmentsDir) + "/" + name, s));
          continue;
        }
        next[name] = std::move(*loaded[i]).value();
        keep_reads(i);
      }
      RUNSTORE_RETURN_IF_ERROR(BuildLocked(std::move(next), &damaged, damage));
    }
    fresh_reads.clear();
    stats.segments = loaded_.size();
    // The store grew since its catalog was written: write it again.
    if (!options_.read_only && options_.catalog_rewrite_segments > 0 &&
        stats.from_footer >= options_.catalog_rewrite_segments &&
        stats.from_footer * 4 > catalog_size_) {
      // Best effort: a store on a file system this process may not write
      // (a shared store opened by many) still opens.
      stats.catalog_written = WriteCatalogLocked(fresh).ok();
    }
    stats_ = stats;
    return Status::OK();
  }

  // The snapshot of the loaded segments `next`, built over every one of them;
  // `damage` reports to `damaged` what it leaves out.
  Status BuildLocked(std::map<std::string, std::shared_ptr<const LoadedSegment>> next,
                     std::vector<DamagedSegment>* damaged,
                     const std::function<Status(const std::string&, Status)>& damage)
      RUNSTORE_REQUIRES(mu_) {
    RUNSTORE_RETURN_IF_ERROR(CheckSealedPredecessors(&next, damage));
    // Segments that a compacted segment replaces, and compacted segments
    // that do not stand (docs/design.md#compaction), are left out.
    CompactedResolution resolution;
    RUNSTORE_RETURN_IF_ERROR(ResolveCompacted(
        next,
        [&](const std::string& name, Status s) {
          return damage(std::string(kSegmentsDir) + "/" + name, std::move(s));
        },
        &resolution));
    std::vector<std::shared_ptr<const LoadedSegment>> segs;
    for (auto& [name, s] : next) {
      if (!resolution.ignored.contains(name)) segs.push_back(s);
    }
    RUNSTORE_ASSIGN_OR_RETURN(auto snap,
                              SnapshotImpl::Build(std::move(segs), std::move(*damaged),
                                                  options_.on_damaged == OnDamaged::kSkip));
    loaded_.clear();
    loaded_.insert(std::make_move_iterator(next.begin()), std::make_move_iterator(next.end()));
    // Segments the snapshot left out for damaged resume markers are loaded
    // again next time, like any damaged segment.
    for (const DamagedSegment& d : snap->DamagedSegments()) {
      loaded_.erase(d.file.substr(std::string(kSegmentsDir).size() + 1));
    }
    resolution_ = std::move(resolution);
    current_ = std::move(snap);
    return Status::OK();
  }

  Env* const env_;
  const std::string path_;
  const std::shared_ptr<const std::string> root_ = std::make_shared<const std::string>(path_);
  const StoreOptions options_;
  const uint32_t version_;
  // The store as the writers it opened see it: they may outlive it, and
  // find it gone.
  struct SchemaHost {
    Mutex mu;
    StoreImpl* store RUNSTORE_GUARDED_BY(mu) = nullptr;
  };
  const std::shared_ptr<SchemaHost> schema_host_ = [this] {
    auto host = std::make_shared<SchemaHost>();
    MutexLock lk(&host->mu);
    host->store = this;
    return host;
  }();
  mutable Mutex mu_;
  // Every segment read, by file name: a refresh looks each name of its
  // listing up here (hashed: the listing is what a refresh that finds nothing
  // new costs).
  std::unordered_map<std::string, std::shared_ptr<const LoadedSegment>> loaded_
      RUNSTORE_GUARDED_BY(mu_);
  CompactedResolution resolution_ RUNSTORE_GUARDED_BY(mu_);  // of loaded_, by the last Refresh
  std::shared_ptr<const Snapshot> current_ RUNSTORE_GUARDED_BY(mu_);
  RefreshStats stats_ RUNSTORE_GUARDED_BY(mu_);
  bool catalog_read_ RUNSTORE_GUARDED_BY(mu_) = false;
  std::shared_ptr<const Catalog> catalog_ RUNSTORE_GUARDED_BY(mu_);
  uint64_t catalog_size_ RUNSTORE_GUARDED_BY(mu_) = 0;
  // Why the catalog was ignored at Open; OK if read or absent.
  Status catalog_status_ RUNSTORE_GUARDED_BY(mu_);

  // Damage a segment can have (its bytes, or the file being unreadable), as
  // opposed to a store-wide problem (a newer format version).
  static bool IsDamage(const Status& s) {
    return s.code() == StatusCode::kCorruption || s.code() == StatusCode::kIOError;
  }

  // Runs fn(begin, end, k) over [0, n) in batches of kBatch, on several
  // threads when there are many (k: the thread's index, below the count
  // returned by LoadThreads(n)). From kParallelLoadSegments on, at least two
  // threads and one per 256 segments, up to the cores (at least two: a stat
  // on a shared file system waits on the network, not the CPU) and
  // kMaxLoadThreads. Running out of memory in a batch (a hostile file's
  // claimed size) is that batch's error, never an exception that ends the
  // process from a thread.
  static constexpr size_t kBatch = 64;  // segments taken at a time
  static size_t LoadThreads(size_t n) {
    return n < kParallelLoadSegments
               ? 1
               : std::min({kMaxLoadThreads, n / (kParallelLoadSegments / 2),
                           std::max<size_t>(2, std::thread::hardware_concurrency())});
  }
  template <typename Fn>
  static void ForBatches(size_t n, const Fn& fn) {
    std::atomic<size_t> next{0};
    auto work = [&](size_t k) {
      for (size_t b; (b = next.fetch_add(kBatch)) < n;) fn(b, std::min(b + kBatch, n), k);
    };
    const size_t threads = LoadThreads(n);
    std::vector<std::thread> pool;
    for (size_t k = 1; k < threads; ++k) pool.emplace_back(work, k);
    work(0);
    for (std::thread& th : pool) th.join();
  }

  // The GetFileInfo of each segment of `to_load`, in its order (stats made
  // relative to the directory, a batch at a time).
  std::vector<Result<FileInfo>> StatSegments(const std::vector<ToLoad>& to_load) {
    std::vector<Result<FileInfo>> out(to_load.size(), Status::NotFound("not asked"));
    const std::string dir = path_ + "/" + kSegmentsDir;
    ForBatches(to_load.size(), [&](size_t b, size_t e, size_t) {
      std::vector<std::string> names;
      for (size_t i = b; i < e; ++i) names.push_back(to_load[i].name);
      std::vector<Result<FileInfo>> infos = env_->GetChildrenInfo(dir, names);
      for (size_t i = b; i < e; ++i) out[i] = std::move(infos[i - b]);
    });
    return out;
  }

  // LoadSegment of each, in order of `to_load` (with `infos`, their stats),
  // the counts of all added to `stats`.
  std::vector<std::optional<Result<std::shared_ptr<const LoadedSegment>>>> LoadSegments(
      const std::vector<ToLoad>& to_load, const std::vector<Result<FileInfo>>& infos,
      const Catalog* catalog, RefreshStats* stats,
      std::vector<std::shared_ptr<const SegmentReads>>* fresh_reads) {
    std::vector<std::optional<Result<std::shared_ptr<const LoadedSegment>>>> out(to_load.size());
    std::vector<RefreshStats> counts(LoadThreads(to_load.size()));
    // Series names, each held once per loading thread rather than once per
    // segment (about 60 bytes a name a segment).
    std::vector<format::NameTable> names(counts.size());
    ForBatches(to_load.size(), [&](size_t b, size_t e, size_t k) {
      // A mapped catalog's pages read so far leave the resident set now and
      // then (every 8,192 segments, about 6 MiB of entries).
      if (catalog != nullptr && b % 8192 < kBatch && b > 0) catalog->ReleasePages();
      for (size_t i = b; i < e; ++i) {
        const ToLoad& t = to_load[i];
        try {
          out[i] = LoadSegment(t.name, t.writer_id, t.seq, t.old, &counts[k], catalog, &infos[i],
                               &(*fresh_reads)[i], &names[k]);
        } catch (const std::bad_alloc&) {
          out[i] = Status::ResourceExhausted(
              std::string(kSegmentsDir) + "/" + t.name + ": out of memory reading its index",
              ENOMEM);
        }
      }
    });
    for (const RefreshStats& c : counts) {
      stats->from_catalog += c.from_catalog;
      stats->from_footer += c.from_footer;
      stats->recovered += c.recovered;
      stats->unchanged += c.unchanged;
    }
    return out;
  }

  // Whether `seg` (segment file `name` of `writer_id` and `seq`, whose stat
  // is `info`) got its index from `catalog`: only from an entry recorded for
  // this very file whose bytes give a sealed index, and the index of this
  // file's name (an entry of another segment replayed for this one would
  // make a healthy file read, or verify, as another); the entry's bytes get
  // every check a file's get. `fresh`: as LoadSegment's.
  static bool FromCatalog(const Catalog* catalog, const std::string& name, const FileInfo& info,
                          const std::string& writer_id, uint64_t seq, LoadedSegment* seg,
                          std::shared_ptr<const SegmentReads>* fresh, format::NameTable* names) {
    const CatalogEntry* e = catalog != nullptr ? catalog->Find(name) : nullptr;
    if (e == nullptr || !(e->info == info)) return false;
    format::SegmentIndex index;
    if (!format::LoadSegmentIndex(*NewReplayFile(e->reads), seg->file, &index, names).ok() ||
        !index.sealed || index.header.writer_id != writer_id || index.header.sequence != seq) {
      return false;  // no use: the file is read
    }
    seg->index = std::move(index);
    seg->reads = std::make_unique<const SegmentReadsDigest>(DigestOf(*e->reads));
    if (fresh != nullptr) *fresh = e->reads;
    seg->from_catalog = true;
    return true;
  }

  // Loads segment `name` of `writer_id`: continues from `old` (its state at
  // the last refresh) when given; else from `catalog` (the store's, read
  // under its lock by the caller, or null for none), if its entry is for this
  // very file (same size, modification time and inode); else from a new
  // handle. `file_info`: the file's GetFileInfo, if already asked.
  // `fresh`, if given: set to the bytes that gave a sealed index, where the
  // segment records their digest (the catalog's entry, or what was read of
  // the file by a store that may write a catalog). `names`, if given: the
  // table its series names are interned in. Runs on the loading threads: it
  // reads nothing the store's lock guards.
  Result<std::shared_ptr<const LoadedSegment>> LoadSegment(
      const std::string& name, const std::string& writer_id, uint64_t seq,
      const std::shared_ptr<const LoadedSegment>& old, RefreshStats* stats, const Catalog* catalog,
      const Result<FileInfo>* file_info = nullptr,
      std::shared_ptr<const SegmentReads>* fresh = nullptr, format::NameTable* names = nullptr) {
    const std::string rel = std::string(kSegmentsDir) + "/" + name;
    auto seg = std::make_shared<LoadedSegment>();
    seg->file = rel;
    seg->env = env_;
    seg->root = root_;
    auto finish = [&]() -> std::shared_ptr<const LoadedSegment> {
      seg->verified = std::make_unique<std::atomic<bool>[]>(seg->index.blocks.size());
      return seg;
    };
    Result<FileInfo> info = file_info ? *file_info : env_->GetFileInfo(seg->path());
    if (!info.ok()) return info.status();
    seg->info = *info;
    // A segment being written (or left by a crashed writer) holds no
    // descriptor between refreshes: it is opened again only when its file
    // changed, and recovery goes on from the last commit it accepted
    // (docs/design.md#catalog). A file of another inode under its name is
    // another file, read afresh.
    const bool same_file = old && (old->info.inode == 0 || old->info.inode == info->inode);
    if (same_file && !old->index.commits.empty()) {
      if (info->size == old->index.file_size) {
        ++stats->unchanged;
        return old;
      }
      RUNSTORE_ASSIGN_OR_RETURN(std::shared_ptr<RandomAccessFile> handle,
                                env_->NewRandomAccessFile(seg->path()));
      // The identity of the file whose bytes are read, which a later open
      // must find again (the stat above may be of one renamed over since).
      RUNSTORE_ASSIGN_OR_RETURN(seg->info, handle->Info());
      if (old->info.inode != 0 && seg->info.inode != old->info.inode) {
        return LoadSegment(name, writer_id, seq, nullptr, stats, catalog, nullptr, fresh, names);
      }
      seg->index = old->index;
      RUNSTORE_RETURN_IF_ERROR(format::RefreshSegmentIndex(*handle, rel, &seg->index));
      if (seg->index.committed_end == old->index.committed_end &&
          seg->index.sealed == old->index.sealed) {
        ++stats->unchanged;
        return old;
      }
      ++stats->recovered;
      return finish();  // mapped by its first read
    }
    // One with no commit yet is read afresh unless nothing about the file
    // changed: with staging it is the placeholder that claims its number,
    // which the publication replaces by a rename (docs/design.md#staging).
    if (same_file && old->info.inode != 0 && old->info == *info) {
      ++stats->unchanged;
      return old;
    }
    if (FromCatalog(catalog, name, *info, writer_id, seq, seg.get(), fresh, names)) {
      ++stats->from_catalog;
      return finish();
    }
    std::shared_ptr<RandomAccessFile> handle;
    RUNSTORE_ASSIGN_OR_RETURN(handle, env_->NewRandomAccessFile(seg->path()));
    // The identity of the file whose bytes are read, which a later open must
    // find again: with staging, a segment's published copy is renamed over
    // its placeholder, maybe between the stat and this open.
    RUNSTORE_ASSIGN_OR_RETURN(seg->info, handle->Info());
    if (!options_.read_only && format::HasValidTrailer(*handle)) {
      // Sealed, probably: what loading reads is kept for the catalog, which
      // only a store that may write one needs (a read-only reader would hold
      // every footer twice: about a fifth of what opening costs it).
      auto reads = std::make_shared<SegmentReads>();
      RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(*NewRecordingFile(*handle, reads.get()),
                                                        rel, &seg->index, names));
      if (seg->index.sealed && !reads->overflowed) {
        seg->reads = std::make_unique<const SegmentReadsDigest>(DigestOf(*reads));
        if (fresh != nullptr) *fresh = std::move(reads);
      }
    } else {
      RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(*handle, rel, &seg->index, names));
    }
    if (seg->index.sealed) {
      ++stats->from_footer;  // mapped on its first read
      return finish();
    }
    // A compaction publishes its parts by renaming them in only after they
    // are sealed and synced, so an unsealed part is damage, never a crash: read
    // as a crashed writer's segment it would lose its replaces section, and
    // its records would be served beside the inputs it replaces
    // (docs/design.md#compaction-replaces).
    if (seg->index.header.writer_id.starts_with(kCompactWriterPrefix)) {
      return Status::Corruption(
          rel + ": compacted segment is not sealed (its footer is damaged or missing); a " +
          "compaction publishes only sealed segments");
    }
    if (seg->index.header.writer_id.empty()) {
      seg->index.header.writer_id = writer_id;  // torn header of an empty segment
      seg->index.header.sequence = seq;
    }
    ++stats->recovered;
    return finish();  // the handle is closed here; mapped by the first read
  }
};

// Creates the store's directory (and missing parents), marker and segments/.
Status CreateStore(Env* env, const std::string& path) {
  std::vector<std::string> missing;
  for (std::string p = path; !p.empty() && p != "/" && p != ".";) {
    Status s = env->FileExists(p);
    if (s.ok()) break;
    if (s.code() != StatusCode::kNotFound) return s;
    missing.push_back(p);
    p = ParentDir(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    Status s = env->CreateDir(*it);
    if (!s.ok() && s.code() != StatusCode::kAlreadyExists) return s.WithContext("creating store");
  }
  Status s = env->CreateDir(path + "/" + kSegmentsDir);
  if (!s.ok() && s.code() != StatusCode::kAlreadyExists) return s.WithContext("creating store");
  // segments/ must exist before the marker says this is a store.
  RUNSTORE_RETURN_IF_ERROR(env->SyncDir(path));
  // Several processes may create the store at once (every rank of a job):
  // each writes its own temporary file, and the atomic renames all install
  // the same bytes. A fixed temporary name would let one process rename the
  // file another is still writing.
  const std::string tmp = path + "/" + kMarkerName + ".tmp." + RandomHex16();
  {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp, /*exclusive=*/true));
    RUNSTORE_RETURN_IF_ERROR(f->Append(format::EncodeStoreMarker(kFormatVersion)));
    RUNSTORE_RETURN_IF_ERROR(f->Sync());
    RUNSTORE_RETURN_IF_ERROR(f->Close());
  }
  RUNSTORE_RETURN_IF_ERROR(env->RenameFile(tmp, path + "/" + kMarkerName));
  RUNSTORE_RETURN_IF_ERROR(env->SyncDir(path));
  if (!missing.empty()) RUNSTORE_RETURN_IF_ERROR(env->SyncDir(ParentDir(path)));
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path_in,
                                           const StoreOptions& options) {
  Env* env = options.env ? options.env : Env::Default();
  if (path_in.empty()) return Status::InvalidArgument("store path is empty");
  RUNSTORE_RETURN_IF_ERROR(SegmentCache::Process().environment_status());
  RUNSTORE_RETURN_IF_ERROR(page_cache::EnvironmentStatus());
  if (const size_t nul = path_in.find('\0'); nul != std::string::npos) {
    // The system would read the path only up to the NUL, and create or open
    // a different directory than the one asked for.
    return Status::InvalidArgument("store path '" + path_in.substr(0, nul) +
                                   "\\0...' contains a NUL character at byte " +
                                   std::to_string(nul));
  }
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  uint32_t version = kFormatVersion;
  auto is_dir = env->IsDirectory(path);
  if (!is_dir.ok()) {
    if (is_dir.status().code() != StatusCode::kNotFound) return is_dir.status();
    if (options.read_only || !options.create_if_missing) {
      return Status::NotFound(path + ": no store here (the directory does not exist)");
    }
    RUNSTORE_RETURN_IF_ERROR(CreateStore(env, path));
  } else if (!*is_dir) {
    return Status::InvalidArgument(path + " is not a directory, so it cannot be a store");
  } else {
    const std::string marker = path + "/" + kMarkerName;
    Status exists = env->FileExists(marker);
    if (exists.ok()) {
      RUNSTORE_ASSIGN_OR_RETURN(std::string contents, ReadMarker(env, marker));
      RUNSTORE_RETURN_IF_ERROR(format::DecodeStoreMarker(contents, marker, &version));
      if (!env->IsDirectory(path + "/" + kSegmentsDir).ok()) {
        return Status::Corruption(path + ": store has a marker but no segments/ directory");
      }
    } else if (exists.code() == StatusCode::kNotFound) {
      RUNSTORE_ASSIGN_OR_RETURN(auto children, env->GetChildren(path));
      // What an interrupted or concurrent creation leaves -- segments/ with no
      // segment in it, marker temporaries -- is not somebody else's data.
      std::erase_if(children, [&](const std::string& c) {
        if (c.rfind(std::string(kMarkerName) + ".tmp", 0) == 0) return true;
        if (c != kSegmentsDir) return false;
        auto segs = env->GetChildren(path + "/" + kSegmentsDir);
        return segs.ok() && segs->empty();
      });
      if (!children.empty() && !env->FileExists(marker).ok()) {
        return Status::InvalidArgument(path + " is a directory that is not a runstore store (no " +
                                       kMarkerName + " marker) and is not empty");
      }
      if (env->FileExists(marker).ok()) {
        // Created meanwhile by another process: check it like any marker.
        RUNSTORE_ASSIGN_OR_RETURN(std::string contents, ReadMarker(env, marker));
        RUNSTORE_RETURN_IF_ERROR(format::DecodeStoreMarker(contents, marker, &version));
      } else if (options.read_only || !options.create_if_missing) {
        return Status::NotFound(path + ": empty directory, no store here");
      } else {
        RUNSTORE_RETURN_IF_ERROR(CreateStore(env, path));
      }
    } else {
      return exists;
    }
  }
  auto store = std::make_unique<StoreImpl>(env, path, options, version);
  RUNSTORE_RETURN_IF_ERROR(store->Refresh().status());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace runstore
