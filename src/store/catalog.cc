#include "store/catalog.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <new>

#include "env/read_pages.h"
#include "util/coding.h"
#include "util/hash.h"
#include "util/random.h"

namespace runstore {
namespace {

// docs/format.md "Catalog".
constexpr char kCatalogMagic[8] = {'R', 'S', 'C', 'A', 'T', 'A', 'L', '\n'};
constexpr uint32_t kCatalogVersion = 1;
constexpr uint64_t kCatalogHeaderSize = 48;
constexpr char kTempPrefix[] = "CATALOG.tmp.";
// A temporary this much older than a file written now belongs to a writer
// that crashed: writing a catalog takes seconds.
constexpr int64_t kStaleTemporaryNs = int64_t{600} * 1'000'000'000;
// Bytes of a mapped catalog read between drops of its pages.
constexpr uint64_t kReleaseBytes = uint64_t{8} << 20;

class RecordingFile final : public RandomAccessFile {
 public:
  RecordingFile(const RandomAccessFile& base, SegmentReads* reads) : base_(base), reads_(reads) {}
  Status Read(uint64_t offset, size_t n, char* scratch, std::string_view* result) const override {
    RUNSTORE_RETURN_IF_ERROR(base_.Read(offset, n, scratch, result));
    if (reads_->overflowed) return Status::OK();
    recorded_ += result->size();
    if (recorded_ > kMaxRecordedBytes) {
      reads_->overflowed = true;
      reads_->ranges.clear();
      reads_->ranges.shrink_to_fit();
      reads_->owner.reset();
      kept_ = nullptr;
    } else {
      if (!kept_) {
        auto kept = std::make_shared<std::list<std::string>>();
        kept_ = kept.get();
        reads_->owner = std::move(kept);
      }
      // A list: its strings never move, so the views stay valid.
      reads_->ranges.emplace_back(offset, kept_->emplace_back(*result));
    }
    return Status::OK();
  }
  Result<uint64_t> Size() const override {
    auto size = base_.Size();
    if (size.ok()) reads_->size = *size;
    return size;
  }
  Result<std::shared_ptr<const MappedRegion>> Map(uint64_t length) const override {
    return base_.Map(length);
  }

 private:
  const RandomAccessFile& base_;
  SegmentReads* const reads_;
  mutable uint64_t recorded_ = 0;
  mutable std::list<std::string>* kept_ = nullptr;  // held by reads_->owner
};

class ReplayFile final : public RandomAccessFile {
 public:
  explicit ReplayFile(std::shared_ptr<const SegmentReads> reads) : reads_(std::move(reads)) {}
  Status Read(uint64_t offset, size_t n, char* /*scratch*/,
              std::string_view* result) const override {
    const uint64_t want = offset >= reads_->size ? 0 : std::min<uint64_t>(n, reads_->size - offset);
    for (const auto& [at, bytes] : reads_->ranges) {
      if (at <= offset && offset - at <= bytes.size() && want <= bytes.size() - (offset - at)) {
        *result = std::string_view(bytes).substr(offset - at, want);
        return Status::OK();
      }
    }
    return Status::NotFound("bytes " + std::to_string(offset) + "+" + std::to_string(n) +
                            " are not in the catalog");
  }
  Result<uint64_t> Size() const override { return reads_->size; }
  Result<std::shared_ptr<const MappedRegion>> Map(uint64_t /*length*/) const override {
    return Status::NotFound("a catalog entry cannot be mapped");
  }

