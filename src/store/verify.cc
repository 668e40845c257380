// Verification (Snapshot::VerifyAll): every block of every segment checked
// again, past every problem.
#include <algorithm>
#include <iterator>
#include <vector>

#include "format/replaces.h"
#include "store/snapshot.h"
#include "store/snapshot_helpers.h"

namespace runstore {

using format::BlockHeader;
using format::Key;

VerifyReport SnapshotImpl::VerifyAll(
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  VerifyReport report;
  for (const DamagedSegment& d : damaged_) report.problems.push_back(d.status);
  uint64_t total = 0;
  for (const auto& seg : segments_) {
    for (const auto& info : seg->index.blocks) total += info.header.payload_len;
  }
  std::vector<uint64_t> hashes;
  for (uint32_t si = 0; si < segments_.size(); ++si) {
    const LoadedSegment& seg = *segments_[si];
    ++report.segments;
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
    if (Status s = seg.EnsureOpen(); !s.ok()) {
      report.problems.push_back(s);
      continue;
    }
    for (uint32_t bi = 0; bi < seg.index.blocks.size(); ++bi) {
      const format::BlockInfo& info = seg.index.blocks[bi];
      const std::string at = seg.file + ": offset " + std::to_string(info.frame_offset) + ": ";
      // The frame header in the file: a sealed segment is read through the
      // footer's copy, so only Verify looks at this one.
      format::FramePrefix prefix;
      if (!RangeWithin(info.frame_offset, info.header_len, seg.map->size()) ||
          !format::CheckFrameHeader(
               std::string_view(seg.map->data() + info.frame_offset, info.header_len), &prefix)
               .ok() ||
          prefix.payload_checksum != info.header.payload_checksum) {
        report.problems.push_back(Status::Corruption(at + "block frame header is damaged"));
      }
      Status s;
      if (!RangeWithin(info.payload_offset, info.header.payload_len, seg.map->size())) {
        s = Status::Corruption(at + "block payload extends past the committed end");
      } else {
        // Checked again even if a read already verified it.
        s = format::CheckPayload(
            std::string_view(seg.map->data() + info.payload_offset, info.header.payload_len), info,
            seg.file);
        if (s.ok()) {
          auto p = ReadPayload(BlockRef{si, bi, {}, info.frame_offset, &info.header});
          s = p.status();
          // The footer's run index must name exactly the block's runs: a
          // lookup trusts it to leave the others out.
          if (s.ok() && seg.index.run_index) {
            format::RunHashesOf(p->view, &hashes);
            const auto listed = seg.index.run_index->Of(bi);
            if (!listed.empty() &&
                !std::equal(hashes.begin(), hashes.end(), listed.begin(), listed.end())) {
              // Both ascending: say which way they differ.
              std::vector<uint64_t> missing, extra;
              std::set_difference(hashes.begin(), hashes.end(), listed.begin(), listed.end(),
                                  std::back_inserter(missing));
              std::set_difference(listed.begin(), listed.end(), hashes.begin(), hashes.end(),
                                  std::back_inserter(extra));
              s = Status::Corruption(
                  at + "the footer's run index does not list the block's runs (" +
                  std::to_string(listed.size()) + " listed, the block holds " +
                  std::to_string(hashes.size()) + "; " + std::to_string(missing.size()) +
                  " of its runs unlisted, which lookups by run miss, and " +
                  std::to_string(extra.size()) + " listed that it does not hold)");
            }
          }
        }
      }
      if (!s.ok()) report.problems.push_back(s);
      ++report.blocks_checked;
      report.bytes_checked += info.header.payload_len;
      if (progress) progress(report.bytes_checked, total);
    }
  }
  for (const auto& c : conflicts_) report.problems.push_back(Status::Corruption(c));
  return report;
}

}  // namespace runstore
