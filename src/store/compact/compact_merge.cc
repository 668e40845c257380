// The merge of compaction (docs/design.md#compaction, "The merge"): the
// records of the inputs resolved -- one per key, the later commit's, none
// that a resume marker among the inputs hides -- written series by series in
// key order, in bounded memory.
//
// Per series, the keys (run, step, which block and row) of the records are
// sorted in memory, a key range at a time: when they would not fit in a
// quarter of memory_bytes, a sample of the keys cuts the series into ranges
// that do, and each range reads the blocks that overlap it. Values are not
// held: each winner's value is copied from its input block (a view of the
// mapping, or the block decompressed, a few kept) into the block builder.
// Mapped pages of the inputs are released every quarter of memory_bytes read.
#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "format/block.h"
#include "format/segment_writer.h"
#include "store/compact/compact_internal.h"
#include "store/read/snapshot_helpers.h"
#include "store/schema.h"

namespace runstore::compact {

using read::CommitOrder;
using read::CompareRunRefs;
using read::LoadedSegment;
using read::Payload;
using read::SnapshotImpl;
namespace {

using BlockRef = SnapshotImpl::BlockRef;

// The output: parts 1, 2, ... of `writer_id`, a new one started when the
// current one reaches the size target.
class Output {
 public:
  Output(Env* env, std::string dir, std::string writer_id, const CompactOptions& o)
      : env_(env), dir_(std::move(dir)), writer_id_(std::move(writer_id)), options_(o) {}

  Status AddBlock(format::BlockBuilder* b, bool borrowed) {
    if (parts_.empty() || parts_.back()->size() >= options_.segment_bytes) {
      RUNSTORE_RETURN_IF_ERROR(NewPart());
    }
    format::BlockHeader h;
    b->Finish(&h, &pieces_);
    b->RunHashes(&hashes_);
    return parts_.back()->AddBlock(
        &h, pieces_, hashes_, options_.zstd_level, /*header_last=*/borrowed,
        borrowed && !IsVarLength(h.dtype) ? format::kValueChunkShift : 0);
  }

  // Commits every part at `time_ns`, adds the replaces section (and the
  // replaced-earlier and adopted ones, if they name any), seals.
  Status Finish(int64_t time_ns, format::Replaces replaces,
                std::vector<format::SegmentId> replaced_earlier,
                const std::vector<format::AdoptedSegment>& adopted, MergeResult* result) {
    if (parts_.empty()) RUNSTORE_RETURN_IF_ERROR(NewPart());  // nothing visible: one empty part
    replaces.part_count = static_cast<uint32_t>(parts_.size());
    const std::string section = format::EncodeReplaces(replaces);
    const std::string earlier =
        replaced_earlier.empty()
            ? std::string()
            : format::EncodeReplaces({replaces.part_count, std::move(replaced_earlier)});
    for (auto& p : parts_) {
      // One commit per part, at the greatest time among the inputs, so that
      // the part sorts where their last commit sorted.
      RUNSTORE_RETURN_IF_ERROR(p->Commit(time_ns, /*sync=*/true));
      p->AddFooterSection(format::kFooterSectionReplaces, 0, section);
      if (!earlier.empty()) {
        p->AddFooterSection(format::kFooterSectionReplacedEarlier, format::kFooterSectionOptional,
                            earlier);
      }
      // Optional: a reader that does not know it takes the adoption as the
      // caller asserted it, whole (docs/design.md#adoption).
      if (!adopted.empty()) {
        p->AddFooterSection(format::kFooterSectionAdopted, format::kFooterSectionOptional,
                            format::EncodeAdopted(adopted));
      }
      RUNSTORE_RETURN_IF_ERROR(p->Seal());
      result->part_bytes.push_back(p->size());
    }
    result->temp_names = names_;
    return Status::OK();
  }