 private:
  std::shared_ptr<const SegmentReads> reads_;
};

}  // namespace

std::unique_ptr<RandomAccessFile> NewRecordingFile(const RandomAccessFile& base,
                                                   SegmentReads* reads) {
  return std::make_unique<RecordingFile>(base, reads);
}

std::unique_ptr<RandomAccessFile> NewReplayFile(std::shared_ptr<const SegmentReads> reads) {
  return std::make_unique<ReplayFile>(std::move(reads));
}

SegmentReadsDigest DigestOf(const SegmentReads& reads) {
  SegmentReadsDigest d;
  d.size = reads.size;
  d.ranges.reserve(reads.ranges.size());
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (const auto& [offset, bytes] : reads.ranges) {
    d.ranges.emplace_back(offset, bytes.size());
    XXH3_128bits_update(&state, bytes.data(), bytes.size());
  }
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  d.hash_low = h.low64;
  d.hash_high = h.high64;
  return d;
}

Result<std::shared_ptr<const SegmentReads>> ReadAgain(const RandomAccessFile& file,
                                                      const SegmentReadsDigest& digest) {
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  if (size != digest.size) return std::shared_ptr<const SegmentReads>();
  uint64_t total = 0;
  for (const auto& [offset, len] : digest.ranges) {
    if (offset > size || len > size - offset) return std::shared_ptr<const SegmentReads>();
    total += len;
  }
  // One buffer for every range, as a catalog holds them.
  auto buf = std::make_shared<std::string>(total, '\0');
  auto reads = std::make_shared<SegmentReads>();
  reads->size = size;
  uint64_t at = 0;
  for (const auto& [offset, len] : digest.ranges) {
    std::string_view got;
    RUNSTORE_RETURN_IF_ERROR(file.Read(offset, len, buf->data() + at, &got));
    if (got.size() != len) return std::shared_ptr<const SegmentReads>();
    if (got.data() != buf->data() + at) std::memcpy(buf->data() + at, got.data(), len);
    reads->ranges.emplace_back(offset, std::string_view(buf->data() + at, len));
    at += len;
  }
  reads->owner = std::move(buf);
  const SegmentReadsDigest again = DigestOf(*reads);
  if (again.hash_low != digest.hash_low || again.hash_high != digest.hash_high) {
    return std::shared_ptr<const SegmentReads>();
  }
  return std::shared_ptr<const SegmentReads>(std::move(reads));
}

void Catalog::ReleasePages() const {
  if (map_ != nullptr) map_->ReleasePages();
}

const CatalogEntry* Catalog::Find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  return it == entries_.end() || it->first != name ? nullptr : &it->second;
}

uint64_t Catalog::MaxBytes(std::span<const FileInfo> segments) {
  uint64_t bound = kCatalogHeaderSize;
  for (const FileInfo& f : segments) {
    bound += std::min(f.size, kMaxRecordedBytes) + kMaxEntryOverheadBytes;
  }
  return bound;
}

namespace {

Status Damaged(const std::string& path, const std::string& what) {
  return Status::Corruption(path + ": " + what + "; the catalog is ignored");
}

}  // namespace

Result<std::shared_ptr<const Catalog>> Catalog::Read(Env* env, const std::string& store_path,
                                                     uint64_t max_bytes) {
  const std::string path = store_path + "/" + kCatalogName;
  RUNSTORE_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
  RUNSTORE_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size < kCatalogHeaderSize) return Damaged(path, "shorter than its header");
  // The header first, and the file's size against what its header says and
  // against what the segments there are can need, before a byte of the body
  // is allocated: a huge or sparse file named CATALOG costs a read of 48
  // bytes (docs/format.md "Catalog").
  char header[kCatalogHeaderSize];
  std::string_view got;
  RUNSTORE_RETURN_IF_ERROR(file->Read(0, kCatalogHeaderSize, header, &got));
  if (got.size() != kCatalogHeaderSize) return Damaged(path, "changed while it was read");
  const char* p = got.data();
  if (std::memcmp(p, kCatalogMagic, 8) != 0) {
    return Damaged(path, "not a runstore catalog (bad magic)");
  }
  if (DecodeFixed<uint64_t>(p + 40) != Checksum(p, 40)) {
    return Damaged(path, "header checksum mismatch");
  }
  const uint32_t version = DecodeFixed<uint32_t>(p + 8);
  if (version != kCatalogVersion) {
    return Status::NotSupported(path + ": catalog version " + std::to_string(version) +
                                " is not supported; this build reads version 1");
  }
  const uint64_t count = DecodeFixed<uint64_t>(p + 16);
  const uint64_t body_len = DecodeFixed<uint64_t>(p + 24);
  const uint64_t body_checksum = DecodeFixed<uint64_t>(p + 32);
  if (body_len != size - kCatalogHeaderSize) {
    return Damaged(path, "its size does not match its header");
  }
  if (size > max_bytes) {
    return Damaged(path, std::to_string(size) + " bytes, more than a catalog of the segments " +
                             "there are can hold (" + std::to_string(max_bytes) + ")");
  }
  auto catalog = std::make_shared<Catalog>();
  RUNSTORE_ASSIGN_OR_RETURN(const std::string_view body, catalog->HoldBody(*file, path, size));
  ReadPages pages(catalog->map_.get(), body.data(), body.size(), kReleaseBytes);
  ChecksumStream sum;
  for (uint64_t at = 0; at < body.size(); at += kReleaseBytes) {
    const uint64_t n = std::min<uint64_t>(kReleaseBytes, body.size() - at);
    sum.Update(body.data() + at, n);
    pages.ReadUpTo(at + n);
  }
  if (sum.Digest() != body_checksum) return Damaged(path, "checksum mismatch");
  RUNSTORE_RETURN_IF_ERROR(catalog->DecodeEntries(path, body, count));
  catalog->ReleasePages();
  return std::shared_ptr<const Catalog>(std::move(catalog));
}

