// Block payloads (docs/format.md "Block payload"): the run, step and value
// columns of up to thousands of records of one series, each column starting
// at a multiple of 64 bytes of the payload.
#ifndef RUNSTORE_FORMAT_BLOCK_H_
#define RUNSTORE_FORMAT_BLOCK_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/format.h"
#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore::format {

// The schema a block's records share.
struct BlockSchema {
  std::string name;
  DType dtype = DType::kFloat64;
  bool variable_shape = false;
  std::vector<int64_t> dims;  // fixed-shape only
  Codec codec = Codec::kNone;
};

// A growable column of plain bytes. Grows geometrically like std::vector,
// but adds every change of its capacity to the owner's counter, so the writer
// can bound what is really allocated (capacity, not size).
class Column {
 public:
  explicit Column(size_t* memory) : memory_(memory) {}
  ~Column() { std::free(data_); }
  Column(const Column&) = delete;
  Column& operator=(const Column&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() { size_ = 0; }

  void append(const void* p, size_t n) {
    if (n == 0) return;  // p may be null (an empty value)
    if (size_ + n > capacity_) Grow(size_ + n);
    std::memcpy(data_ + size_, p, n);
    size_ += n;
  }
  // Appends one fixed-size value (a constant-size copy the compiler inlines).
  template <typename T>
  void push(T v) {
    if (size_ + sizeof(T) > capacity_) Grow(size_ + sizeof(T));
    std::memcpy(data_ + size_, &v, sizeof(T));
    size_ += sizeof(T);
  }
  // Appends zero bytes up to a size of n.
  void resize_zero(size_t n) {
    if (n > capacity_) Grow(n);
    if (n > size_) std::memset(data_ + size_, 0, n - size_);
    size_ = n;
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_as() {
    return reinterpret_cast<T*>(data_);
  }

 private:
  void Grow(size_t need);
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t* memory_;
};

// Accumulates records column-wise and lays them out as a payload. Used by one
// thread at a time. Values must already match the schema (the writer checks).
// The hash by which the footer's run index names a run (docs/format.md
// "Run index"): XXH3-64 of the run's 8 little-endian bytes with seed 0 for an
// integer run, of its UTF-8 bytes with seed 1 for a string run.
uint64_t RunHash(const RunRef& run);

class BlockBuilder {
 public:
  explicit BlockBuilder(BlockSchema schema);

  const BlockSchema& schema() const { return schema_; }
  uint32_t count() const { return count_; }
  // Bytes of memory the columns hold (their capacity), for the writer's budget.
  size_t memory_bytes() const { return memory_; }
  // Bytes of the raw payload so far (approximately: without padding).
  size_t raw_bytes() const { return raw_bytes_; }

  void Add(const RunRef& run, int64_t step, const ValueRef& value);
  // Adds records of a fixed-shape numeric series: value i is the
  // `record_bytes` at values + i * record_bytes.
  void AddFixed(std::span<const RunRef> runs, std::span<const int64_t> steps, const char* values,
                size_t record_bytes);
  // Adds one record whose value bytes are not copied: `value.data` must stay
  // valid until the pieces from Finish have been written. Only on an empty
  // builder, and the builder takes no more records.
  void AddBorrowed(const RunRef& run, int64_t step, const ValueRef& value);

  // Fills the header fields other than payload_len/payload_checksum and the
  // raw payload as pieces (padding included) that concatenate to raw_len bytes.
  void Finish(BlockHeader* header, std::vector<std::string_view>* pieces);

  // The distinct RunHash of the records' runs, ascending: the block's list in
  // the footer's run index (docs/format.md "Run index").
  void RunHashes(std::vector<uint64_t>* out) const;

  // Empties the columns, keeping their capacity, for reuse with a schema.
  void Reset(BlockSchema schema);

 private:
  void AddKey(const RunRef& run, int64_t step);
  void AddKeyGeneral(const RunRef& run, int64_t step);
  void AddValueBytes(const ValueRef& value);

  BlockSchema schema_;
  size_t memory_ = 0;  // capacity of all columns; declared before them
  uint32_t count_ = 0;
  Column runs_int_{&memory_};  // i64 per record (0 for string runs)
  // Filled only once a string run id appears (from then on, for every record).
  Column run_is_string_{&memory_};    // u8
  Column run_str_offsets_{&memory_};  // u32, count + 1
  Column run_str_bytes_{&memory_};
  bool any_int_run_ = false;
  bool any_string_run_ = false;
  Column steps_{&memory_};  // i64
  Column values_{&memory_};
  Column value_offsets_{&memory_};  // u64: var-length dtypes and variable shapes
  Column ranks_{&memory_};          // u8: variable shapes
  Column shape_dims_{&memory_};     // i64: variable shapes
  const char* borrowed_ = nullptr;
  size_t borrowed_len_ = 0;
  size_t raw_bytes_ = 0;
  std::string run_sequences_;   // Finish's run column as sequences, if stored so
  std::string step_sequences_;  // the same for the step column
  bool ascending_ = true;
  // Key tracking. While every run is an integer the keys are kept as plain
  // integers (the append hot path); the first string run switches to Keys.
  bool int_keys_ = true;
  int64_t last_run_ = 0, last_step_ = 0;
  int64_t min_run_ = 0, min_run_step_ = 0, max_run_ = 0, max_run_step_ = 0;
  Key min_key_, max_key_, last_key_;
  int64_t min_step_ = 0, max_step_ = 0;
};

class BlockView;
// The distinct RunHash of a parsed block's runs, ascending: what its entry in
// the footer's run index must hold.
void RunHashesOf(const BlockView& view, std::vector<uint64_t>* out);

// Where the value data of a block with kBlockValueChunks lies in its payload,
// and its chunk checksums (docs/format.md "Value chunks").
struct ValueChunks {
  uint64_t data_offset = 0;  // of the value data, within the payload
  uint64_t data_len = 0;
  uint8_t shift = 0;            // chunks of 2^shift bytes; the last may be shorter
  uint64_t count = 0;           // of chunks
  const char* table = nullptr;  // u64[count], in the payload

  // Bytes [begin, end) of the value data that chunk i covers.
  uint64_t begin(uint64_t i) const { return i << shift; }
  uint64_t end(uint64_t i) const { return std::min(data_len, (i + 1) << shift); }
  uint64_t expected(uint64_t i) const;
};

class PayloadCursor;  // block.cc

// Read access to a raw (decompressed) payload. Checks every offset and length
// against the payload size on Parse, so accessors need no further checks.
class BlockView {
 public:
  // `payload` must stay valid while the view is used.
  Status Parse(const BlockHeader& header, std::string_view payload);

  uint32_t count() const { return count_; }
  RunEncoding run_encoding() const { return run_encoding_; }
  bool run_is_string(uint32_t i) const {
    return run_encoding_ == RunEncoding::kString ||
           (run_encoding_ == RunEncoding::kMixed && run_is_string_[i] != 0);
  }
  int64_t run_int(uint32_t i) const {
    return run_sequences_ ? Nth(run_sequences_, run_sequence_count_, i) : LoadI64(runs_int_, i);
  }
  std::string_view run_string(uint32_t i) const;
  RunRef run(uint32_t i) const {
    return run_is_string(i) ? RunRef(run_string(i)) : RunRef(run_int(i));
  }
  int64_t step(uint32_t i) const {
    return step_sequences_ ? Nth(step_sequences_, step_sequence_count_, i) : LoadI64(steps_, i);
  }
  // The last record of key (run, step), or -1: a point lookup in a block whose
  // keys are not ascending. Steps stored as sequences are searched a sequence
  // at a time (the rows of a sequence whose step is `step` are solved for,
  // not visited), so a lookup costs O(sequences + rows of that step), where
  // visiting every row through step() cost O(rows x log sequences): 330 us in
  // a block of 43,690 records of 100 interleaved runs.
  int64_t FindLast(const RunRef& run, int64_t step) const;
  // Column pointers (64-byte aligned within the payload); null when the
  // column is stored as sequences.
  const char* int_runs_data() const { return run_sequences_ ? nullptr : runs_int_; }
  const char* steps_data() const { return step_sequences_ ? nullptr : steps_; }
  // Writes all count() runs (integer runs only) or steps to `out`.
  void CopyIntRuns(int64_t* out) const;
  void CopySteps(int64_t* out) const;

  // Fixed-shape numeric: all values, count * record_bytes.
  const char* fixed_values() const { return values_; }
  size_t record_bytes() const { return record_bytes_; }
  // The value of record i: its bytes and its shape.
  std::string_view value_bytes(uint32_t i) const;
  std::vector<int64_t> value_shape(uint32_t i) const;
  // Checks the records against what the block's header says of them, which
  // readers rely on without reading the payload: every step lies in
  // [min_step, max_step], every key in [min_key, max_key], and the keys
  // strictly ascend when the header's flag says so (key resolution passes
  // such a block whole, and point lookups binary-search it). Every string run
  // id, and every value of a string series, must be valid UTF-8: what writers
  // accept, and what readers (a Python str) can hold. Corruption otherwise.
  // O(records + bytes of text); Parse leaves it out, as the checksum checks,
  // so that the store runs it once per block.
  Status CheckRecords(const BlockHeader& header) const;
  // The value chunks of a block with kBlockValueChunks; null otherwise.
  const ValueChunks* value_chunks() const { return chunks_.table ? &chunks_ : nullptr; }

 private:
  // The steps of Parse, in the order of docs/format.md "Block payload".
  Status ParseRunColumn(const BlockHeader& h, PayloadCursor* cur);
  Status ParseStepColumn(const BlockHeader& h, PayloadCursor* cur);
  Status ParseFixedValues(const BlockHeader& h, PayloadCursor* cur);
  Status ParseOffsetValues(const BlockHeader& h, PayloadCursor* cur);
  Status ParseChunkTable(const BlockHeader& h, PayloadCursor* cur);
  Status CheckValueText() const;
  static int64_t LoadI64(const char* p, uint32_t i);
  // Value i of a column stored as `count` sequences at `seq`.
  static int64_t Nth(const char* seq, uint64_t count, uint32_t i);
  static void Expand(const char* seq, uint64_t count, int64_t* out);
  uint32_t count_ = 0;
  const char* run_sequences_ = nullptr;  // non-null: the run column is stored as sequences
  const char* step_sequences_ = nullptr;
  uint64_t run_sequence_count_ = 0;
  uint64_t step_sequence_count_ = 0;
  RunEncoding run_encoding_ = RunEncoding::kInt;
  DType dtype_ = DType::kFloat64;
  bool variable_shape_ = false;
  std::vector<int64_t> dims_;
  const uint8_t* run_is_string_ = nullptr;
  const char* runs_int_ = nullptr;
  const char* run_str_offsets_ = nullptr;
  const char* run_str_bytes_ = nullptr;
  const char* steps_ = nullptr;
  const char* values_ = nullptr;
  size_t record_bytes_ = 0;
  const char* value_offsets_ = nullptr;  // u64[count + 1]
  const uint8_t* ranks_ = nullptr;
  std::vector<uint64_t> dim_starts_;  // variable shapes: index into dims of record i
  const char* shape_dims_ = nullptr;
  ValueChunks chunks_;
};

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_BLOCK_H_
