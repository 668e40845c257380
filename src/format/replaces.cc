#include "format/replaces.h"

#include <algorithm>

#include "format/format.h"
#include "util/coding.h"

namespace runstore::format {
namespace {

constexpr uint32_t kReplacesVersion = 1;
constexpr size_t kHeaderBytes = 16;    // u32 version, u32 part_count, u64 count
constexpr size_t kMinEntryBytes = 24;  // u64 seq, i64 created_ns, u16 len, 1 byte, pad to 8
constexpr size_t kMaxWriterIdBytes = 64;

bool ValidIdChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Names the section by its tag: tag 3 has the encoding of tag 2.
Status Bad(std::string_view file, uint32_t tag, uint64_t at, const std::string& what) {
  const char* name = tag == kFooterSectionReplacedEarlier ? "replaced earlier"
                     : tag == kFooterSectionAdopted       ? "adopted"
                                                          : "replaces";
  return Status::Corruption(std::string(file) + ": footer section '" + name + "' (tag " +
                            std::to_string(tag) + "), byte " + std::to_string(at) + ": " + what);
}

}  // namespace

std::string EncodeReplaces(const Replaces& r) {
  std::string out;
  PutFixed<uint32_t>(&out, kReplacesVersion);
  PutFixed<uint32_t>(&out, r.part_count);
  PutFixed<uint64_t>(&out, r.segments.size());
  for (const SegmentId& s : r.segments) {
    PutFixed<uint64_t>(&out, s.sequence);
    PutFixed<int64_t>(&out, s.created_ns);
    PutFixed<uint16_t>(&out, static_cast<uint16_t>(s.writer_id.size()));
    out.append(s.writer_id);
    out.append(AlignUp(out.size(), 8) - out.size(), '\0');
  }
  return out;
}

Status DecodeReplaces(std::string_view b, std::string_view file, Replaces* r, uint32_t tag) {
  *r = Replaces();
  if (b.size() < kHeaderBytes) return Bad(file, tag, 0, "shorter than its 16-byte header");
  const uint32_t version = DecodeFixed<uint32_t>(b.data());
  if (version != kReplacesVersion) {
    return Bad(
        file, tag, 0,
        "version " + std::to_string(version) + ", expected " + std::to_string(kReplacesVersion));
  }
  const uint32_t parts = DecodeFixed<uint32_t>(b.data() + 4);
  if (parts == 0 || parts > kMaxCompactionParts) {
    return Bad(file, tag, 4,
               "part count " + std::to_string(parts) + " is not in 1.." +
                   std::to_string(kMaxCompactionParts));
  }
  const uint64_t count = DecodeFixed<uint64_t>(b.data() + 8);
  // Each entry takes at least kMinEntryBytes: a count the bytes cannot hold
  // is refused before anything is reserved for it.
  if (count > (b.size() - kHeaderBytes) / kMinEntryBytes) {
    return Bad(file, tag, 8,
               std::to_string(count) + " entries cannot fit in " +
                   std::to_string(b.size() - kHeaderBytes) + " bytes");
  }
  r->part_count = parts;
  r->segments.reserve(count);
  uint64_t at = kHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    if (!RangeWithin(at, 18, b.size()))
      return Bad(file, tag, at, "entry " + std::to_string(i) + " is cut");
    SegmentId s;
    s.sequence = DecodeFixed<uint64_t>(b.data() + at);
    s.created_ns = DecodeFixed<int64_t>(b.data() + at + 8);
    const uint16_t len = DecodeFixed<uint16_t>(b.data() + at + 16);
    if (s.sequence == 0)
      return Bad(file, tag, at, "entry " + std::to_string(i) + " has sequence 0");
    if (len == 0 || len > kMaxWriterIdBytes) {
      return Bad(file, tag, at + 16,
                 "writer id length " + std::to_string(len) + " is not in 1..64");
    }
    uint64_t end = 0;
    if (!RangeWithin(at + 18, len, b.size()) || !AlignUpWithin(at + 18 + len, 8, b.size(), &end)) {
      return Bad(file, tag, at + 18, "writer id of entry " + std::to_string(i) + " is cut");
    }
    s.writer_id.assign(b.data() + at + 18, len);
    if (!std::all_of(s.writer_id.begin(), s.writer_id.end(), ValidIdChar)) {
      return Bad(
          file, tag, at + 18,
          "writer id of entry " + std::to_string(i) + " has a character outside [A-Za-z0-9._-]");
    }
    for (uint64_t p = at + 18 + len; p < end; ++p) {
      if (b[p] != '\0') return Bad(file, tag, p, "padding is not zero");
    }
    if (!r->segments.empty() && !(r->segments.back() < s)) {
      return Bad(file, tag, at, "entry " + std::to_string(i) + " is not after the one before it");
    }
    r->segments.push_back(std::move(s));
    at = end;
  }
  if (at != b.size()) {
    return Bad(file, tag, at, std::to_string(b.size() - at) + " bytes after the last entry");
  }
  return Status::OK();
}