 private:
  Status NewPart() {
    format::SegmentHeader h;
    h.version = format::kSegmentFormatVersion;
    h.created_ns = env_->NowNanos();
    h.sequence = parts_.size() + 1;
    h.writer_id = writer_id_;
    const std::string name =
        format::SegmentFileName(writer_id_, h.sequence) + std::string(kTempSuffix);
    RUNSTORE_ASSIGN_OR_RETURN(auto w, format::SegmentWriter::Create(env_, dir_ + "/" + name, h));
    parts_.push_back(std::move(w));
    names_.push_back(name);
    return Status::OK();
  }

  Env* const env_;
  const std::string dir_;
  const std::string writer_id_;
  const CompactOptions& options_;
  std::vector<std::unique_ptr<format::SegmentWriter>> parts_;
  std::vector<std::string> names_;
  std::vector<std::string_view> pieces_;
  std::vector<uint64_t> hashes_;
};

// A record's key and where it lies; string runs in the pass's arena.
struct Entry {
  int64_t run_int;
  uint32_t str_off;
  uint32_t str_len;
  bool is_string;
  int64_t step;
  uint32_t block;  // index into the series' blocks
  uint32_t row;
};

// The resume markers among the inputs: per run, sorted steps with the latest
// commit order of the markers at or below each (as SnapshotImpl keeps them).
struct Markers {
  std::vector<int64_t> steps;
  std::vector<CommitOrder> latest;
  bool Hides(int64_t step, const CommitOrder& order) const {
    const size_t at = std::upper_bound(steps.begin(), steps.end(), step) - steps.begin();
    return at > 0 && order < latest[at - 1];
  }
};

class Merger {
 public:
  Merger(const SnapshotImpl& snap, Output* out, const CompactOptions& o)
      : snap_(snap), out_(out), options_(o) {}

  Status Run(MergeResult* result) {
    std::map<std::string, std::vector<BlockRef>> series;
    const auto& segs = snap_.segments();
    for (uint32_t si = 0; si < segs.size(); ++si) {
      const auto& idx = segs[si]->index;
      for (uint32_t bi = 0; bi < idx.blocks.size(); ++bi) {
        const auto& b = idx.blocks[bi];
        series[b.header.name].push_back(BlockRef{
            segs[si].get(), bi, CommitOrder{idx.commits[b.commit_index].time_ns, si}, &b.header});
        result->input_records += b.header.count;
      }
    }
    total_records_ = result->input_records;
    RUNSTORE_RETURN_IF_ERROR(LoadMarkers(series));
    // The markers first: the output's parts share one time, and a later part
    // sorts after an earlier one, so markers in the first part never hide a
    // record of the output (they hide only what came before the inputs'
    // last commit, as they did). Then every series by name.
    if (auto it = series.find(std::string(kResumeSeries)); it != series.end()) {
      RUNSTORE_RETURN_IF_ERROR(MergeSeries(it->first, it->second));
    }
    for (auto& [name, blocks] : series) {
      if (name == kResumeSeries) continue;
      RUNSTORE_RETURN_IF_ERROR(MergeSeries(name, blocks));
    }
    result->output_records = written_;
    if (options_.progress) options_.progress(done_records_, total_records_);
    return Status::OK();
  }

 private:
  Status LoadMarkers(const std::map<std::string, std::vector<BlockRef>>& series) {
    auto it = series.find(std::string(kResumeSeries));
    if (it == series.end()) return Status::OK();
    std::map<RunId, std::vector<std::pair<int64_t, CommitOrder>>> list;
    for (const BlockRef& b : it->second) {
      RUNSTORE_ASSIGN_OR_RETURN(Payload p, snap_.ReadPayload(b));
      for (uint32_t r = 0; r < p.view.count(); ++r) {
        list[p.view.run(r).ToRunId()].emplace_back(p.view.step(r), b.commit);
      }
    }
    for (auto& [run, l] : list) {
      std::sort(l.begin(), l.end());
      Markers& m = markers_[run];
      for (const auto& [step, order] : l) {
        m.steps.push_back(step);
        m.latest.push_back(m.latest.empty() ? order : std::max(m.latest.back(), order));
      }
    }
    return Status::OK();
  }

