#include "format/block.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "util/coding.h"
#include "util/hash.h"
#include "util/shape.h"
#include "util/sort.h"
#include "util/utf8.h"

namespace runstore::format {
namespace {

const char kZeros[kFrameAlign] = {};

// Appends a piece and, if needed, zero padding up to a multiple of `align`
// of the running position.
void AddPiece(std::vector<std::string_view>* pieces, uint64_t* pos, const void* data, size_t n) {
  if (n == 0) return;
  pieces->emplace_back(static_cast<const char*>(data), n);
  *pos += n;
}
void Pad(std::vector<std::string_view>* pieces, uint64_t* pos, uint64_t align) {
  uint64_t target = AlignUp(*pos, align);
  if (target != *pos) {
    pieces->emplace_back(kZeros, target - *pos);
    *pos = target;
  }
}

}  // namespace

void Column::Grow(size_t need) {
  size_t cap = std::max<size_t>({need, 2 * capacity_, 256});
  char* p = static_cast<char*>(std::realloc(data_, cap));
  if (p == nullptr) throw std::bad_alloc();
  *memory_ += cap - capacity_;
  data_ = p;
  capacity_ = cap;
}

BlockBuilder::BlockBuilder(BlockSchema schema) { Reset(std::move(schema)); }

void BlockBuilder::Reset(BlockSchema schema) {
  schema_ = std::move(schema);
  count_ = 0;
  for (Column* c : {&runs_int_, &run_is_string_, &run_str_offsets_, &run_str_bytes_, &steps_,
                    &values_, &value_offsets_, &ranks_, &shape_dims_}) {
    c->clear();
  }
  any_int_run_ = any_string_run_ = false;
  borrowed_ = nullptr;
  borrowed_len_ = 0;
  raw_bytes_ = 0;
  ascending_ = true;
  int_keys_ = true;
}

namespace {

// Compares two keys given as (is_string, int, string, step).
struct KeyRef {
  bool is_string;
  int64_t i;
  std::string_view s;
  int64_t step;
};
// Byte strings in the order of memcmp: where both hold 8 bytes, their first
// 8 as big-endian integers first (run ids mostly differ there: a comparison
// of each record of a block with its key range costs no call), then memcmp.
int CompareBytes(std::string_view a, std::string_view b) {
  if (a.size() >= 8 && b.size() >= 8) {
    uint64_t x, y;
    std::memcpy(&x, a.data(), 8);
    std::memcpy(&y, b.data(), 8);
    if (x != y) return __builtin_bswap64(x) < __builtin_bswap64(y) ? -1 : 1;
  }
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

int CompareKeys(const KeyRef& a, const KeyRef& b) {
  if (a.is_string != b.is_string) return a.is_string ? 1 : -1;
  if (!a.is_string) {
    if (a.i != b.i) return a.i < b.i ? -1 : 1;
  } else if (const int c = CompareBytes(a.s, b.s); c != 0) {
    return c;
  }
  if (a.step != b.step) return a.step < b.step ? -1 : 1;
  return 0;
}
KeyRef ToKeyRef(const Key& k) {
  return KeyRef{k.run.is_string(), k.run.is_int() ? k.run.int_value() : 0,
                k.run.is_string() ? std::string_view(k.run.string_value()) : std::string_view(),
                k.step};
}
Key ToKey(const RunRef& run, int64_t step) { return Key{run.ToRunId(), step}; }

}  // namespace

void BlockBuilder::AddKey(const RunRef& run, int64_t step) {
  const bool first = count_ == 0;
  ++count_;
  steps_.push<int64_t>(step);
  raw_bytes_ += 16;
  if (!run.is_string) {
    runs_int_.push<int64_t>(run.i);
    any_int_run_ = true;
    if (any_string_run_) {
      run_is_string_.push<uint8_t>(0);
      run_str_offsets_.push<uint32_t>(static_cast<uint32_t>(run_str_bytes_.size()));
    }
  } else {
    if (!any_string_run_) {
      any_string_run_ = true;
      run_is_string_.resize_zero(count_ - 1);
      run_str_offsets_.resize_zero(4ull * count_);
    }
    runs_int_.push<int64_t>(0);
    run_is_string_.push<uint8_t>(1);
    run_str_bytes_.append(run.s.data(), run.s.size());
    run_str_offsets_.push<uint32_t>(static_cast<uint32_t>(run_str_bytes_.size()));
    raw_bytes_ += 5 + run.s.size();
  }

  if (first) {
    min_step_ = max_step_ = step;
    if (!run.is_string) {
      last_run_ = min_run_ = max_run_ = run.i;
      last_step_ = min_run_step_ = max_run_step_ = step;
    } else {
      int_keys_ = false;
      min_key_ = max_key_ = last_key_ = ToKey(run, step);
    }
    return;
  }
  if (step < min_step_) min_step_ = step;
  if (step > max_step_) max_step_ = step;
  if (int_keys_ && !run.is_string) {
    // The hot path: integer runs, keys compared as integer pairs.
    const int64_t r = run.i;
    if (r < last_run_ || (r == last_run_ && step <= last_step_)) ascending_ = false;
    if (ascending_) {
      max_run_ = r;
      max_run_step_ = step;
    } else {
      if (r < min_run_ || (r == min_run_ && step < min_run_step_)) {
        min_run_ = r;
        min_run_step_ = step;
      }
      if (r > max_run_ || (r == max_run_ && step > max_run_step_)) {
        max_run_ = r;
        max_run_step_ = step;
      }
    }
    last_run_ = r;
    last_step_ = step;
    return;
  }
  if (int_keys_) {
    // The first string run: switch to general keys.
    int_keys_ = false;
    min_key_ = Key{RunId(min_run_), min_run_step_};
    max_key_ = Key{RunId(max_run_), max_run_step_};
    last_key_ = Key{RunId(last_run_), last_step_};
  }
  AddKeyGeneral(run, step);
}

void BlockBuilder::AddKeyGeneral(const RunRef& run, int64_t step) {
  // A writer's common case: the run of the last record at a later step. While
  // ascending, the largest key is the last one, so only their steps change
  // (no string compared past the run, none copied).
  if (ascending_ && run.is_string && step > last_key_.step && last_key_.run.is_string() &&
      last_key_.run.string_value() == run.s) {
    last_key_.step = step;
    max_key_.step = step;
    return;
  }
  KeyRef k{run.is_string, run.i, run.s, step};
  if (ascending_) {
    if (CompareKeys(k, ToKeyRef(last_key_)) > 0) {
      max_key_ = ToKey(run, step);
      last_key_ = max_key_;
      return;
    }
    ascending_ = false;
  }
  // Not ascending, for good: the last key no longer matters, and a key is
  // copied only when it is a new smallest or largest (hashed run ids: rarely).
  if (CompareKeys(k, ToKeyRef(min_key_)) < 0) min_key_ = ToKey(run, step);
  if (CompareKeys(k, ToKeyRef(max_key_)) > 0) max_key_ = ToKey(run, step);
}

void BlockBuilder::AddValueBytes(const ValueRef& value) {
  if (IsVarLength(schema_.dtype)) {
    value_offsets_.push<uint64_t>(values_.size());
    values_.append(value.data, value.nbytes);
    raw_bytes_ += value.nbytes + 8;
  } else if (schema_.variable_shape) {
    values_.resize_zero(AlignUp(values_.size(), 8));
    value_offsets_.push<uint64_t>(values_.size());
    values_.append(value.data, value.nbytes);
    ranks_.push<uint8_t>(static_cast<uint8_t>(value.shape.size()));
    shape_dims_.append(value.shape.data(), 8 * value.shape.size());
    raw_bytes_ += AlignUp(value.nbytes, 8) + 9 + 8 * value.shape.size();
  } else if (value.nbytes == 8) {
    values_.push<uint64_t>(*static_cast<const uint64_t*>(value.data));
    raw_bytes_ += 8;
  } else {
    values_.append(value.data, value.nbytes);
    raw_bytes_ += value.nbytes;
  }
}

uint64_t RunHash(const RunRef& run) {
  if (run.is_string) return XXH3_64bits_withSeed(run.s.data(), run.s.size(), 1);
  char le[8];
  EncodeFixed<int64_t>(le, run.i);
  return XXH3_64bits_withSeed(le, sizeof(le), 0);
}

void BlockBuilder::RunHashes(std::vector<uint64_t>* out) const {
  out->clear();
  const char* ints = runs_int_.data();
  const auto* is_string = reinterpret_cast<const uint8_t*>(run_is_string_.data());
  const char* offsets = run_str_offsets_.data();
  const char* bytes = run_str_bytes_.data();
  for (uint32_t i = 0; i < count_; ++i) {
    uint64_t h;
    if (any_string_run_ && is_string[i]) {
      const uint32_t lo = DecodeFixed<uint32_t>(offsets + 4ull * i);
      const uint32_t hi = DecodeFixed<uint32_t>(offsets + 4ull * (i + 1));
      h = RunHash(RunRef(std::string_view(bytes + lo, hi - lo)));
    } else {
      h = RunHash(RunRef(DecodeFixed<int64_t>(ints + 8ull * i)));
    }
    if (out->empty() || out->back() != h) out->push_back(h);  // runs come in stretches
  }
  SortDistinctUint64(out);
}

void RunHashesOf(const BlockView& view, std::vector<uint64_t>* out) {
  out->clear();
  for (uint32_t r = 0; r < view.count(); ++r) {
    const uint64_t h = RunHash(view.run(r));
    if (out->empty() || out->back() != h) out->push_back(h);
  }
  SortDistinctUint64(out);
}

void BlockBuilder::Add(const RunRef& run, int64_t step, const ValueRef& value) {
  AddKey(run, step);
  AddValueBytes(value);
}

void BlockBuilder::AddFixed(std::span<const RunRef> runs, std::span<const int64_t> steps,
                            const char* values, size_t record_bytes) {
  for (size_t i = 0; i < runs.size(); ++i) AddKey(runs[i], steps[i]);
  values_.append(values, runs.size() * record_bytes);
  raw_bytes_ += runs.size() * record_bytes;
}

void BlockBuilder::AddBorrowed(const RunRef& run, int64_t step, const ValueRef& value) {
  assert(count_ == 0);
  AddKey(run, step);
  borrowed_ = static_cast<const char*>(value.data);
  borrowed_len_ = value.nbytes;
  raw_bytes_ += value.nbytes;
  if (IsVarLength(schema_.dtype)) {
    value_offsets_.push<uint64_t>(0);
  } else if (schema_.variable_shape) {
    value_offsets_.push<uint64_t>(0);
    ranks_.push<uint8_t>(static_cast<uint8_t>(value.shape.size()));
    shape_dims_.append(value.shape.data(), 8 * value.shape.size());
  }
}

namespace {

// Encodes the n i64 at `p` as sequences (docs/format.md "Block payload"),
// each as long as it goes, if that takes at most half of their 8 * n bytes;
// otherwise returns false and the column is stored plainly.
bool EncodeSequences(const char* p, uint32_t n, std::string* out) {
  out->clear();
  const size_t budget = 4ull * n;
  if (8 + kSequenceBytes > budget) return false;
  PutFixed<uint64_t>(out, 0);  // the count, filled in below
  uint64_t count = 0;
  for (uint32_t i = 0; i < n;) {
    const uint64_t first = DecodeFixed<uint64_t>(p + 8ull * i);
    const uint64_t diff = i + 1 < n ? DecodeFixed<uint64_t>(p + 8ull * (i + 1)) - first : 0;
    uint32_t end = i + 1;
    for (uint64_t next = first + diff; end < n && DecodeFixed<uint64_t>(p + 8ull * end) == next;
         next += diff) {
      ++end;
    }
    PutFixed<uint64_t>(out, end);
    PutFixed<uint64_t>(out, first);
    PutFixed<uint64_t>(out, diff);
    ++count;
    if (out->size() > budget) return false;
    i = end;
  }
  EncodeFixed<uint64_t>(out->data(), count);
  return true;
}

}  // namespace

void BlockBuilder::Finish(BlockHeader* h, std::vector<std::string_view>* pieces) {
  const uint32_t n = count();
  assert(n > 0);
  h->count = n;
  h->dtype = schema_.dtype;
  h->codec = schema_.codec;
  h->variable_shape = schema_.variable_shape;
  h->dims = schema_.variable_shape ? std::vector<int64_t>{} : schema_.dims;
  h->name = schema_.name;
  h->flags = ascending_ ? kBlockKeysAscending : 0;
  h->min_step = min_step_;
  h->max_step = max_step_;
  if (int_keys_) {
    h->min_key = Key{RunId(min_run_), min_run_step_};
    h->max_key = Key{RunId(max_run_), max_run_step_};
  } else {
    h->min_key = min_key_;
    h->max_key = max_key_;
  }
  h->run_encoding = !any_string_run_ ? RunEncoding::kInt
                    : !any_int_run_  ? RunEncoding::kString
                                     : RunEncoding::kMixed;
  // A sweep's runs (0, 1, 2, ...), the steps of one run, and runs that each
  // log steps 0, 1, 2, ... are a few sequences: 24 bytes each instead of 8
  // bytes per record. The encodings' memory counts like the columns'.
  const size_t before = run_sequences_.capacity() + step_sequences_.capacity();
  if (h->run_encoding == RunEncoding::kInt &&
      EncodeSequences(runs_int_.data(), n, &run_sequences_)) {
    h->flags |= kBlockRunSequences;
  }
  // Records of a fixed shape with a zero dimension hold no bytes; their steps
  // are stored plainly so that every record still takes at least one byte of
  // the payload, which lets readers bound a block's count by its size
  // (docs/format.md "Block frame").
  const bool empty_records =
      !schema_.variable_shape && !IsVarLength(schema_.dtype) &&
      std::any_of(schema_.dims.begin(), schema_.dims.end(), [](int64_t d) { return d == 0; });
  if (!empty_records && EncodeSequences(steps_.data(), n, &step_sequences_)) {
    h->flags |= kBlockStepSequences;
  }
  memory_ += run_sequences_.capacity() + step_sequences_.capacity() - before;

  pieces->clear();
  uint64_t pos = 0;
  switch (h->run_encoding) {
    case RunEncoding::kInt:
      if (h->flags & kBlockRunSequences) {
        AddPiece(pieces, &pos, run_sequences_.data(), run_sequences_.size());
      } else {
        AddPiece(pieces, &pos, runs_int_.data(), 8ull * n);
      }
      break;
    case RunEncoding::kMixed:
      AddPiece(pieces, &pos, run_is_string_.data(), n);
      Pad(pieces, &pos, 8);
      AddPiece(pieces, &pos, runs_int_.data(), 8ull * n);
      [[fallthrough]];
    case RunEncoding::kString:
      AddPiece(pieces, &pos, run_str_offsets_.data(), 4ull * (n + 1));
      AddPiece(pieces, &pos, run_str_bytes_.data(), run_str_bytes_.size());
      break;
  }
  Pad(pieces, &pos, kFrameAlign);
  if (h->flags & kBlockStepSequences) {
    AddPiece(pieces, &pos, step_sequences_.data(), step_sequences_.size());
  } else {
    AddPiece(pieces, &pos, steps_.data(), 8ull * n);
  }
  Pad(pieces, &pos, kFrameAlign);

  const char* data = borrowed_ ? borrowed_ : values_.data();
  const size_t data_len = borrowed_ ? borrowed_len_ : values_.size();
  if (IsVarLength(schema_.dtype) || schema_.variable_shape) {
    if (schema_.variable_shape && !IsVarLength(schema_.dtype)) {
      AddPiece(pieces, &pos, ranks_.data(), n);
      Pad(pieces, &pos, 8);
      AddPiece(pieces, &pos, shape_dims_.data(), shape_dims_.size());
    }
    value_offsets_.push<uint64_t>(data_len);  // the end offset; Reset clears it
    AddPiece(pieces, &pos, value_offsets_.data(), 8ull * (n + 1));
    if (schema_.variable_shape && !IsVarLength(schema_.dtype)) Pad(pieces, &pos, kFrameAlign);
  }
  AddPiece(pieces, &pos, data, data_len);
  h->raw_len = pos;
}

uint64_t ValueChunks::expected(uint64_t i) const { return DecodeFixed<uint64_t>(table + 8 * i); }

int64_t BlockView::LoadI64(const char* p, uint32_t i) { return DecodeFixed<int64_t>(p + 8ull * i); }

int64_t BlockView::Nth(const char* seq, uint64_t count, uint32_t i) {
  auto end = [&](uint64_t k) { return DecodeFixed<uint64_t>(seq + kSequenceBytes * k); };
  uint64_t lo = 0, hi = count - 1;  // the first sequence whose end is past i
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (end(mid) > i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const uint64_t start = lo == 0 ? 0 : end(lo - 1);
  const char* s = seq + kSequenceBytes * lo;
  return static_cast<int64_t>(DecodeFixed<uint64_t>(s + 8) +
                              (i - start) * DecodeFixed<uint64_t>(s + 16));
}

int64_t BlockView::FindLast(const RunRef& run, int64_t step) const {
  auto holds_run = [&](uint64_t r) {
    const auto i = static_cast<uint32_t>(r);
    if (run_is_string(i) != run.is_string) return false;
    return run.is_string ? run_string(i) == run.s : run_int(i) == run.i;
  };
  if (!step_sequences_) {
    for (uint32_t r = count_; r-- > 0;) {
      if (LoadI64(steps_, r) == step && holds_run(r)) return r;
    }
    return -1;
  }
  const uint64_t target = static_cast<uint64_t>(step);
  for (uint64_t k = step_sequence_count_; k-- > 0;) {
    const char* s = step_sequences_ + kSequenceBytes * k;
    const uint64_t end = DecodeFixed<uint64_t>(s);
    const uint64_t start = k == 0 ? 0 : DecodeFixed<uint64_t>(s - kSequenceBytes);
    const uint64_t first = DecodeFixed<uint64_t>(s + 8);
    const uint64_t diff = DecodeFixed<uint64_t>(s + 16);
    const uint64_t len = end - start;  // Parse checked that ends ascend
    if (diff == 0) {
      if (first != target) continue;
      for (uint64_t r = end; r-- > start;) {
        if (holds_run(r)) return static_cast<int64_t>(r);
      }
      continue;
    }
    // Row start + j holds first + j * diff (mod 2^64). Where the sequence's
    // values do not wrap around as int64, they are strictly monotone and at
    // most one j holds `step`: solve for it. Otherwise (a hostile or odd
    // block) try each j, from the last.
    const __int128 d = static_cast<int64_t>(diff);
    const __int128 f = static_cast<int64_t>(first);
    const __int128 last = f + d * static_cast<__int128>(len - 1);
    if (last >= INT64_MIN && last <= INT64_MAX) {
      const __int128 num = static_cast<__int128>(step) - f;
      if (num % d != 0) continue;
      const __int128 j = num / d;
      if (j >= 0 && j < static_cast<__int128>(len) && holds_run(start + static_cast<uint64_t>(j))) {
        return static_cast<int64_t>(start + static_cast<uint64_t>(j));
      }
      continue;
    }
    for (uint64_t j = len; j-- > 0;) {
      if (first + j * diff == target && holds_run(start + j)) {
        return static_cast<int64_t>(start + j);
      }
    }
  }
  return -1;
}

void BlockView::Expand(const char* seq, uint64_t count, int64_t* out) {
  uint64_t start = 0;
  for (uint64_t k = 0; k < count; ++k) {
    const char* s = seq + kSequenceBytes * k;
    const uint64_t end = DecodeFixed<uint64_t>(s);
    uint64_t v = DecodeFixed<uint64_t>(s + 8);
    const uint64_t diff = DecodeFixed<uint64_t>(s + 16);
    for (uint64_t i = start; i < end; ++i, v += diff) out[i] = static_cast<int64_t>(v);
    start = end;
  }
}

void BlockView::CopyIntRuns(int64_t* out) const {
  if (run_sequences_) return Expand(run_sequences_, run_sequence_count_, out);
  std::memcpy(out, runs_int_, 8ull * count_);
}

void BlockView::CopySteps(int64_t* out) const {
  if (step_sequences_) return Expand(step_sequences_, step_sequence_count_, out);
  std::memcpy(out, steps_, 8ull * count_);
}

std::string_view BlockView::run_string(uint32_t i) const {
  uint32_t a = DecodeFixed<uint32_t>(run_str_offsets_ + 4ull * i);
  uint32_t b = DecodeFixed<uint32_t>(run_str_offsets_ + 4ull * (i + 1));
  return {run_str_bytes_ + a, b - a};
}

std::string_view BlockView::value_bytes(uint32_t i) const {
  if (value_offsets_ == nullptr) return {values_ + record_bytes_ * i, record_bytes_};
  uint64_t a = DecodeFixed<uint64_t>(value_offsets_ + 8ull * i);
  if (IsVarLength(dtype_)) {
    uint64_t b = DecodeFixed<uint64_t>(value_offsets_ + 8ull * (i + 1));
    return {values_ + a, b - a};
  }
  uint64_t len = DTypeSize(dtype_);
  for (uint8_t r = 0; r < ranks_[i]; ++r) {
    len *= static_cast<uint64_t>(DecodeFixed<int64_t>(shape_dims_ + 8 * (dim_starts_[i] + r)));
  }
  return {values_ + a, len};
}

std::vector<int64_t> BlockView::value_shape(uint32_t i) const {
  if (!variable_shape_ || IsVarLength(dtype_))
    return IsVarLength(dtype_) ? std::vector<int64_t>{} : dims_;
  std::vector<int64_t> shape(ranks_[i]);
  for (uint8_t r = 0; r < ranks_[i]; ++r) {
    shape[r] = DecodeFixed<int64_t>(shape_dims_ + 8 * (dim_starts_[i] + r));
  }
  return shape;
}

namespace {

// The values of an integer column stored plainly or as sequences, one after
// another in O(1) each.
class ColumnCursor {
 public:
  ColumnCursor(const char* plain, const char* sequences) : plain_(plain), seq_(sequences) {}
  int64_t Next() {
    if (plain_ != nullptr) return DecodeFixed<int64_t>(plain_ + 8 * i_++);
    if (i_ == end_) {
      const char* s = seq_ + kSequenceBytes * k_++;
      end_ = DecodeFixed<uint64_t>(s);
      value_ = DecodeFixed<uint64_t>(s + 8);
      diff_ = DecodeFixed<uint64_t>(s + 16);
    } else {
      value_ += diff_;
    }
    ++i_;
    return static_cast<int64_t>(value_);
  }

 private:
  const char* plain_;
  const char* seq_;
  uint64_t i_ = 0, k_ = 0, end_ = 0;
  uint64_t value_ = 0, diff_ = 0;
};

}  // namespace

Status BlockView::CheckRecords(const BlockHeader& h) const {
  auto bad = [](const std::string& what) {
    return Status::Corruption("block payload: " + what + " (the header says otherwise)");
  };
  const bool ascending = (h.flags & kBlockKeysAscending) != 0;
  if (run_encoding_ == RunEncoding::kInt && h.min_key.run.is_int()) {
    // Integer runs: keys compared as integer pairs (the common case).
    const int64_t lo_run = h.min_key.run.int_value(), lo_step = h.min_key.step;
    const bool hi_is_int = h.max_key.run.is_int();
    const int64_t hi_run = hi_is_int ? h.max_key.run.int_value() : 0, hi_step = h.max_key.step;
    int64_t prev_run = 0, prev_step = 0;
    // One record: in the step range, in the key range, after the one before.
    auto check = [&](uint32_t i, int64_t r, int64_t st) -> Status {
      if (st < h.min_step || st > h.max_step) {
        return bad("record " + std::to_string(i) + " has step " + std::to_string(st) +
                   " outside [" + std::to_string(h.min_step) + ", " + std::to_string(h.max_step) +
                   "]");
      }
      if (r < lo_run || (r == lo_run && st < lo_step) ||
          (hi_is_int && (r > hi_run || (r == hi_run && st > hi_step)))) {
        return bad("record " + std::to_string(i) + " has a key outside the block's key range");
      }
      if (ascending && i > 0 && (r < prev_run || (r == prev_run && st <= prev_step))) {
        return bad("record " + std::to_string(i) + " breaks the ascending order of keys");
      }
      prev_run = r;
      prev_step = st;
      return Status::OK();
    };
    if (run_sequences_ && step_sequences_) {
      // Both columns as sequences (a sweep, runs of many steps): over a
      // stretch where both are arithmetic, keys are monotonic, so its two
      // ends stand for all of it. O(sequences), not O(records).
      uint64_t kr = 0, ks = 0, er = 0, es = 0;  // sequence indices, their ends
      uint64_t r0 = 0, dr = 0, s0 = 0, ds = 0;  // values at record i, differences
      for (uint64_t i = 0; i < count_;) {
        if (i == er) {
          const char* q = run_sequences_ + kSequenceBytes * kr++;
          er = DecodeFixed<uint64_t>(q);
          r0 = DecodeFixed<uint64_t>(q + 8);
          dr = DecodeFixed<uint64_t>(q + 16);
        }
        if (i == es) {
          const char* q = step_sequences_ + kSequenceBytes * ks++;
          es = DecodeFixed<uint64_t>(q);
          s0 = DecodeFixed<uint64_t>(q + 8);
          ds = DecodeFixed<uint64_t>(q + 16);
        }
        const uint64_t m = std::min(er, es) - i;  // the stretch's records
        const __int128 r_last = __int128(int64_t(r0)) + __int128(m - 1) * int64_t(dr);
        const __int128 s_last = __int128(int64_t(s0)) + __int128(m - 1) * int64_t(ds);
        const bool wraps =
            r_last < INT64_MIN || r_last > INT64_MAX || s_last < INT64_MIN || s_last > INT64_MAX;
        if (wraps || m <= 2) {
          // Values that wrap in 64 bits are not monotonic: one by one.
          for (uint64_t k = 0; k < m; ++k) {
            RUNSTORE_RETURN_IF_ERROR(
                check(static_cast<uint32_t>(i + k), int64_t(r0 + k * dr), int64_t(s0 + k * ds)));
          }
        } else {
          if (ascending && !(int64_t(dr) > 0 || (dr == 0 && int64_t(ds) > 0))) {
            return bad("record " + std::to_string(i + 1) + " breaks the ascending order of keys");
          }
          // The stretch's keys lie between its ends; the ends are checked, the
          // first against the record before it.
          RUNSTORE_RETURN_IF_ERROR(check(static_cast<uint32_t>(i), int64_t(r0), int64_t(s0)));
          RUNSTORE_RETURN_IF_ERROR(
              check(static_cast<uint32_t>(i + m - 1), int64_t(r_last), int64_t(s_last)));
        }
        i += m;
        r0 += m * dr;
        s0 += m * ds;
      }
    } else if (!run_sequences_ && !step_sequences_) {
      for (uint32_t i = 0; i < count_; ++i) {
        RUNSTORE_RETURN_IF_ERROR(check(i, DecodeFixed<int64_t>(runs_int_ + 8ull * i),
                                       DecodeFixed<int64_t>(steps_ + 8ull * i)));
      }
    } else {
      ColumnCursor runs(run_sequences_ ? nullptr : runs_int_, run_sequences_);
      ColumnCursor steps(step_sequences_ ? nullptr : steps_, step_sequences_);
      for (uint32_t i = 0; i < count_; ++i) {
        RUNSTORE_RETURN_IF_ERROR(check(i, runs.Next(), steps.Next()));
      }
    }
    return CheckValueText();
  }
  const KeyRef lo = ToKeyRef(h.min_key), hi = ToKeyRef(h.max_key);
  KeyRef prev{};
  for (uint32_t i = 0; i < count_; ++i) {
    const bool is_string = run_is_string(i);
    const std::string_view s = is_string ? run_string(i) : std::string_view();
    if (is_string && !IsValidUtf8(s)) {
      return Status::Corruption("block payload: run id of record " + std::to_string(i) +
                                " is not valid UTF-8");
    }
    const KeyRef k{is_string, is_string ? 0 : run_int(i), s, step(i)};
    if (k.step < h.min_step || k.step > h.max_step) {
      return bad("record " + std::to_string(i) + " has step " + std::to_string(k.step) +
                 " outside the block's step range");
    }
    if (CompareKeys(k, lo) < 0 || CompareKeys(k, hi) > 0) {
      return bad("record " + std::to_string(i) + " has a key outside the block's key range");
    }
    if (ascending && i > 0 && CompareKeys(prev, k) >= 0) {
      return bad("record " + std::to_string(i) + " breaks the ascending order of keys");
    }
    prev = k;
  }
  return CheckValueText();
}

Status BlockView::CheckValueText() const {
  if (dtype_ != DType::kString) return Status::OK();
  for (uint32_t i = 0; i < count_; ++i) {
    if (!IsValidUtf8(value_bytes(i))) {
      return Status::Corruption("block payload: string value of record " + std::to_string(i) +
                                " is not valid UTF-8");
    }
  }
  return Status::OK();
}

// A cursor over a raw payload that hands out pieces of it, each checked to
// lie inside: the one way Parse's steps read it.
class PayloadCursor {
 public:
  explicit PayloadCursor(std::string_view payload) : p_(payload.data()), size_(payload.size()) {}
  // `count` elements of `elem` bytes at the position, then past them.
  bool Take(uint64_t count, uint64_t elem, const char** out) {
    uint64_t len;
    if (!MulWithin(count, elem, size_, &len) || !RangeWithin(pos_, len, size_)) return false;
    *out = p_ + pos_;
    pos_ += len;
    return true;
  }
  template <typename T>
  bool TakeBytes(uint64_t count, const T** out) {
    const char* at;
    if (!Take(count, 1, &at)) return false;
    *out = reinterpret_cast<const T*>(at);
    return true;
  }
  bool Align(uint64_t a) {
    pos_ = AlignUp(pos_, a);
    return pos_ <= size_;
  }
  // A column of `n` values stored as sequences (docs/format.md "Block
  // payload"): a count, then sequences whose ends ascend strictly to n.
  bool TakeSequences(uint64_t n, const char** seq, uint64_t* count) {
    const char* at;
    if (!Take(1, 8, &at)) return false;
    *count = DecodeFixed<uint64_t>(at);
    if (*count == 0 || *count > n || !Take(*count, kSequenceBytes, seq)) return false;
    uint64_t prev = 0;
    for (uint64_t k = 0; k < *count; ++k) {
      const uint64_t end = DecodeFixed<uint64_t>(*seq + kSequenceBytes * k);
      if (end <= prev) return false;
      prev = end;
    }
    return prev == n;
  }
  const char* base() const { return p_; }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }

 private:
  const char* const p_;
  const uint64_t size_;
  uint64_t pos_ = 0;
};

namespace {
Status BadPayload(const char* what) {
  return Status::Corruption(std::string("block payload: ") + what);
}
}  // namespace

// docs/format.md "Block payload", in its order: the run column, the step
// column, the value column, then (docs/format.md "Value chunks") the chunk
// table; nothing may follow.
Status BlockView::Parse(const BlockHeader& h, std::string_view payload) {
  count_ = h.count;
  run_encoding_ = h.run_encoding;
  dtype_ = h.dtype;
  variable_shape_ = h.variable_shape;
  dims_ = h.dims;
  value_offsets_ = nullptr;
  run_sequences_ = step_sequences_ = nullptr;
  run_sequence_count_ = step_sequence_count_ = 0;
  chunks_ = ValueChunks();
  if (payload.size() != h.raw_len) return BadPayload("size differs from the header's raw size");
  PayloadCursor cur(payload);
  RUNSTORE_RETURN_IF_ERROR(ParseRunColumn(h, &cur));
  RUNSTORE_RETURN_IF_ERROR(ParseStepColumn(h, &cur));
  RUNSTORE_RETURN_IF_ERROR(IsVarLength(h.dtype) || h.variable_shape ? ParseOffsetValues(h, &cur)
                                                                    : ParseFixedValues(h, &cur));
  if (h.flags & kBlockValueChunks) RUNSTORE_RETURN_IF_ERROR(ParseChunkTable(h, &cur));
  if (cur.pos() != cur.size()) return BadPayload("trailing bytes after the value column");
  return Status::OK();
}

// 1. The run column: integers (plain or as sequences), strings (offsets and
// bytes), or both (a kind per record, integers, then the strings).
Status BlockView::ParseRunColumn(const BlockHeader& h, PayloadCursor* cur) {
  const uint64_t n = h.count;
  switch (h.run_encoding) {
    case RunEncoding::kInt:
      if ((h.flags & kBlockRunSequences)
              ? !cur->TakeSequences(n, &run_sequences_, &run_sequence_count_)
              : !cur->Take(n, 8, &runs_int_)) {
        return BadPayload("run column out of bounds");
      }
      return Status::OK();
    case RunEncoding::kMixed:
      if (!cur->TakeBytes(n, &run_is_string_) || !cur->Align(8) || !cur->Take(n, 8, &runs_int_)) {
        return BadPayload("run column out of bounds");
      }
      for (uint64_t i = 0; i < n; ++i) {
        if (run_is_string_[i] > 1) return BadPayload("invalid run kind");
      }
      [[fallthrough]];
    case RunEncoding::kString: {
      if (!cur->Take(n + 1, 4, &run_str_offsets_)) return BadPayload("run offsets out of bounds");
      uint32_t prev = 0;
      for (uint64_t i = 0; i <= n; ++i) {
        const uint32_t o = DecodeFixed<uint32_t>(run_str_offsets_ + 4 * i);
        if ((i == 0 && o != 0) || o < prev || o - prev > kMaxRunIdLength) {
          return BadPayload("run string offsets are not ascending");
        }
        prev = o;
      }
      if (!cur->Take(prev, 1, &run_str_bytes_)) return BadPayload("run strings out of bounds");
      return Status::OK();
    }
  }
  return BadPayload("invalid run encoding");
}

// 2. The step column, at a multiple of 64, plain or as sequences.
Status BlockView::ParseStepColumn(const BlockHeader& h, PayloadCursor* cur) {
  if (!cur->Align(kFrameAlign) ||
      ((h.flags & kBlockStepSequences)
           ? !cur->TakeSequences(h.count, &step_sequences_, &step_sequence_count_)
           : !cur->Take(h.count, 8, &steps_)) ||
      !cur->Align(kFrameAlign)) {
    return BadPayload("step column out of bounds");
  }
  return Status::OK();
}

// 3a. The value column of a fixed-shape numeric series: count records of one
// size, back to back.
Status BlockView::ParseFixedValues(const BlockHeader& h, PayloadCursor* cur) {
  uint64_t rb = 0;
  if (!ShapeBytes(h.dims, DTypeSize(h.dtype), &rb)) return BadPayload("record shape out of bounds");
  record_bytes_ = rb;
  if (!cur->Take(h.count, rb, &values_)) return BadPayload("value column out of bounds");
  return Status::OK();
}

// 3b. The value column of strings and bytes (offsets, then the bytes) and of
// variable shapes (ranks, dims, offsets at multiples of 8, then the data at
// a multiple of 64): every offset ascending and inside, every record's shape
// matching its bytes.
Status BlockView::ParseOffsetValues(const BlockHeader& h, PayloadCursor* cur) {
  const uint64_t n = h.count;
  const bool shapes = !IsVarLength(h.dtype);
  dim_starts_.clear();
  if (shapes) {
    if (!cur->TakeBytes(n, &ranks_) || !cur->Align(8)) {
      return BadPayload("rank column out of bounds");
    }
    uint64_t total = 0;
    dim_starts_.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (ranks_[i] > kMaxRank) return BadPayload("rank exceeds 32");
      dim_starts_[i] = total;
      total += ranks_[i];
    }
    if (!cur->Take(total, 8, &shape_dims_)) return BadPayload("shape column out of bounds");
  }
  if (!cur->Take(n + 1, 8, &value_offsets_)) return BadPayload("value offsets out of bounds");
  if (shapes && !cur->Align(kFrameAlign)) return BadPayload("value column out of bounds");
  const uint64_t end = DecodeFixed<uint64_t>(value_offsets_ + 8 * n);
  if (!cur->Take(end, 1, &values_)) return BadPayload("value column out of bounds");
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t a = DecodeFixed<uint64_t>(value_offsets_ + 8 * i);
    const uint64_t b = DecodeFixed<uint64_t>(value_offsets_ + 8 * (i + 1));
    if ((i == 0 && a != 0) || a < prev || b < a || b > end) {
      return BadPayload("value offsets are not ascending");
    }
    prev = a;
    if (!shapes) continue;
    if (a % 8 != 0) return BadPayload("value offset is not a multiple of 8");
    int64_t dims[kMaxRank];
    for (uint8_t r = 0; r < ranks_[i]; ++r) {
      dims[r] = DecodeFixed<int64_t>(shape_dims_ + 8 * (dim_starts_[i] + r));
    }
    uint64_t bytes = 0;
    if (!ShapeBytes(std::span<const int64_t>(dims, ranks_[i]), DTypeSize(h.dtype), &bytes)) {
      return BadPayload("record shape out of bounds");
    }
    if (bytes > b - a) return BadPayload("record shape does not match its bytes");
  }
  return Status::OK();
}

// 4. The chunk table of a value checksummed in chunks, at a multiple of 64.
Status BlockView::ParseChunkTable(const BlockHeader& h, PayloadCursor* cur) {
  chunks_.data_offset = static_cast<uint64_t>(values_ - cur->base());
  chunks_.data_len = cur->pos() - chunks_.data_offset;
  chunks_.shift = h.chunk_shift;
  chunks_.count = (chunks_.data_len + (uint64_t{1} << h.chunk_shift) - 1) >> h.chunk_shift;
  if (!cur->Align(kFrameAlign) || !cur->Take(chunks_.count, 8, &chunks_.table)) {
    return BadPayload("value chunk checksums out of bounds");
  }
  return Status::OK();
}

}  // namespace runstore::format
