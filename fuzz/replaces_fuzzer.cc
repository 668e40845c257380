// The replaces section of compacted segments (docs/format.md "Replaces
// section") and the rule readers apply to it (docs/design.md#compaction,
// "What readers do"). The input describes up to eight sealed segments of a
// store: for each, `u8 writer` (its writer id: one of two compactions'
// `compact.*` ids, or one of two writers' ids), `u8 sequence`, `u8
// created_ns`, `u16 length` (little endian) and that many bytes of replaces
// section (length 0: the segment has none; 0xffff: the section is encoded
// from the next 2 bytes instead, `u8 part_count, u8 mask` naming the other
// described segments whose bit is set, so that well-formed groups are
// reached often). A description of a file name already described is skipped.
//
// Properties: DecodeReplaces fails only with Corruption naming the segment,
// and what it accepts encodes and decodes to the same; ResolveCompacted never
// fails when damage is tolerated, and its answer obeys the rule: accepted
// groups are complete and pairwise disjoint, every part of a group that is
// not accepted is left out, exactly the segments some accepted group names
// are replaced, and nothing else is left out (no segment is lost for no
// reason). The same input resolves the same twice.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "format/format.h"
#include "format/replaces.h"
#include "fuzz_util.h"
#include "store/compact/compacted.h"
#include "store/read/snapshot.h"

namespace {

using namespace runstore;
using runstore::compact::CompactedResolution;
using runstore::compact::CompactionGroup;
using runstore::compact::IdOf;
using runstore::compact::ResolveCompacted;
using runstore::read::LoadedSegment;

const char* const kWriterIds[] = {"compact.a", "compact.b", "w", "x"};

struct Described {
  std::string name;
  std::shared_ptr<LoadedSegment> seg;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<Described> described;
  std::vector<std::pair<uint8_t, uint8_t>> generated;  // index -> (part_count, mask)
  std::vector<size_t> generated_at;
  while (described.size() < 8 && in.size() >= 5) {
    const auto u8 = [&](size_t i) { return static_cast<uint8_t>(in[i]); };
    const std::string writer_id = kWriterIds[u8(0) % 4];
    const uint64_t sequence = u8(1) % 4 + 1;
    const int64_t created_ns = u8(2) % 3 + 1;
    const size_t len = u8(3) | (size_t{u8(4)} << 8);
    in.remove_prefix(5);
    auto seg = std::make_shared<LoadedSegment>();
    char name[96];
    std::snprintf(name, sizeof name, "%s-%08llu.rss", writer_id.c_str(),
                  static_cast<unsigned long long>(sequence));
    seg->file = std::string("segments/") + name;
    seg->index.sealed = true;
    seg->index.header.writer_id = writer_id;
    seg->index.header.sequence = sequence;
    seg->index.header.created_ns = created_ns;
    // Two descriptions of one file name: the first one is the file.
    const bool duplicate = std::any_of(described.begin(), described.end(),
                                       [&](const Described& d) { return d.name == name; });
    if (len == 0xffff) {
      if (in.size() < 2) break;
      if (!duplicate) {
        generated.emplace_back(u8(0), u8(1));
        generated_at.push_back(described.size());
      }
      in.remove_prefix(2);
    } else if (len > 0) {
      const size_t n = std::min(len, in.size());
      seg->index.footer_sections[format::kFooterSectionReplaces] = std::string(in.substr(0, n));
      in.remove_prefix(n);
    }
    if (!duplicate) described.push_back(Described{name, std::move(seg)});
  }
  for (size_t g = 0; g < generated.size(); ++g) {
    format::Replaces r;
    r.part_count = generated[g].first % 3;
    std::set<format::SegmentId> ids;
    for (size_t i = 0; i < described.size(); ++i) {
      if (generated[g].second & (1u << i)) ids.insert(IdOf(*described[i].seg));
    }
    r.segments.assign(ids.begin(), ids.end());
    described[generated_at[g]].seg->index.footer_sections[format::kFooterSectionReplaces] =
        format::EncodeReplaces(r);
  }