  bool Hidden(const RunRef& run, int64_t step, const CommitOrder& order) const {
    if (markers_.empty()) return false;
    auto it = markers_.find(run.ToRunId());
    return it != markers_.end() && it->second.Hides(step, order);
  }

  // Releases the inputs' mapped pages once a quarter of the budget was read.
  // A fault on a mapping maps the pages around it too (Linux's fault-around:
  // the aligned 64 KiB around the fault), so bytes [offset, offset + n) count
  // as the aligned 64 KiB windows that hold them. The block just
  // read is counted after the release: it is about to be cached and read
  // again, and released pages of a segment no longer listed would stay
  // mapped until the end of the merge.
  void Touched(const BlockRef& b) {
    const LoadedSegment* segment = b.segment;
    const format::BlockInfo& info = segment->index.blocks[b.block];
    // The frame's header, then its payload.
    const uint64_t first = info.frame_offset / kFaultAroundBytes;
    const uint64_t end =
        (info.payload_offset + b.header->payload_len + kFaultAroundBytes - 1) / kFaultAroundBytes;
    const uint64_t bytes = std::max<uint64_t>(end - first, 1) * kFaultAroundBytes;
    if (touched_ > 0 && touched_ + bytes > options_.memory_bytes / 4) ReleaseTouched();
    touched_ += bytes;
    if (touched_segments_.insert(segment).second) touched_list_.push_back(segment);
  }

  void ReleaseTouched() {
    cache_.clear();
    cache_index_.clear();
    for (const LoadedSegment* seg : touched_list_) seg->ReleasePages();
    touched_list_.clear();
    touched_segments_.clear();
    touched_ = 0;
  }

  Result<const Payload*> Block(const BlockRef& b, uint32_t key) {
    if (auto it = cache_index_.find(key); it != cache_index_.end()) {
      cache_.splice(cache_.begin(), cache_, it->second);
      return &it->second->second;
    }
    RUNSTORE_ASSIGN_OR_RETURN(Payload p, snap_.ReadPayload(b));
    Touched(b);
    if (cache_.size() >= kCachedBlocks) {
      cache_index_.erase(cache_.back().first);
      cache_.pop_back();
    }
    cache_.emplace_front(key, std::move(p));
    cache_index_[key] = cache_.begin();
    return &cache_.front().second;
  }

  Status MergeSeries(const std::string& name, const std::vector<BlockRef>& blocks) {
    const format::BlockHeader& first = *blocks.front().header;
    schema_ = format::BlockSchema{name, first.dtype, first.variable_shape,
                                  first.variable_shape ? std::vector<int64_t>{} : first.dims,
                                  options_.codec};
    builder_ = std::make_unique<format::BlockBuilder>(schema_);
    reserved_ = !name.empty() && name[0] == '~';
    cache_.clear();  // indexed by block within the series
    cache_index_.clear();
    uint64_t records = 0, string_runs = 0;
    for (const BlockRef& b : blocks) {
      records += b.header->count;
      if (b.header->run_encoding != format::RunEncoding::kInt) string_runs += b.header->count;
    }
    const uint64_t need = records * sizeof(Entry) + string_runs * 32;
    const uint64_t budget = std::max<uint64_t>(options_.memory_bytes / 4, 1 << 20);
    std::vector<format::Key> bounds;  // pass p covers [bounds[p-1], bounds[p])
    if (need > budget)
      RUNSTORE_RETURN_IF_ERROR(Bounds(blocks, (need + budget - 1) / budget, &bounds));
    for (size_t p = 0; p <= bounds.size(); ++p) {
      const format::Key* lo = p == 0 ? nullptr : &bounds[p - 1];
      const format::Key* hi = p == bounds.size() ? nullptr : &bounds[p];
      RUNSTORE_RETURN_IF_ERROR(Pass(blocks, lo, hi, records / (bounds.size() + 1)));
    }
    return Flush();
  }