std::string EncodeAdopted(const std::vector<AdoptedSegment>& adopted) {
  std::string out;
  PutFixed<uint32_t>(&out, kReplacesVersion);
  PutFixed<uint32_t>(&out, 0);
  PutFixed<uint64_t>(&out, adopted.size());
  for (const AdoptedSegment& a : adopted) {
    PutFixed<uint64_t>(&out, a.id.sequence);
    PutFixed<int64_t>(&out, a.id.created_ns);
    PutFixed<uint64_t>(&out, a.committed_end);
    PutFixed<uint16_t>(&out, static_cast<uint16_t>(a.id.writer_id.size()));
    out.append(a.id.writer_id);
    out.append(AlignUp(out.size(), 8) - out.size(), '\0');
  }
  return out;
}

Status DecodeAdopted(std::string_view b, std::string_view file,
                     std::vector<AdoptedSegment>* adopted) {
  constexpr uint32_t tag = kFooterSectionAdopted;
  constexpr size_t kMinAdoptedBytes = 32;  // u64 seq, i64 created_ns, u64 end, u16 len, 1 byte
  adopted->clear();
  if (b.size() < kHeaderBytes) return Bad(file, tag, 0, "shorter than its 16-byte header");
  const uint32_t version = DecodeFixed<uint32_t>(b.data());
  if (version != kReplacesVersion || DecodeFixed<uint32_t>(b.data() + 4) != 0) {
    return Bad(file, tag, 0,
               "version " + std::to_string(version) + " (reserved " +
                   std::to_string(DecodeFixed<uint32_t>(b.data() + 4)) + "), expected " +
                   std::to_string(kReplacesVersion) + " (0)");
  }
  const uint64_t count = DecodeFixed<uint64_t>(b.data() + 8);
  if (count > (b.size() - kHeaderBytes) / kMinAdoptedBytes) {
    return Bad(file, tag, 8,
               std::to_string(count) + " entries cannot fit in " +
                   std::to_string(b.size() - kHeaderBytes) + " bytes");
  }
  adopted->reserve(count);
  uint64_t at = kHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string entry = "entry " + std::to_string(i);
    if (!RangeWithin(at, 26, b.size())) return Bad(file, tag, at, entry + " is cut");
    AdoptedSegment a;
    a.id.sequence = DecodeFixed<uint64_t>(b.data() + at);
    a.id.created_ns = DecodeFixed<int64_t>(b.data() + at + 8);
    a.committed_end = DecodeFixed<uint64_t>(b.data() + at + 16);
    const uint16_t len = DecodeFixed<uint16_t>(b.data() + at + 24);
    if (a.id.sequence == 0) return Bad(file, tag, at, entry + " has sequence 0");
    if (a.committed_end < kSegmentHeaderSize) {
      return Bad(file, tag, at + 16, entry + " has a committed length inside the header");
    }
    if (len == 0 || len > kMaxWriterIdBytes) {
      return Bad(file, tag, at + 24,
                 "writer id length " + std::to_string(len) + " is not in 1..64");
    }
    uint64_t end = 0;
    if (!RangeWithin(at + 26, len, b.size()) || !AlignUpWithin(at + 26 + len, 8, b.size(), &end)) {
      return Bad(file, tag, at + 26, "writer id of " + entry + " is cut");
    }
    a.id.writer_id.assign(b.data() + at + 26, len);
    if (!std::all_of(a.id.writer_id.begin(), a.id.writer_id.end(), ValidIdChar)) {
      return Bad(file, tag, at + 26,
                 "writer id of " + entry + " has a character outside [A-Za-z0-9._-]");
    }
    for (uint64_t p = at + 26 + len; p < end; ++p) {
      if (b[p] != '\0') return Bad(file, tag, p, "padding is not zero");
    }
    if (!adopted->empty() && !(adopted->back().id < a.id)) {
      return Bad(file, tag, at, entry + " is not after the one before it");
    }
    adopted->push_back(std::move(a));
    at = end;
  }
  if (at != b.size()) {
    return Bad(file, tag, at, std::to_string(b.size() - at) + " bytes after the last entry");
  }
  return Status::OK();
}

}  // namespace runstore::format