  std::map<std::string, std::shared_ptr<const LoadedSegment>> segs;
  std::map<std::string, format::Replaces> valid;  // segments whose section decodes
  for (const Described& d : described) {
    segs[d.name] = d.seg;
    auto it = d.seg->index.footer_sections.find(format::kFooterSectionReplaces);
    if (it == d.seg->index.footer_sections.end()) continue;
    format::Replaces r;
    const Status s = format::DecodeReplaces(it->second, d.seg->file, &r);
    if (!s.ok()) {
      RUNSTORE_FUZZ_CHECK(s.code() == StatusCode::kCorruption, s.ToString());
      RUNSTORE_FUZZ_CHECK(s.message().find(d.seg->file) != std::string::npos, s.ToString());
      continue;
    }
    RUNSTORE_FUZZ_CHECK(r.part_count <= format::kMaxCompactionParts, "part count");
    for (size_t i = 1; i < r.segments.size(); ++i) {
      RUNSTORE_FUZZ_CHECK(r.segments[i - 1] < r.segments[i], "sorted, no duplicates");
    }
    format::Replaces again;
    RUNSTORE_FUZZ_CHECK(format::DecodeReplaces(format::EncodeReplaces(r), d.seg->file, &again).ok(),
                        "re-encode");
    RUNSTORE_FUZZ_CHECK(again.part_count == r.part_count && again.segments == r.segments,
                        "round trip");
    valid.emplace(d.name, std::move(r));
  }

  const auto tolerate = [](const std::string&, Status) { return Status::OK(); };
  CompactedResolution res;
  RUNSTORE_FUZZ_CHECK(ResolveCompacted(segs, tolerate, &res).ok(), "resolve");
  CompactedResolution twice;
  RUNSTORE_FUZZ_CHECK(ResolveCompacted(segs, tolerate, &twice).ok(), "resolve again");
  RUNSTORE_FUZZ_CHECK(twice.ignored == res.ignored && twice.replaced == res.replaced &&
                          twice.damaged == res.damaged,
                      "deterministic");
  // Refusing damage fails exactly when something is damaged.
  CompactedResolution strict;
  const Status s = ResolveCompacted(
      segs, [](const std::string&, Status st) { return st; }, &strict);
  RUNSTORE_FUZZ_CHECK(s.ok() == res.damaged.empty(), s.ToString());

  std::set<std::string> expect_ignored, expect_replaced;
  std::vector<const CompactionGroup*> accepted;
  for (const auto& [name, seg] : segs) {
    const bool has = seg->index.footer_sections.count(format::kFooterSectionReplaces) != 0;
    RUNSTORE_FUZZ_CHECK(res.damaged.count(name) == (has && !valid.count(name) ? 1u : 0u),
                        "damaged is exactly the sections that do not decode");
    if (res.damaged.count(name)) expect_ignored.insert(name);
  }
  for (const CompactionGroup& g : res.groups) {
    RUNSTORE_FUZZ_CHECK(!g.accepted || g.complete, "accepted groups are complete");
    if (g.complete) {
      RUNSTORE_FUZZ_CHECK(g.parts.size() == g.replaces.part_count, "complete: every part");
      for (const std::string& p : g.parts) {
        RUNSTORE_FUZZ_CHECK(valid.count(p) && valid.at(p).segments == g.replaces.segments &&
                                valid.at(p).part_count == g.replaces.part_count,
                            "complete: parts agree");
      }
    }
    if (g.accepted) {
      for (const CompactionGroup* a : accepted) {
        for (const format::SegmentId& id : g.replaces.segments) {
          RUNSTORE_FUZZ_CHECK(
              !std::binary_search(a->replaces.segments.begin(), a->replaces.segments.end(), id),
              "accepted groups are disjoint");
        }
      }
      accepted.push_back(&g);
    } else {
      expect_ignored.insert(g.parts.begin(), g.parts.end());
    }
  }
  for (const auto& [name, seg] : segs) {
    for (const CompactionGroup* g : accepted) {
      if (std::binary_search(g->replaces.segments.begin(), g->replaces.segments.end(),
                             IdOf(*seg))) {
        expect_replaced.insert(name);
        expect_ignored.insert(name);
      }
    }
  }
  RUNSTORE_FUZZ_CHECK(res.replaced == expect_replaced, "replaced");
  RUNSTORE_FUZZ_CHECK(res.ignored == expect_ignored, "nothing left out for no reason");
  return 0;
}