Result<std::string_view> Catalog::HoldBody(const RandomAccessFile& file, const std::string& path,
                                           uint64_t size) {
  // Mapped where the file can be, its pages dropped as they are read (a
  // catalog of a million small segments is about 700 MiB, which a buffer
  // would hold while every segment's index is made from it); else read into
  // one buffer.
  const uint64_t body_len = size - kCatalogHeaderSize;
  if (auto map = file.Map(size); map.ok() && (*map)->size() == size) {
    map_ = *map;
    bytes_ = std::shared_ptr<const char[]>(*map, (*map)->data());
    return std::string_view((*map)->data() + kCatalogHeaderSize, body_len);
  }
  std::shared_ptr<char[]> buf;
  try {
    buf.reset(new char[body_len]);
  } catch (const std::bad_alloc&) {
    // Within the bound, memory can still run out: that is no damage.
    return Status::ResourceExhausted(path + ": cannot allocate " + std::to_string(body_len) +
                                         " bytes to read the catalog (out of memory); the "
                                         "catalog is ignored",
                                     ENOMEM);
  }
  std::string_view got;
  RUNSTORE_RETURN_IF_ERROR(file.Read(kCatalogHeaderSize, body_len, buf.get(), &got));
  if (got.size() != body_len) return Damaged(path, "changed while it was read");
  if (got.data() != buf.get() && body_len > 0) std::memcpy(buf.get(), got.data(), body_len);
  bytes_ = std::move(buf);
  return std::string_view(bytes_.get(), body_len);
}

Status Catalog::DecodeEntries(const std::string& path, std::string_view body, uint64_t count) {
  auto bad = [&](uint64_t i, const std::string& what) {
    return Damaged(path, what.empty() ? "entry " + std::to_string(i) + " is damaged" : what);
  };
  ReadPages pages(map_.get(), body.data(), body.size(), kReleaseBytes);
  const std::shared_ptr<const void> owner = bytes_;
  constexpr uint64_t kMinEntryBytes = 42;  // an empty name and no ranges
  entries_.reserve(std::min<uint64_t>(count, body.size() / kMinEntryBytes));
  Decoder d(body);
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view name;
    CatalogEntry e;
    auto reads = std::make_shared<SegmentReads>();
    uint32_t ranges, reserved;
    if (!d.GetString16(&name) || !d.Get(&e.info.size) || !d.Get(&e.info.mtime_ns) ||
        !d.Get(&e.info.inode) || !d.Get(&reads->size) || !d.Get(&ranges) || !d.Get(&reserved) ||
        ranges > d.remaining() / 16) {
      return bad(i, "");
    }
    reads->ranges.reserve(ranges);  // at most remaining() / 16, checked above
    for (uint32_t r = 0; r < ranges; ++r) {
      uint64_t offset, len;
      std::string_view bytes;
      if (!d.Get(&offset) || !d.Get(&len) || len > d.remaining() || !d.GetBytes(len, &bytes)) {
        return bad(i, "");
      }
      reads->ranges.emplace_back(offset, bytes);
    }
    reads->owner = owner;
    e.reads = std::move(reads);
    // Written from a sorted map: names ascend, each once.
    if (!entries_.empty() && !(entries_.back().first < name)) {
      return bad(i, entries_.back().first == name
                        ? "segment " + std::string(name) + " appears twice"
                        : "entry " + std::to_string(i) + " is out of order");
    }
    entries_.emplace_back(name, std::move(e));
    pages.ReadUpTo(body.size() - d.remaining());
  }
  if (d.remaining() != 0) return Damaged(path, "trailing bytes after its entries");
  return Status::OK();
}