  // Cuts the keys into `passes` ranges of about equal counts, from a
  // uniform sample of the keys.
  Status Bounds(const std::vector<BlockRef>& blocks, uint64_t passes,
                std::vector<format::Key>* bounds) {
    const uint64_t want = std::min<uint64_t>(passes * 256, 1 << 16);
    std::vector<format::Key> sample;
    std::mt19937_64 rng(passes);
    uint64_t seen = 0;
    for (uint32_t k = 0; k < blocks.size(); ++k) {
      RUNSTORE_ASSIGN_OR_RETURN(const Payload* p, Block(blocks[k], k));
      for (uint32_t r = 0; r < p->view.count(); ++r, ++seen) {
        if (sample.size() < want) {
          sample.push_back(format::Key{p->view.run(r).ToRunId(), p->view.step(r)});
        } else if (uint64_t j = rng() % (seen + 1); j < want) {
          sample[j] = format::Key{p->view.run(r).ToRunId(), p->view.step(r)};
        }
      }
    }
    std::sort(sample.begin(), sample.end());
    for (uint64_t i = 1; i < passes; ++i) {
      const format::Key& k = sample[i * sample.size() / passes];
      if (bounds->empty() || bounds->back() < k) bounds->push_back(k);
    }
    return Status::OK();
  }

  static bool Below(const RunRef& run, int64_t step, const format::Key& k) {
    const int c = CompareRunRefs(run, k.run);
    return c != 0 ? c < 0 : step < k.step;
  }

  // `expected`: about how many keys the range holds (the sample cut the
  // series into ranges of about equal counts). Reserved with a margin, so
  // that the keys are not copied into a vector twice their size as they
  // grow, which would hold up to three times the budget's share at once.
  Status Pass(const std::vector<BlockRef>& blocks, const format::Key* lo, const format::Key* hi,
              uint64_t expected) {
    std::vector<Entry> entries;
    entries.reserve(expected + expected / 8 + 16);
    std::string arena;
    for (uint32_t k = 0; k < blocks.size(); ++k) {
      const format::BlockHeader& h = *blocks[k].header;
      if (hi && !(h.min_key < *hi)) continue;
      if (lo && h.max_key < *lo) continue;
      RUNSTORE_ASSIGN_OR_RETURN(const Payload* p, Block(blocks[k], k));
      const format::BlockView& v = p->view;
      for (uint32_t r = 0; r < v.count(); ++r) {
        const RunRef run = v.run(r);
        const int64_t step = v.step(r);
        if ((lo && Below(run, step, *lo)) || (hi && !Below(run, step, *hi))) continue;
        Entry e{run.is_string ? 0 : run.i, 0, 0, run.is_string, step, k, r};
        if (run.is_string) {
          e.str_off = static_cast<uint32_t>(arena.size());
          e.str_len = static_cast<uint32_t>(run.s.size());
          arena.append(run.s);
        }
        entries.push_back(e);
      }
    }
    auto run_of = [&](const Entry& e) {
      return e.is_string ? RunRef(std::string_view(arena).substr(e.str_off, e.str_len))
                         : RunRef(e.run_int);
    };
    std::sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
      if (int c = CompareRunRefs(run_of(a), run_of(b)); c != 0) return c < 0;
      if (a.step != b.step) return a.step < b.step;
      const BlockRef& x = blocks[a.block];
      const BlockRef& y = blocks[b.block];
      return std::tie(x.commit, x.block, a.row) < std::tie(y.commit, y.block, b.row);
    });
    for (size_t i = 0; i < entries.size(); ++i) {
      Advanced();
      const Entry& e = entries[i];
      if (i + 1 < entries.size() && entries[i + 1].step == e.step &&
          CompareRunRefs(run_of(entries[i + 1]), run_of(e)) == 0) {
        continue;  // a later commit (or a later write in it) wins
      }
      const RunRef run = run_of(e);
      if (!reserved_ && Hidden(run, e.step, blocks[e.block].commit)) continue;
      RUNSTORE_RETURN_IF_ERROR(Emit(blocks, e, run));
    }
    return Status::OK();
  }

