// The footer's run index (docs/format.md "Run index"): for each block of a
// sealed segment, the distinct hashes of its records' runs, so that a point
// lookup by run reads only the blocks that hold it and counting runs reads no
// block. Blocks that hold the same runs (every series of one log_many) share
// one list, in the file and in memory.
#ifndef RUNSTORE_FORMAT_RUN_INDEX_H_
#define RUNSTORE_FORMAT_RUN_INDEX_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace runstore::format {

// Block b's runs are list list_of[b] - 1 (0: the block is not listed, and
// readers take it for a candidate of every run, its key range deciding).
// List k's hashes are hashes[ends[k-1] .. ends[k]) (ends[-1] = 0), strictly
// ascending and never empty. Two blocks with one list share its storage: the
// spans Of() returns for them are equal, data pointer included.
struct RunIndex {
  std::vector<uint32_t> list_of;  // one per block
  std::vector<uint64_t> ends;     // one per list
  std::vector<uint64_t> hashes;

  size_t block_count() const { return list_of.size(); }
  size_t list_count() const { return ends.size(); }
  std::span<const uint64_t> Of(uint32_t block) const { return List(list_of[block]); }
  // List k - 1, or none for k = 0.
  std::span<const uint64_t> List(uint32_t k) const {
    if (k == 0) return {};
    const uint64_t lo = k == 1 ? 0 : ends[k - 2];
    return {hashes.data() + lo, ends[k - 1] - lo};
  }
};

// Builds a RunIndex block by block, giving blocks whose runs are a list
// already held that list: memory and bytes follow the distinct lists, not
// the blocks.
class RunIndexBuilder {
 public:
  // The next block's hashes, strictly ascending; none for a block left
  // unlisted.
  void Add(std::span<const uint64_t> hashes);
  const RunIndex& index() const { return index_; }
  RunIndex Take();

 private:
  RunIndex index_;
  // Content hash of a list -> its number (1-based). A second list with the
  // same content hash but other hashes is kept as a list of its own.
  std::unordered_map<uint64_t, uint32_t> by_content_;
};

// The section a writer writes (kFooterSectionSharedRunIndex): `u64
// block_count, u64 list_count, u64 list_of[block_count], u64
// ends[list_count], u64 hashes[...]`, a multiple of 8 bytes.
uint64_t SharedRunIndexSize(const RunIndex& index);
void AppendSharedRunIndex(const RunIndex& index, std::string* dst);

// Decoders of the two sections, for a footer of `blocks` blocks; false with
// *error for bytes that are not one. Every count is bounded by the bytes
// before anything is allocated for it. The per-block section (tag
// kFooterSectionRunIndex, "u64 block_count, u64 ends[block_count], u64
// hashes[...]") is read into shared lists as well.
bool DecodeRunIndex(std::string_view bytes, uint64_t blocks, RunIndex* index, std::string* error);
bool DecodeSharedRunIndex(std::string_view bytes, uint64_t blocks, RunIndex* index,
                          std::string* error);

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_RUN_INDEX_H_