namespace {

// One entry of the body (docs/format.md "Catalog"), appended to `out`.
void AppendEntry(const std::string& name, const CatalogEntry& e, std::string* out) {
  PutFixed<uint16_t>(out, static_cast<uint16_t>(name.size()));
  *out += name;
  PutFixed<uint64_t>(out, e.info.size);
  PutFixed<int64_t>(out, e.info.mtime_ns);
  PutFixed<uint64_t>(out, e.info.inode);
  PutFixed<uint64_t>(out, e.reads->size);
  PutFixed<uint32_t>(out, static_cast<uint32_t>(e.reads->ranges.size()));
  PutFixed<uint32_t>(out, 0);
  for (const auto& [offset, bytes] : e.reads->ranges) {
    PutFixed<uint64_t>(out, offset);
    PutFixed<uint64_t>(out, bytes.size());
    *out += bytes;
  }
}

}  // namespace

Status Catalog::Write(Env* env, const std::string& store_path,
                      const std::map<std::string, CatalogEntry>& entries) {
  // A name of its own: two processes writing at once never share a file.
  const std::string tmp_name = std::string(kTempPrefix) + RandomHex16();
  const std::string tmp = store_path + "/" + tmp_name;
  {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp, /*exclusive=*/true));
    // The body is written a piece of about kReleaseBytes at a time (in one
    // string it was held whole, about 700 MiB for a million small segments,
    // and up to three times that while it grew), after room for the header,
    // which holds its length and checksum and is written last, in place.
    Status s = f->Append(std::string(kCatalogHeaderSize, '\0'));
    ChecksumStream body_checksum;
    uint64_t body_len = 0;
    std::string piece;
    auto put = [&]() {
      body_checksum.Update(piece.data(), piece.size());
      body_len += piece.size();
      s = f->Append(piece);
      piece.clear();
    };
    for (auto it = entries.begin(); s.ok() && it != entries.end(); ++it) {
      AppendEntry(it->first, it->second, &piece);
      if (piece.size() >= kReleaseBytes) put();
    }
    if (s.ok() && !piece.empty()) put();
    if (s.ok()) {
      std::string header(kCatalogMagic, 8);
      PutFixed<uint32_t>(&header, kCatalogVersion);
      PutFixed<uint32_t>(&header, 0);
      PutFixed<uint64_t>(&header, entries.size());
      PutFixed<uint64_t>(&header, body_len);
      PutFixed<uint64_t>(&header, body_checksum.Digest());
      PutFixed<uint64_t>(&header, Checksum(header));
      s = f->WriteAt(0, header);
    }
    if (s.ok()) s = f->Sync();
    if (s.ok()) s = f->Close();
    if (!s.ok()) {
      (void)env->RemoveFile(tmp);  // best effort; a later writer removes it otherwise
      return s.WithContext("writing the catalog");
    }
  }
  // Temporaries of crashed writers: older than ours by far.
  if (auto mine = env->GetFileInfo(tmp); mine.ok() && mine->mtime_ns != 0) {
    if (auto children = env->GetChildren(store_path); children.ok()) {
      for (const std::string& c : *children) {
        if (c.rfind(kTempPrefix, 0) != 0 || c == tmp_name) continue;
        auto info = env->GetFileInfo(store_path + "/" + c);
        if (info.ok() && info->mtime_ns < mine->mtime_ns - kStaleTemporaryNs) {
          (void)env->RemoveFile(store_path + "/" + c);  // best effort: another may remove it too
        }
      }
    }
  }
  RUNSTORE_RETURN_IF_ERROR(env->RenameFile(tmp, store_path + "/" + kCatalogName));
  return env->SyncDir(store_path);
}

}  // namespace runstore