  // One more input record resolved: every record is an entry of exactly
  // one pass of its series.
  void Advanced() {
    if (++done_records_ % kProgressRecords == 0 && options_.progress) {
      options_.progress(done_records_, total_records_);
    }
  }

  Status Emit(const std::vector<BlockRef>& blocks, const Entry& e, const RunRef& run) {
    RUNSTORE_ASSIGN_OR_RETURN(const Payload* p, Block(blocks[e.block], e.block));
    const format::BlockView& v = p->view;
    const std::string_view bytes = v.value_bytes(e.row);
    std::vector<int64_t> shape = schema_.variable_shape ? v.value_shape(e.row) : schema_.dims;
    const ValueRef value{schema_.dtype, shape, bytes.data(), bytes.size()};
    ++written_;
    if (bytes.size() >= kLargeValueBytes && !IsVarLength(schema_.dtype)) {
      // A large value is a block of its own, written from where it lies.
      RUNSTORE_RETURN_IF_ERROR(Flush());
      format::BlockBuilder large(schema_);
      large.AddBorrowed(run, e.step, value);
      RUNSTORE_RETURN_IF_ERROR(out_->AddBlock(&large, /*borrowed=*/true));
      Touched(blocks[e.block]);
      return Status::OK();
    }
    builder_->Add(run, e.step, value);
    if (builder_->raw_bytes() >= options_.block_bytes || builder_->count() >= (1u << 24)) {
      return Flush();
    }
    return Status::OK();
  }

  Status Flush() {
    if (!builder_ || builder_->count() == 0) return Status::OK();
    RUNSTORE_RETURN_IF_ERROR(out_->AddBlock(builder_.get(), /*borrowed=*/false));
    builder_->Reset(schema_);
    return Status::OK();
  }

  static constexpr size_t kCachedBlocks = 16;
  static constexpr uint64_t kProgressRecords = 64 << 10;
  static constexpr uint64_t kFaultAroundBytes = 64 << 10;
  static constexpr size_t kLargeValueBytes = 1 << 20;  // WriterOptions' default

  const SnapshotImpl& snap_;
  Output* const out_;
  const CompactOptions& options_;
  std::map<RunId, Markers> markers_;
  format::BlockSchema schema_;
  std::unique_ptr<format::BlockBuilder> builder_;
  bool reserved_ = false;
  uint64_t touched_ = 0;
  std::set<const LoadedSegment*> touched_segments_;  // whose pages to release
  std::vector<const LoadedSegment*> touched_list_;
  uint64_t written_ = 0;
  uint64_t done_records_ = 0;
  uint64_t total_records_ = 0;
  // Decoded blocks of the current series, most recent first, by index.
  std::list<std::pair<uint32_t, Payload>> cache_;
  std::unordered_map<uint32_t, std::list<std::pair<uint32_t, Payload>>::iterator> cache_index_;
};

}  // namespace

Status MergeSegments(Env* env, const std::string& segments_dir,
                     const std::vector<std::shared_ptr<const LoadedSegment>>& inputs,
                     const std::string& writer_id, int64_t time_ns, format::Replaces replaces,
                     std::vector<format::SegmentId> replaced_earlier,
                     const std::vector<format::AdoptedSegment>& adopted,
                     const CompactOptions& options, MergeResult* result) {
  // A snapshot of the inputs alone: its ranks order them as the store does
  // (by writer id and sequence), and it checks every block once as it reads.
  RUNSTORE_ASSIGN_OR_RETURN(auto snap, SnapshotImpl::Build(inputs));
  Output out(env, segments_dir, writer_id, options);
  Merger merger(*snap, &out, options);
  RUNSTORE_RETURN_IF_ERROR(merger.Run(result));
  return out.Finish(time_ns, std::move(replaces), std::move(replaced_earlier), adopted, result);
}

}  // namespace runstore::compact
