#include "store/compact/compacted.h"

#include <algorithm>

#include "format/format.h"
#include "format/segment_reader.h"

namespace runstore::compact {
using read::LoadedSegment;

format::SegmentId IdOf(const LoadedSegment& seg) {
  return format::SegmentId{seg.index.header.writer_id, seg.index.header.sequence,
                           seg.index.header.created_ns};
}

namespace {
bool Intersect(const std::vector<format::SegmentId>& a, const std::vector<format::SegmentId>& b) {
  // Both sorted (DecodeReplaces checks it).
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}
}  // namespace

Status ResolveCompacted(const std::map<std::string, std::shared_ptr<const LoadedSegment>>& segs,
                        const std::function<Status(const std::string& name, Status)>& damage,
                        CompactedResolution* out) {
  *out = CompactedResolution();
  // Parts by writer id, with the bytes of their sections.
  struct Part {
    std::string name;
    uint64_t seq;
    std::string bytes;
  };
  std::map<std::string, std::vector<Part>> parts;
  std::map<std::string, std::pair<format::Replaces, std::vector<format::AdoptedSegment>>> decoded;
  for (const auto& [name, seg] : segs) {
    if (!seg || !seg->index.sealed) continue;
    auto it = seg->index.footer_sections.find(format::kFooterSectionReplaces);
    if (it == seg->index.footer_sections.end()) continue;
    format::Replaces r;
    std::vector<format::AdoptedSegment> adopted;
    Status s = format::DecodeReplaces(it->second, seg->file, &r);
    std::string bytes = it->second;
    if (auto a = seg->index.footer_sections.find(format::kFooterSectionAdopted);
        s.ok() && a != seg->index.footer_sections.end()) {
      s = format::DecodeAdopted(a->second, seg->file, &adopted);
      // Every adopted segment is one the compaction replaces.
      for (size_t i = 0; s.ok() && i < adopted.size(); ++i) {
        if (!std::binary_search(r.segments.begin(), r.segments.end(), adopted[i].id)) {
          s = Status::Corruption(
              seg->file + ": footer section 'adopted' names " +
              format::SegmentFileName(adopted[i].id.writer_id, adopted[i].id.sequence) +
              ", which its replaces section does not");
        }
      }
      bytes += a->second;  // parts must carry the same adoptions too
    }
    if (!s.ok()) {
      RUNSTORE_RETURN_IF_ERROR(damage(name, std::move(s)));
      out->damaged.insert(name);
      out->ignored.insert(name);
      continue;
    }
    const std::string& id = seg->index.header.writer_id;
    parts[id].push_back(Part{name, seg->index.header.sequence, std::move(bytes)});
    // The first part's; the others are compared by bytes.
    decoded.emplace(id, std::make_pair(std::move(r), std::move(adopted)));
  }
  for (auto& [id, list] : parts) {
    CompactionGroup g;
    g.writer_id = id;
    g.replaces = decoded[id].first;
    g.adopted = decoded[id].second;
    // An adopted segment that holds commits past the length merged belongs
    // to a writer that was alive after all: readers read the inputs as if
    // the compaction had not run (docs/design.md#adoption).
    for (const format::AdoptedSegment& a : g.adopted) {
      auto present = segs.find(format::SegmentFileName(a.id.writer_id, a.id.sequence));
      if (present != segs.end() && present->second && IdOf(*present->second) == a.id &&
          present->second->index.committed_end > a.committed_end) {
        g.voided = true;
      }
    }
    std::sort(list.begin(), list.end(), [](const Part& a, const Part& b) { return a.seq < b.seq; });
    bool complete = list.size() == g.replaces.part_count;
    for (size_t i = 0; i < list.size(); ++i) {
      g.parts.push_back(list[i].name);
      complete = complete && list[i].seq == i + 1 && list[i].bytes == list[0].bytes;
    }
    g.complete = complete;
    out->groups.push_back(std::move(g));
  }
  // Groups are sorted by writer id (map order). Of complete groups whose
  // replaced sets intersect, the first by writer id stands and the others
  // are left out whole.
  std::vector<const CompactionGroup*> accepted;
  for (CompactionGroup& g : out->groups) {
    if (g.complete && !g.voided) {
      g.accepted = std::none_of(accepted.begin(), accepted.end(), [&](const CompactionGroup* a) {
        return Intersect(a->replaces.segments, g.replaces.segments);
      });
      if (g.accepted) accepted.push_back(&g);
    }
    if (!g.accepted) out->ignored.insert(g.parts.begin(), g.parts.end());
  }
  // A segment an accepted group names is left out, whether or not that group
  // is itself replaced (chains: what C1 replaced stays replaced once C2
  // replaces C1).
  for (const auto& [name, seg] : segs) {
    if (!seg) continue;
    const format::SegmentId id = IdOf(*seg);
    for (const CompactionGroup* g : accepted) {
      if (std::binary_search(g->replaces.segments.begin(), g->replaces.segments.end(), id)) {
        out->ignored.insert(name);
        out->replaced.insert(name);
        break;
      }
    }
  }
  return Status::OK();
}

Status ForEachReplaced(Env* env, const std::string& segments_dir,
                       const std::vector<std::string>& children,
                       const std::function<void(const format::SegmentId&)>& fn) {
  for (const std::string& c : children) {
    std::string id;
    uint64_t seq;
    if (!format::ParseSegmentFileName(c, &id, &seq) || !id.starts_with(kCompactWriterPrefix)) {
      continue;
    }
    auto file = env->NewRandomAccessFile(segments_dir + "/" + c);
    if (!file.ok()) {
      if (file.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
      return file.status();
    }
    format::SegmentIndex index;
    // A compacted segment that cannot be read names nothing a reader uses;
    // readers report it.
    if (!format::LoadSegmentIndex(**file, c, &index).ok() || !index.sealed) continue;
    // What it replaces, and what its compacted inputs had replaced before it
    // (gone by then, and named still).
    for (uint32_t tag : {format::kFooterSectionReplaces, format::kFooterSectionReplacedEarlier}) {
      auto it = index.footer_sections.find(tag);
      if (it == index.footer_sections.end()) continue;
      format::Replaces r;
      if (!format::DecodeReplaces(it->second, c, &r, tag).ok()) continue;  // verify reports it
      for (const format::SegmentId& s : r.segments) fn(s);
    }
  }
  return Status::OK();
}

Result<uint64_t> NextSequencePastReplaced(Env* env, const std::string& segments_dir,
                                          const std::vector<std::string>& children,
                                          const std::string& writer_id) {
  uint64_t next = 1;
  RUNSTORE_RETURN_IF_ERROR(
      ForEachReplaced(env, segments_dir, children, [&](const format::SegmentId& s) {
        if (s.writer_id == writer_id) next = std::max(next, s.sequence + 1);
      }));
  return next;
}

}  // namespace runstore::compact
