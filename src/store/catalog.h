// The catalog (docs/format.md "Catalog", docs/design.md#catalog): a cache of
// what opening reads of each sealed segment (its header, trailer and footer),
// so that opening a store of many segments reads one file instead of three
// ranges of every segment. Rebuildable from the segments at any time and
// never trusted over them: an entry is used only while the segment's file
// has the size, modification time and inode the entry records.
#ifndef RUNSTORE_STORE_CATALOG_H_
#define RUNSTORE_STORE_CATALOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore {

inline constexpr char kCatalogName[] = "CATALOG";

// The byte ranges of a segment file that loading its index read, and the
// file's size then.
struct SegmentReads {
  uint64_t size = 0;
  // (offset, bytes); the bytes are held by `owner`: the recorded reads, or
  // the whole catalog file they were read from, shared by all its entries
  // (one buffer instead of an allocation per range).
  std::vector<std::pair<uint64_t, std::string_view>> ranges;
  std::shared_ptr<const void> owner;
  // Loading read more than a catalog keeps of a segment (a sealed segment
  // whose damaged footer sent the reader to recovery): ranges is empty.
  bool overflowed = false;
};

// A file whose reads are recorded into `reads` (for a later catalog), up to
// kMaxRecordedBytes.
inline constexpr uint64_t kMaxRecordedBytes = uint64_t{64} << 20;
std::unique_ptr<RandomAccessFile> NewRecordingFile(const RandomAccessFile& base,
                                                   SegmentReads* reads);
// A file of reads.size bytes that serves the recorded ranges and nothing
// else: any other read fails with NotFound ("not in the catalog"), and so
// does Map, so that an index that needs more than the catalog holds (a
// damaged footer, which sends the reader to recovery) is read from the file.
std::unique_ptr<RandomAccessFile> NewReplayFile(std::shared_ptr<const SegmentReads> reads);

// What loading a sealed segment's index read, without the bytes: the file's
// size then, where each range lies, and an XXH3-128 hash of their bytes. A
// loaded segment keeps this rather than the bytes (about 150 bytes where the
// bytes are about 700 for a small segment, and the catalog's whole buffer
// while any entry of it was kept): a catalog written later reads the ranges
// again from the file, and verify compares a catalog entry with the file by
// it (docs/design.md#catalog).
struct SegmentReadsDigest {
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, length)
  uint64_t hash_low = 0;
  uint64_t hash_high = 0;
};
SegmentReadsDigest DigestOf(const SegmentReads& reads);
// The ranges of `digest` read again from `file`: null when the file's size
// or the bytes there differ from what the digest recorded (the file is not
// the one it was made of); an error only when the file cannot be read.
Result<std::shared_ptr<const SegmentReads>> ReadAgain(const RandomAccessFile& file,
                                                      const SegmentReadsDigest& digest);

struct CatalogEntry {
  FileInfo info;  // of the segment file when its reads were recorded
  std::shared_ptr<const SegmentReads> reads;
};

class Catalog {
 public:
  // The most bytes a catalog of segment files of these sizes can hold: per
  // segment, what loading its index can read (at most its size, and at most
  // kMaxRecordedBytes) plus kMaxEntryOverheadBytes, and the header.
  static constexpr uint64_t kMaxEntryOverheadBytes = 8192;
  static uint64_t MaxBytes(std::span<const FileInfo> segments);

  // Reads `<store>/CATALOG`, which must be at most `max_bytes` long (from
  // MaxBytes of the segments listed), checked against its size before
  // anything is allocated for it. NotFound when there is none; Corruption
  // (naming the file) when it is damaged or larger than `max_bytes`,
  // NotSupported for a newer version, ResourceExhausted when memory for it
  // cannot be had: the caller then reads every segment itself.
  static Result<std::shared_ptr<const Catalog>> Read(Env* env, const std::string& store_path,
                                                     uint64_t max_bytes);

  // Writes a catalog of `entries` (by segment file name) with the publish
  // protocol: a temporary file of a name of its own, synced, renamed over
  // CATALOG, the directory synced. Any number of processes may write at once;
  // each rename installs a whole catalog. Removes the temporaries of writers
  // that crashed: those older by far than its own, both times being the file
  // system's, so that no two machines' clocks are compared.
  static Status Write(Env* env, const std::string& store_path,
                      const std::map<std::string, CatalogEntry>& entries);

  const CatalogEntry* Find(std::string_view name) const;
  // By segment file name, sorted; the names are views into the catalog's
  // bytes, which the entries' reads keep alive.
  const std::vector<std::pair<std::string_view, CatalogEntry>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  // Drops the pages of a mapped catalog from the process's resident set (the
  // entries stay valid, read again from the page cache when touched): for
  // a caller that reads many entries, now and then.
  void ReleasePages() const;

 private:
  // The file's body (after its header of `size`), mapped or read into
  // memory, held by bytes_ (and map_).
  Result<std::string_view> HoldBody(const RandomAccessFile& file, const std::string& path,
                                    uint64_t size);
  // The `count` entries of `body`, into entries_ (Corruption naming `path`).
  Status DecodeEntries(const std::string& path, std::string_view body, uint64_t count);

  std::vector<std::pair<std::string_view, CatalogEntry>> entries_;
  // The file's body, which entries_ point into: the mapping, or a buffer the
  // file was read into where it cannot be mapped.
  std::shared_ptr<const char[]> bytes_;
  std::shared_ptr<const MappedRegion> map_;
};

}  // namespace runstore

#endif  // RUNSTORE_STORE_CATALOG_H_
