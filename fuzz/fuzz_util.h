// Helpers shared by the fuzz targets (fuzz/README.md): byte buffers that
// AddressSanitizer guards to the byte, reading every record of a parsed
// block, an in-memory Env whose mappings are such buffers, checksum fix-ups,
// and the properties of a segment index that every reader relies on.
//
// A property that does not hold aborts with a message naming it (Fail), so
// that libFuzzer reports the input as a crash.
#ifndef RUNSTORE_FUZZ_FUZZ_UTIL_H_
#define RUNSTORE_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "format/block.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "runstore/env.h"
#include "runstore/reader.h"
#include "runstore/store.h"
#include "runstore/types.h"

namespace runstore::fuzzing {

// Prints "fuzz property failed: <what> <detail>" and aborts.
[[noreturn]] void Fail(const char* what, const std::string& detail = "");

#define RUNSTORE_FUZZ_CHECK(cond, detail)                                    \
  do {                                                                       \
    if (!(cond)) ::runstore::fuzzing::Fail(#cond, std::string() + (detail)); \
  } while (0)

// Bytes in a heap block of exactly their size, 64-byte aligned as a payload
// is in a mapped segment: ASan reports a read even one byte past them (a
// std::string may have spare capacity, and small ones live inline).
class ExactBytes {
 public:
  ExactBytes() = default;
  explicit ExactBytes(std::string_view bytes);
  ExactBytes(const ExactBytes&) = delete;
  ExactBytes& operator=(const ExactBytes&) = delete;

  const char* data() const { return data_.get(); }
  char* mutable_data() { return data_.get(); }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// Reads every byte of [p, p + n) in instrumented code, so that ASan checks
// them (libxxhash, which hashes them elsewhere, is not instrumented).
void Touch(const char* p, size_t n);
inline void Touch(std::string_view s) { Touch(s.data(), s.size()); }

// Reads every record of a parsed block through its view: run, step, value
// bytes and shape of each, the column copies and the value chunk table.
// Checks what BlockView::Parse promises its accessors: every view lies inside
// `payload`, the copies agree with the accessors, and a numeric value's bytes
// are exactly what its shape holds.
void TouchBlock(const format::BlockHeader& h, const format::BlockView& v, std::string_view payload);

// Reads a value's bytes and checks that a numeric one holds exactly what its
// dtype and shape say (what a numpy view of it would read). A batch's values
// (`batch`: shape [count, record shape]) are held to that for the record
// shape; only a record's shape is bounded by kMaxValueBytes.
void TouchValue(const Value& v, bool batch = false);

// An Env over NewMemEnv whose mappings are ExactBytes copies of the file, so
// that ASan sees a read past the mapped length.
std::unique_ptr<Env> NewExactMemEnv();

// Writes `contents` to `path` (replacing it); aborts on failure.
void PutFile(Env* env, const std::string& path, std::string_view contents);

// Creates the directories of a store at `path` ("/s": "/s" and
// "/s/segments") with `marker` as its RUNSTORE file.
void MakeStoreDir(Env* env, const std::string& path, std::string_view marker);

// The properties of an index that LoadSegmentIndex or RefreshSegmentIndex
// returned OK for, which the store relies on without checking them again:
// the committed end lies inside the file (the store maps [0, committed_end),
// and a real mapping past the end of a file faults when touched), and every
// block belongs to an accepted commit and lies before the committed end,
// after the blocks before it.
void CheckIndex(const format::SegmentIndex& index, uint64_t file_size, const std::string& name);

// Reads every block of an index as the store does: maps [0, committed_end),
// checks each payload (format::CheckPayload) and decodes it (DecodeBlock,
// even when the check failed: decoding must be safe on any bytes), then
// reads every record. Returns the number of blocks that decoded.
size_t ReadBlocks(const RandomAccessFile& file, const format::SegmentIndex& index,
                  const std::string& name);

// The stored payload checksum of a block, as a writer computes it: of the
// whole payload, or, for a block with value chunks whose payload parses,
// of the bytes outside the value data, after writing each chunk's checksum
// into the chunk table of `payload`.
uint64_t FixPayloadChecksums(const format::BlockHeader& h, char* payload, size_t n);

// Recomputes every checksum in a segment's bytes, leaving every other field
// as it is, so that a mutated file reaches the checks behind the checksums:
// the segment header's; along the walk of frames from offset 128, each
// block's payload checksum (and value chunk table) and header checksum, and
// each commit record's frames digest and header checksum; the footer named
// by a trailer (its copies of block headers, its payload checksum and header
// checksum) and the trailer's.
void FixChecksums(std::string* segment);

// Writes the header checksum of the frame header at `header` (len bytes).
void FixHeaderChecksum(char* header, size_t len);

// Splits the input of the block payload targets, a block frame header
// followed by a payload, into *header (a copy) and *payload. The header's
// payload_len is set to the payload's length, and so is its raw_len when its
// codec is none, so that a mutation that changes the payload's length still
// reaches the parser. False if the input does not start with a frame header.
bool SplitBlockInput(std::string_view in, std::string* header, std::string_view* payload);

// Reads everything a snapshot holds through the public API: ListSegments,
// ListSeries, ListRuns, every series scanned whole and with run filters and
// step windows, Get and GetLazy (with partial checks, then CheckAll) of keys
// the scans returned and of one that is absent, VerifyAll. A read may fail
// with NotFound, or with Corruption naming the segment; every value returned
// is read (TouchValue) and every batch must be consistent with itself.
void ReadSnapshot(const Snapshot& snap);

// Opens the store at `path` in `env` read-only; nullptr if it does not open,
// which must be for a reason CheckOpenStatus allows.
std::unique_ptr<Store> OpenReadOnly(Env* env, const std::string& path);

// What opening or refreshing a store whose directory is sound but whose
// marker or segments may be damaged may fail with: Corruption or
// NotSupported, naming the file (under `path`, or "segments/...").
void CheckOpenStatus(const Status& s, const std::string& path);

// A little-endian cursor over a fuzz input, for the parameters that a
// harness takes from its front: each Get reads what is left, zero-filled.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size)
      : p_(reinterpret_cast<const char*>(data)), left_(size) {}
  template <typename T>
  T Get() {
    T v{};
    const size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  // The next n bytes, or fewer if the input ends first.
  std::string_view Take(size_t n) {
    if (n > left_) n = left_;
    std::string_view s(p_, n);
    p_ += n;
    left_ -= n;
    return s;
  }
  std::string_view Rest() { return Take(left_); }
  size_t left() const { return left_; }

 private:
  const char* p_;
  size_t left_;
};

}  // namespace runstore::fuzzing

#endif  // RUNSTORE_FUZZ_FUZZ_UTIL_H_
