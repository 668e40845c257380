// Verification (Snapshot::VerifyAll): every block of every segment checked
// again, past every problem, by the segment file's own index.
#include <algorithm>
#include <iterator>
#include <vector>

#include "env/read_pages.h"
#include "format/replaces.h"
#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"

namespace runstore::read {

using format::BlockHeader;
using format::Key;

namespace {

// Whether the bytes the catalog held for `seg` are the file's: each range
// read again from the file and hashed as the entry's were (XXH3-128, the
// digest the segment keeps instead of the bytes). The catalog is never
// trusted over a segment, and verify is what would otherwise blame a healthy
// file for a lying entry.
Result<bool> CatalogEntryMatchesFile(const LoadedSegment& seg) {
  RUNSTORE_ASSIGN_OR_RETURN(auto file, seg.env->NewRandomAccessFile(seg.path()));
  RUNSTORE_ASSIGN_OR_RETURN(auto again, ReadAgain(*file, *seg.reads));
  return again != nullptr;
}

// The segment as its file alone says, for checking instead of a catalog
// entry that differs from it.
Result<std::shared_ptr<const LoadedSegment>> LoadFromFile(const LoadedSegment& seg) {
  auto own = std::make_shared<LoadedSegment>();
  own->file = seg.file;
  own->env = seg.env;
  own->root = seg.root;
  RUNSTORE_ASSIGN_OR_RETURN(auto file, seg.env->NewRandomAccessFile(seg.path()));
  RUNSTORE_ASSIGN_OR_RETURN(own->info, file->Info());
  RUNSTORE_RETURN_IF_ERROR(format::LoadSegmentIndex(*file, seg.file, &own->index));
  own->verified = std::make_unique<std::atomic<bool>[]>(own->index.blocks.size());
  return std::shared_ptr<const LoadedSegment>(std::move(own));
}

// The segment as verify checks it: `loaded`, or, where its index came from
// a catalog entry that does not hold the file's bytes, the file's own
// (reporting the catalog's lie to `problem`, never blaming the segment);
// null when even that cannot be had (reported).
std::shared_ptr<const LoadedSegment> SegmentToCheck(
    const std::shared_ptr<const LoadedSegment>& loaded,
    const std::function<void(Status)>& problem) {
  if (!loaded->from_catalog || !loaded->reads) return loaded;
  auto same = CatalogEntryMatchesFile(*loaded);
  if (!same.ok()) {
    problem(same.status());
    return nullptr;
  }
  if (*same) return loaded;
  problem(Status::Corruption(
      std::string("CATALOG: its entry for ") + loaded->file +
      " does not hold that file's bytes (a stale or damaged catalog); readers that use "
      "it read the segment as the entry says: rebuild it with 'runstore catalog STORE'"));
  auto own = LoadFromFile(*loaded);
  if (!own.ok()) {
    problem(own.status());
    return nullptr;
  }
  return std::move(own).value();
}

// The footer's run index must name exactly a block's runs (`hashes`, as
// listed for it: `listed`): a lookup trusts it to leave the others out.
// Corruption saying which way they differ; OK if they agree or the footer
// lists none for the block.
Status CheckRunsListed(const std::string& at, const std::vector<uint64_t>& hashes,
                       std::span<const uint64_t> listed) {
  if (listed.empty() || std::equal(hashes.begin(), hashes.end(), listed.begin(), listed.end())) {
    return Status::OK();
  }
  // Both ascending: say which way they differ.
  std::vector<uint64_t> missing, extra;
  std::set_difference(hashes.begin(), hashes.end(), listed.begin(), listed.end(),
                      std::back_inserter(missing));
  std::set_difference(listed.begin(), listed.end(), hashes.begin(), hashes.end(),
                      std::back_inserter(extra));
  return Status::Corruption(at + "the footer's run index does not list the block's runs (" +
                            std::to_string(listed.size()) + " listed, the block holds " +
                            std::to_string(hashes.size()) + "; " + std::to_string(missing.size()) +
                            " of its runs unlisted, which lookups by run miss, and " +
                            std::to_string(extra.size()) + " listed that it does not hold)");
}

// Block `bi` of `seg` checked again in its mapping: its frame header in the
// file (a sealed segment is read through the footer's copy, so only verify
// looks at this one; damage there goes to `problems`), its payload, records
// and the footer's list of its runs (the status returned). `hashes`: scratch.
Status CheckBlock(const LoadedSegment& seg, uint32_t bi,
                  const std::shared_ptr<const MappedRegion>& mapping, std::vector<uint64_t>* hashes,
                  std::vector<Status>* problems) {
  const MappedRegion& map = *mapping;
  const format::BlockInfo& info = seg.index.blocks[bi];
  const std::string at = seg.file + ": offset " + std::to_string(info.frame_offset) + ": ";
  format::FramePrefix prefix;
  if (!RangeWithin(info.frame_offset, info.header_len, map.size()) ||
      !format::CheckFrameHeader(std::string_view(map.data() + info.frame_offset, info.header_len),
                                &prefix)
           .ok() ||
      prefix.payload_checksum != info.header.payload_checksum) {
    problems->push_back(Status::Corruption(at + "block frame header is damaged"));
  }
  if (!RangeWithin(info.payload_offset, info.header.payload_len, map.size())) {
    return Status::Corruption(at + "block payload extends past the committed end");
  }
  // Checked again even if a read already verified it.
  const std::string_view stored(map.data() + info.payload_offset, info.header.payload_len);
  RUNSTORE_RETURN_IF_ERROR(format::CheckPayload(stored, info, seg.file));
  Payload p;
  RUNSTORE_RETURN_IF_ERROR(format::DecodeBlock(stored, nullptr, mapping, info, seg.file, &p));
  if (Status s = p.view.CheckRecords(info.header); !s.ok()) {
    return s.WithContext(format::AtOffset(seg.file, info.payload_offset));
  }
  if (!seg.index.run_index) return Status::OK();
  format::RunHashesOf(p.view, hashes);
  return CheckRunsListed(at, *hashes, seg.index.run_index->Of(bi));
}

}  // namespace

VerifyReport SnapshotImpl::VerifyAll(
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  VerifyReport report;
  for (const DamagedSegment& d : damaged_) report.problems.push_back(d.status);
  uint64_t total = 0;
  for (const auto& seg : segments_) {
    for (const auto& info : seg->index.blocks) total += info.header.payload_len;
  }
  // A segment that cannot be checked for want of a resource is no problem
  // of the store; anything else that fails is one.
  const std::function<void(Status)> problem = [&](Status s) {
    (s.code() == StatusCode::kResourceExhausted ? report.unchecked : report.problems)
        .push_back(std::move(s));
  };
  std::vector<uint64_t> hashes;
  for (const auto& loaded : segments_) {
    ++report.segments;
    const std::shared_ptr<const LoadedSegment> checked = SegmentToCheck(loaded, problem);
    if (checked == nullptr) continue;
    const LoadedSegment& seg = *checked;
    // Readers never use the replaced-earlier section (only sync and new
    // writers' numbering do, which skip one they cannot decode, and
    // compaction, which refuses it as an input): only verify reports it.
    if (auto it = seg.index.footer_sections.find(format::kFooterSectionReplacedEarlier);
        it != seg.index.footer_sections.end()) {
      format::Replaces r;
      if (Status s = format::DecodeReplaces(it->second, seg.file, &r, it->first); !s.ok()) {
        report.problems.push_back(s);
      }
    }
    auto bytes = seg.Open();
    if (!bytes.ok()) {
      problem(bytes.status());
      continue;
    }
    const std::shared_ptr<const MappedRegion>& mapping = bytes->map;
    const MappedRegion& map = *mapping;
    // The pages checked leave this process's mapping as it goes (a MiB at a
    // time; they come back from the page cache if touched again), so that
    // verifying a store of many GiB holds a bounded number of them.
    ReadPages pages(&map, map.data(), map.size(), uint64_t{1} << 20);
    for (uint32_t bi = 0; bi < seg.index.blocks.size(); ++bi) {
      const format::BlockInfo& info = seg.index.blocks[bi];
      const Status s = CheckBlock(seg, bi, mapping, &hashes, &report.problems);
      if (!s.ok()) problem(s);
      pages.ReadUpTo(info.payload_offset + info.header.payload_len);
      ++report.blocks_checked;
      report.bytes_checked += info.header.payload_len;
      if (progress) progress(report.bytes_checked, total);
    }
    pages.Finish();
  }
  for (const auto& c : conflicts_) report.problems.push_back(Status::Corruption(c));
  return report;
}

}  // namespace runstore::read
