// JoinedArrowStream (include/runstore/arrow.h, docs/query.md): several
// series of a snapshot joined on (run, step) and handed out as Arrow record
// batches, a window of rows at a time.
//
// A window is the next rows of the base series' scan, as many as
// ArrowJoin::window_bytes holds. Its keys are indexed by a hash table, and
// each other series is scanned once for it, with the window's range of steps
// and, where they are few or the window is a small part of the series, its
// runs as the scan's filters: only the blocks that may hold one of its keys
// are read, and each of their records is placed at its row (rows of one
// writer's log_many come in one order, so the rows after the last one placed
// are tried first). The batches handed out are slices of the window, which
// they keep alive (an ordered join's gather their rows); the stream goes on
// to the next window when the consumer pulls past it.
#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "format/block.h"
#include "runstore/arrow.h"
#include "store/read/arrow_arrays.h"
#include "store/read/snapshot.h"

namespace runstore {
namespace {

using read::SnapshotImpl;
using read::arrow::ArrayData;
using read::arrow::Elements;
using read::arrow::MakeArray;
using read::arrow::MakeSchema;
using read::arrow::NewSchema;
using read::arrow::Primitive;
using read::arrow::StreamSource;
using read::arrow::Strings;
using read::arrow::Validity;
using read::arrow::ValueFields;
using read::arrow::VariableShapeLists;
using read::arrow::WithChild;

using Fill = std::variant<std::monostate, int64_t, double, std::string>;

// What a column is, once its series' type is known.
struct ColumnSpec {
  ArrowJoinColumn column;
  SeriesInfo info;       // of the series, or missing_dtype's scalar
  bool missing = false;  // the snapshot has no record of the series
  bool fixed = false;    // fixed-width records (not strings, bytes, variable shapes)
  size_t record_bytes = 0;
};

// One column's values over the rows of a window.
struct Placed {
  std::vector<uint8_t> present;
  // Fixed-width records: record_bytes each, in row order.
  std::vector<char> fixed;
  // Strings, bytes and variable shapes: row i's bytes are
  // arena[begin[i], begin[i] + size[i]), its dimensions dims[dim_begin[i], + rank[i]).
  std::vector<uint64_t> begin, size, dim_begin;
  std::vector<uint32_t> rank;
  std::string arena;
  std::vector<int64_t> dims;

  // Made `rows` long, every row without a record.
  void Reset(const ColumnSpec& c, size_t rows) {
    *this = Placed();
    Resize(c, rows);
  }

  // Room for `rows` rows.
  void Reserve(const ColumnSpec& c, size_t rows) {
    present.reserve(rows);
    if (c.fixed) fixed.reserve(rows * c.record_bytes);
  }

  // Made `rows` long, the rows added without a record.
  void Resize(const ColumnSpec& c, size_t rows) {
    present.resize(rows);
    if (c.fixed) {
      fixed.resize(rows * c.record_bytes);
    } else {
      begin.resize(rows);
      size.resize(rows);
      if (c.info.variable_shape) {
        dim_begin.resize(rows);
        rank.resize(rows);
      }
    }
  }

  void Put(const ColumnSpec& c, size_t row, const char* record) {
    present[row] = 1;
    std::memcpy(fixed.data() + row * c.record_bytes, record, c.record_bytes);
  }

  void Put(const ColumnSpec& c, size_t row, const Value& v) {
    if (c.column.empty_is_null && v.nbytes() == 0) return;
    present[row] = 1;
    begin[row] = arena.size();
    size[row] = v.nbytes();
    arena.append(v.data(), v.nbytes());
    if (c.info.variable_shape) {
      dim_begin[row] = dims.size();
      rank[row] = static_cast<uint32_t>(v.rank());
      dims.insert(dims.end(), v.shape().begin(), v.shape().end());
    }
  }

  std::string_view Bytes(size_t row) const { return {arena.data() + begin[row], size[row]}; }

  // Rows without a record take the column's fill, where it has one.
  void ApplyFill(const ColumnSpec& c) {
    const Fill& f = c.column.fill;
    if (std::holds_alternative<std::monostate>(f)) return;
    for (size_t row = 0; row < present.size(); ++row) {
      if (present[row]) continue;
      present[row] = 1;
      if (const auto* s = std::get_if<std::string>(&f)) {
        begin[row] = arena.size();
        size[row] = s->size();
        arena.append(*s);
      } else {
        char* at = fixed.data() + row * c.record_bytes;
        StoreNumber(c.info.dtype, f, at);
      }
    }
  }

  static void StoreNumber(DType d, const Fill& f, char* at) {
    const double x =
        std::holds_alternative<double>(f) ? std::get<double>(f) : double(std::get<int64_t>(f));
    const int64_t i = std::holds_alternative<int64_t>(f) ? std::get<int64_t>(f) : int64_t(x);
    auto put = [&](auto v) { std::memcpy(at, &v, sizeof(v)); };
    switch (d) {
      case DType::kBool:
        return put(static_cast<uint8_t>(i != 0));
      case DType::kInt8:
        return put(static_cast<int8_t>(i));
      case DType::kInt16:
        return put(static_cast<int16_t>(i));
      case DType::kInt32:
        return put(static_cast<int32_t>(i));
      case DType::kInt64:
        return put(i);
      case DType::kUInt8:
        return put(static_cast<uint8_t>(i));
      case DType::kUInt16:
        return put(static_cast<uint16_t>(i));
      case DType::kUInt32:
        return put(static_cast<uint32_t>(i));
      case DType::kUInt64:
        return put(static_cast<uint64_t>(i));
      case DType::kFloat32:
        return put(static_cast<float>(x));
      case DType::kFloat64:
        return put(x);
      case DType::kString:
      case DType::kBytes:
        return;
    }
  }
};

// A window of rows: the base's keys, their index, and the columns placed on them.
struct Window {
  std::vector<int64_t> int_runs;  // 0 for a string run
  std::vector<uint8_t> run_is_string;
  std::vector<uint64_t> run_end;  // string run i is run_bytes[run_end[i-1], run_end[i])
  std::string run_bytes;
  std::vector<int64_t> steps;
  std::vector<Placed> columns;
  // Of an ordered join: each row's value of the base while the window is
  // made, then the rows in the order of those values (ties in scan order),
  // which its batches hand out. Rows are placed in scan order, where a
  // compacted store's series follow one another, and gathered at the end.
  std::vector<int64_t> sort_values;
  std::vector<uint32_t> order;
  // Open addressing over the rows: slot = row + 1, 0 empty. Built at the
  // first key Find does not find where it guessed: the series of a compacted
  // store hold their runs in one order (docs/design.md#compaction), and a
  // join of them is then a walk that hashes no key.
  mutable std::vector<uint32_t> slots;
  mutable size_t pieces_ = 0;
  mutable std::optional<RunSet> runs_;

  size_t rows() const { return steps.size(); }

  void Reserve(size_t n) {
    int_runs.reserve(n);
    run_is_string.reserve(n);
    run_end.reserve(n);
    steps.reserve(n);
  }

  RunRef Run(size_t i) const {
    if (!run_is_string[i]) return RunRef(int_runs[i]);
    const uint64_t lo = i == 0 ? 0 : run_end[i - 1];
    return RunRef(std::string_view(run_bytes.data() + lo, run_end[i] - lo));
  }

  void Add(const RunRef& run, int64_t step) {
    int_runs.push_back(run.is_string ? 0 : run.i);
    run_is_string.push_back(run.is_string ? 1 : 0);
    if (run.is_string) run_bytes.append(run.s);
    run_end.push_back(run_bytes.size());
    steps.push_back(step);
  }

  // The window's runs, as pieces of rows of one run each (a series logged run
  // by run holds its rows together), and as a set: made once a window, for
  // the scans of every column (a set of 70,000 hashed ids costs tens of
  // milliseconds to make).
  size_t RunPieces() const {
    if (pieces_ == 0) {
      for (size_t r = 0; r < rows(); ++r) pieces_ += NewRun(r);
    }
    return pieces_;
  }
  const RunSet& Runs() const {
    if (!runs_) {
      std::vector<RunId> runs;
      runs.reserve(RunPieces());
      for (size_t r = 0; r < rows(); ++r) {
        if (NewRun(r)) runs.push_back(Run(r).ToRunId());
      }
      runs_.emplace(std::move(runs));
    }
    return *runs_;
  }
  bool NewRun(size_t r) const { return r == 0 || !Same(r - 1, Run(r), steps[r - 1]); }

  // Keeps rows `kept` (ascending) of the keys and of the columns placed so far.
  void Keep(const std::vector<uint32_t>& kept) {
    Window w;
    w.Reserve(kept.size());
    for (uint32_t r : kept) {
      w.Add(Run(r), steps[r]);
      if (!sort_values.empty()) w.sort_values.push_back(sort_values[r]);
    }
    w.columns = std::move(columns);
    *this = std::move(w);
  }

  static uint64_t Hash(const RunRef& run, int64_t step) {
    return format::RunHash(run) ^ (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ull);
  }

  bool Same(size_t row, const RunRef& run, int64_t step) const {
    if (steps[row] != step || (run_is_string[row] != 0) != run.is_string) return false;
    return run.is_string ? Run(row).s == run.s : int_runs[row] == run.i;
  }

  void Index() const {
    size_t n = 16;
    while (n < 2 * rows()) n *= 2;
    slots.assign(n, 0);
    for (size_t i = 0; i < rows(); ++i) {
      size_t at = Hash(Run(i), steps[i]) & (n - 1);
      while (slots[at] != 0) at = (at + 1) & (n - 1);
      slots[at] = static_cast<uint32_t>(i + 1);
    }
  }

  // How a column's records were found: at a guess (the rows after the last
  // one placed) or through the index.
  struct Found {
    uint64_t guessed = 0, hashed = 0;
    // Rows to try after the last one placed before the index: a few while
    // most records are found that way (a series that lacks a few of the
    // base's keys), only the next row once the index finds more than 1 in 8.
    size_t Probe() const { return hashed * 8 > guessed + 64 ? 1 : 4; }
  };

  // The row of key (run, step), trying the rows from `guess` on first; -1 if none.
  int64_t Find(const RunRef& run, int64_t step, size_t guess, Found* found) const {
    const size_t end = std::min(rows(), guess + found->Probe());
    for (size_t r = guess; r < end; ++r) {
      if (Same(r, run, step)) {
        ++found->guessed;
        return static_cast<int64_t>(r);
      }
    }
    ++found->hashed;
    if (slots.empty()) Index();
    const size_t mask = slots.size() - 1;
    for (size_t at = Hash(run, step) & mask; slots[at] != 0; at = (at + 1) & mask) {
      if (Same(slots[at] - 1, run, step)) return slots[at] - 1;
    }
    return -1;
  }
};

class JoinStream final : public StreamSource {
 public:
  JoinStream(std::shared_ptr<const Snapshot> snap, ArrowJoin join, bool string_runs,
             DType base_dtype, std::vector<ColumnSpec> columns, std::optional<ColumnSpec> where)
      : base_dtype_(base_dtype),
        snap_(std::move(snap)),
        join_(std::move(join)),
        string_runs_(string_runs),
        columns_(std::move(columns)),
        where_(std::move(where)),
        where_values_(join_.where_values.begin(), join_.where_values.end()) {
    // A row's keys (run, step, where a string run ends, whether it is one, its
    // bytes), then each column's presence and value.
    size_t row_bytes = 8 + 8 + 8 + 1 + (string_runs_ ? 24 : 0);
    for (const ColumnSpec& c : columns_) row_bytes += 1 + (c.fixed ? c.record_bytes : 48);
    if (where_) row_bytes += 1 + 24;
    window_rows_ = std::clamp<uint64_t>(join_.window_bytes / row_bytes, 1024,
                                        1ull << 30);  // rows fit in uint32
    for (size_t i = 0; i < columns_.size(); ++i) {
      // The base's own values are placed as its rows are read, unless the
      // where filter drops rows first.
      if (columns_[i].column.series == join_.base && !where_ && !join_.order_by_base_value) {
        from_base_.push_back(i);
      }
    }
    base_left_ = static_cast<const SnapshotImpl&>(*snap_).StoredRecords(join_.base);
  }

  int GetSchema(ArrowSchema* out) override {
    std::vector<ArrowSchema*> fields;
    if (!join_.run_field.empty())
      fields.push_back(NewSchema(string_runs_ ? "U" : "l", join_.run_field));
    if (!join_.step_field.empty()) fields.push_back(NewSchema("l", join_.step_field));
    for (const ColumnSpec& c : columns_) {
      for (ArrowSchema* f :
           ValueFields(c.info, c.column.name, c.column.name + ".shape", ARROW_FLAG_NULLABLE)) {
        fields.push_back(f);
      }
    }
    MakeSchema(out, "+s", "", std::move(fields));
    return 0;
  }

  int GetNext(ArrowArray* out) override {
    while (window_ == nullptr || pos_ >= window_->rows()) {
      if (base_done_) {
        *out = ArrowArray{};  // the end
        return 0;
      }
      window_ = nullptr;
      Status s = NextWindow();
      if (!s.ok()) return Fail(s);
    }
    const int64_t n =
        std::min<int64_t>(join_.stream.batch_rows, static_cast<int64_t>(window_->rows() - pos_));
    Batch(static_cast<int64_t>(pos_), n, out);
    pos_ += static_cast<size_t>(n);
    return 0;
  }

 private:
  // The next window: the base's next rows, the where filter, then each column.
  Status NextWindow() {
    auto w = std::make_shared<Window>();
    w->columns.resize(columns_.size());
    for (size_t i = 0; i < columns_.size(); ++i) w->columns[i].Reset(columns_[i], 0);
    // Room for the rows the window will hold, at once: grown a row at a time,
    // its vectors would take up to twice that.
    const size_t rows = std::min(window_rows_, base_left_);
    w->Reserve(rows);
    for (size_t i : from_base_) w->columns[i].Reserve(columns_[i], rows);
    if (join_.order_by_base_value) {
      RUNSTORE_RETURN_IF_ERROR(ReadKeysOfValues(w.get()));
    } else {
      RUNSTORE_RETURN_IF_ERROR(ReadKeys(w.get()));
      base_left_ -= std::min(base_left_, w->rows());
    }
    if (where_) {
      Placed where;
      where.Reset(*where_, w->rows());
      if (!where_->missing) RUNSTORE_RETURN_IF_ERROR(PlaceColumn(*w, *where_, &where));
      where.ApplyFill(*where_);
      std::vector<uint32_t> kept;
      for (size_t r = 0; r < w->rows(); ++r) {
        if (where.present[r] && where_values_.count(where.Bytes(r)))
          kept.push_back(static_cast<uint32_t>(r));
      }
      if (kept.size() != w->rows()) w->Keep(kept);  // the index, if made, is made again
    }
    for (size_t i = 0; i < columns_.size(); ++i) {
      const ColumnSpec& c = columns_[i];
      Placed& p = w->columns[i];
      const bool placed = std::find(from_base_.begin(), from_base_.end(), i) != from_base_.end();
      if (!placed) {
        p.Reset(c, w->rows());
        if (!c.missing && w->rows() > 0) {
          RUNSTORE_RETURN_IF_ERROR(PlaceColumn(*w, c, &p));
        }
      }
      p.ApplyFill(c);
    }
    w->slots = {};  // the batches need only the rows
    w->runs_.reset();
    if (join_.order_by_base_value) {
      w->order = OrderOf(w->sort_values);
      std::vector<int64_t>().swap(w->sort_values);
    }
    window_ = std::move(w);
    pos_ = 0;
    return Status::OK();
  }

  // The rows in the order of `values` (ties in row order); empty where they
  // are in that order already (a design's rows as define_experiments wrote
  // them). Values of a range at most twice the rows (a design's 0, 1, 2, ...)
  // are counted into place; others sorted.
  static std::vector<uint32_t> OrderOf(const std::vector<int64_t>& values) {
    std::vector<uint32_t> order;
    if (std::is_sorted(values.begin(), values.end())) return order;
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    const uint64_t range = static_cast<uint64_t>(*hi) - static_cast<uint64_t>(*lo);
    order.resize(values.size());
    if (range < 2 * values.size()) {
      std::vector<uint32_t> at(range + 2, 0);  // at[k + 1]: rows of value lo + k, then starts
      for (int64_t v : values) ++at[static_cast<uint64_t>(v) - static_cast<uint64_t>(*lo) + 1];
      for (size_t k = 1; k < at.size(); ++k) at[k] += at[k - 1];
      for (uint32_t r = 0; r < values.size(); ++r) {
        order[at[static_cast<uint64_t>(values[r]) - static_cast<uint64_t>(*lo)]++] = r;
      }
      return order;
    }
    std::vector<std::pair<int64_t, uint32_t>> by(values.size());
    for (uint32_t r = 0; r < values.size(); ++r) by[r] = {values[r], r};
    std::sort(by.begin(), by.end());  // (value, row): ties in row order
    for (size_t k = 0; k < by.size(); ++k) order[k] = by[k].second;
    return order;
  }

  // Up to window_rows_ of the base's rows into `w`, with the values of the
  // columns placed from the base.
  Status ReadKeys(Window* w) {
    while (w->rows() < window_rows_) {
      if (base_pos_ >= base_batch_.count) {
        base_batch_ = ScanBatch();
        base_pos_ = 0;
        if (base_ == nullptr) {
          RUNSTORE_ASSIGN_OR_RETURN(base_, ScanBase(/*keys=*/true));
        }
        RUNSTORE_ASSIGN_OR_RETURN(const bool more, base_->Next(&base_batch_));
        if (!more) {
          base_done_ = true;
          break;
        }
      }
      const ScanBatch& b = base_batch_;
      const size_t k = std::min<size_t>(window_rows_ - w->rows(), b.count - base_pos_);
      for (size_t i : from_base_) w->columns[i].Resize(columns_[i], w->rows() + k);
      for (size_t j = base_pos_; j < base_pos_ + k; ++j) {
        const size_t row = w->rows();
        w->Add(b.run_ref(j), b.steps[j]);
        for (size_t i : from_base_) PutValue(columns_[i], b, j, row, &w->columns[i]);
      }
      ReleaseEvery(k * 16);
      base_pos_ += k;
    }
    return Status::OK();
  }

  // A scan of the base with the stream's filters.
  Result<std::unique_ptr<SeriesScanner>> ScanBase(bool keys) const {
    ScanOptions scan;
    scan.keys = keys;
    scan.runs = join_.stream.runs;
    scan.steps = join_.stream.steps;
    return snap_->Scan(join_.base, scan);
  }

  // The base's integer values of a scan batch, as int64.
  static int64_t IntValue(const ScanBatch& b, DType d, size_t j) {
    const char* at = b.values.data() + j * DTypeSize(d);
    switch (d) {
      case DType::kInt8:
        return *reinterpret_cast<const int8_t*>(at);
      case DType::kInt16:
        return *reinterpret_cast<const int16_t*>(at);
      case DType::kInt32:
        return *reinterpret_cast<const int32_t*>(at);
      case DType::kUInt8:
        return *reinterpret_cast<const uint8_t*>(at);
      case DType::kUInt16:
        return *reinterpret_cast<const uint16_t*>(at);
      case DType::kUInt32:
        return *reinterpret_cast<const uint32_t*>(at);
      default:  // int64 (JoinedArrowStream refuses the other types)
        return *reinterpret_cast<const int64_t*>(at);
    }
  }

  // The value ranges of the windows of an ordered join: the base's least and
  // greatest value, then a count of the values in each of kParts equal parts
  // of that range; a window is as many whole parts as window_rows_ holds (one
  // at least). Two reads of the base's values, none of its keys.
  Status PlanValueWindows() {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    uint64_t n = 0;
    for (int pass = 0; pass < 2; ++pass) {
      RUNSTORE_ASSIGN_OR_RETURN(auto scanner, ScanBase(/*keys=*/false));
      ScanBatch b;
      std::vector<uint64_t> parts(pass == 0 ? 0 : kParts);
      while (true) {
        RUNSTORE_ASSIGN_OR_RETURN(const bool more, scanner->Next(&b));
        if (!more) break;
        for (size_t j = 0; j < b.count; ++j) {
          const int64_t v = IntValue(b, base_dtype_, j);
          if (pass == 0) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            ++n;
          } else {
            ++parts[PartOf(v)];
          }
        }
        ReleaseEvery(b.count * 8);
      }
      if (n == 0) return Status::OK();  // no rows: no window
      if (pass == 0) {
        value_lo_ = lo;
        value_step_ = (static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo)) / kParts + 1;
      }
      if (pass == 1) {
        // Window edges at part boundaries: part k covers values whose
        // PartOf is k.
        uint64_t in_window = 0;
        for (size_t k = 0; k < kParts; ++k) {
          if (in_window > 0 && in_window + parts[k] > window_rows_) {
            value_edges_.push_back(k);
            in_window = 0;
          }
          in_window += parts[k];
        }
        value_edges_.push_back(kParts);
      }
    }
    return Status::OK();
  }

  // The part of [lo, hi] that `v` lies in (parts of value_step_ values each,
  // kParts of them at most): the same for the same value in every pass, and
  // never less for a greater value.
  size_t PartOf(int64_t v) const {
    return (static_cast<uint64_t>(v) - static_cast<uint64_t>(value_lo_)) / value_step_;
  }

  // The rows of the next window of an ordered join: the base's records whose
  // value's part lies in the window's parts, in scan order, each with its
  // value (NextWindow orders them once their columns are placed).
  Status ReadKeysOfValues(Window* w) {
    if (!values_planned_) {
      values_planned_ = true;
      RUNSTORE_RETURN_IF_ERROR(PlanValueWindows());
    }
    if (next_edge_ >= value_edges_.size()) {
      base_done_ = true;
      return Status::OK();
    }
    const size_t first = next_edge_ == 0 ? 0 : value_edges_[next_edge_ - 1];
    const size_t last = value_edges_[next_edge_++];  // parts [first, last)
    const uint64_t from = first * value_step_;
    // The last window reaches the greatest value (kParts * step may not fit).
    const bool to_end = last == kParts;
    const uint64_t to = to_end ? 0 : last * value_step_;
    if (next_edge_ == value_edges_.size()) base_done_ = true;
    RUNSTORE_ASSIGN_OR_RETURN(auto scanner, ScanBase(/*keys=*/true));
    ScanBatch b;
    while (true) {
      RUNSTORE_ASSIGN_OR_RETURN(const bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t j = 0; j < b.count; ++j) {
        // Parts [first, last): the values lo + first * step up to (not
        // including) lo + last * step, as offsets from lo.
        const int64_t v = IntValue(b, base_dtype_, j);
        const uint64_t offset = static_cast<uint64_t>(v) - static_cast<uint64_t>(value_lo_);
        if (offset < from || (!to_end && offset >= to)) continue;
        w->Add(b.run_ref(j), b.steps[j]);
        w->sort_values.push_back(v);
      }
      ReleaseEvery(b.count * 24);
    }
    return Status::OK();
  }

  static void PutValue(const ColumnSpec& c, const ScanBatch& b, size_t j, size_t row, Placed* p) {
    if (c.fixed) {
      p->Put(c, row, b.values.data() + j * c.record_bytes);
    } else {
      p->Put(c, row, b.records[j]);
    }
  }

  // The records of column `c`'s series at the window's keys into `*p`: a scan
  // of the blocks that may hold the window's runs and steps. The runs are a
  // filter where they are few (runs logged step by step: without them each
  // window would read the whole series) or where the window is a small part
  // of the series; not where a window of many runs holds much of it (a sweep's
  // experiments), whose set of runs costs more to build and to look each
  // record up in than the blocks it would leave out cost to read.
  Status PlaceColumn(const Window& w, const ColumnSpec& c, Placed* p) {
    if (w.rows() == 0) return Status::OK();
    ScanOptions scan;
    const auto [lo, hi] = std::minmax_element(w.steps.begin(), w.steps.end());
    scan.steps = ScanOptions::StepRange{*lo, *hi};
    const auto& impl = static_cast<const SnapshotImpl&>(*snap_);
    const size_t pieces = w.RunPieces();
    if (pieces * kRunFilterShare <= w.rows() ||
        w.rows() * kRunFilterShare < impl.StoredRecords(c.column.series)) {
      scan.runs = w.Runs();
    }
    RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap_->Scan(c.column.series, scan));
    ScanBatch b;
    size_t guess = 0;
    Window::Found found;
    while (true) {
      RUNSTORE_ASSIGN_OR_RETURN(const bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t j = 0; j < b.count; ++j) {
        const int64_t row = w.Find(b.run_ref(j), b.steps[j], guess, &found);
        if (row < 0) continue;
        PutValue(c, b, j, static_cast<size_t>(row), p);
        guess = static_cast<size_t>(row) + 1;
      }
      ReleaseEvery(b.count * (16 + (c.fixed ? c.record_bytes : 32)));
    }
    return Status::OK();
  }

  // The mapped pages leave the resident set every window_bytes read (16 MiB
  // at most), as a series' stream lets them go (docs/query.md): the pages a
  // join holds are bounded as its window is.
  void ReleaseEvery(uint64_t bytes) {
    read_bytes_ += bytes;
    if (read_bytes_ >= std::min(kReleaseBytes, join_.window_bytes)) {
      snap_->ReleasePages();
      read_bytes_ = 0;
    }
  }

  // Rows [o, o + n) of the window as one struct array.
  void Batch(int64_t o, int64_t n, ArrowArray* out) const {
    const Window& w = *window_;
    const std::shared_ptr<const void> owner = window_;
    // Row i of the batch: the window's o + i, or of an ordered join its
    // order[o + i], whose values are gathered into buffers of the batch.
    const auto row = [&](int64_t i) {
      return w.order.empty() ? static_cast<size_t>(o + i) : size_t{w.order[o + i]};
    };
    auto* d = new ArrayData;
    d->buffers.push_back(nullptr);
    if (!join_.run_field.empty()) {
      if (string_runs_) {
        std::string scratch;
        d->children.push_back(Strings(n, [&](int64_t i) -> std::string_view {
          const RunRef r = w.Run(row(i));
          if (r.is_string) return r.s;
          scratch = std::to_string(r.i);
          return scratch;
        }));
      } else {
        d->children.push_back(Fixed(DType::kInt64, reinterpret_cast<const char*>(w.int_runs.data()),
                                    8, 1, n, row, !w.order.empty(), o, owner, nullptr));
      }
    }
    if (!join_.step_field.empty()) {
      d->children.push_back(Fixed(DType::kInt64, reinterpret_cast<const char*>(w.steps.data()), 8,
                                  1, n, row, !w.order.empty(), o, owner, nullptr));
    }
    std::vector<uint8_t> present(static_cast<size_t>(n));
    for (size_t i = 0; i < columns_.size(); ++i) {
      const Placed& p = w.columns[i];
      for (int64_t k = 0; k < n; ++k) present[static_cast<size_t>(k)] = p.present[row(k)];
      Column(columns_[i], p, o, n, row, !w.order.empty(), owner, present.data(), d);
    }
    MakeArray(out, n, d);
  }

  // `n` records of `record` bytes (`elements` of `dtype` each) at `data`:
  // records o.. viewed where `gather` is false, else those of row(i) copied
  // into a buffer of the array's own.
  template <typename Row>
  static ArrowArray* Fixed(DType dtype, const char* data, size_t record, int64_t elements,
                           int64_t n, const Row& row, bool gather, int64_t o,
                           const std::shared_ptr<const void>& owner, const uint8_t* present) {
    if (!gather) {
      return Primitive(dtype, data + static_cast<size_t>(o) * record, n * elements, owner, present);
    }
    auto buf = std::make_shared<std::vector<char>>(record * static_cast<size_t>(n) + 8);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(buf->data() + static_cast<size_t>(i) * record, data + row(i) * record, record);
    }
    // std::vector<char>'s data is aligned for any scalar (operator new).
    return Primitive(dtype, buf->data(), n * elements, buf, present);
  }

  template <typename Row>
  static void Column(const ColumnSpec& c, const Placed& p, int64_t o, int64_t n, const Row& row,
                     bool gather, const std::shared_ptr<const void>& owner, const uint8_t* present,
                     ArrayData* d) {
    if (c.info.variable_shape) {
      ArrowArray *values = nullptr, *shapes = nullptr;
      VariableShapeLists(
          c.info.dtype, n, [&](int64_t i) { return p.Bytes(row(i)); },
          [&](int64_t i) {
            return std::span<const int64_t>(p.dims.data() + p.dim_begin[row(i)], p.rank[row(i)]);
          },
          present, &values, &shapes);
      d->children.push_back(values);
      d->children.push_back(shapes);
    } else if (!c.fixed) {
      d->children.push_back(Strings(
          n, [&](int64_t i) { return p.Bytes(row(i)); }, present));
    } else if (c.info.shape.empty()) {
      d->children.push_back(Fixed(c.info.dtype, p.fixed.data(), c.record_bytes, 1, n, row, gather,
                                  o, owner, present));
    } else {
      const int64_t m = Elements(c.info.shape);
      ArrowArray* values =
          Fixed(c.info.dtype, p.fixed.data(), c.record_bytes, m, n, row, gather, o, owner, nullptr);
      auto* list = new ArrayData;
      int64_t nulls = 0;
      const void* validity = Validity(list, present, n, &nulls);
      d->children.push_back(WithChild(n, {validity}, values, list, nulls));
    }
  }

  // Constant after construction.
  const DType base_dtype_;
  const std::shared_ptr<const Snapshot> snap_;
  const ArrowJoin join_;
  const bool string_runs_;
  const std::vector<ColumnSpec> columns_;
  const std::optional<ColumnSpec> where_;
  const std::set<std::string, std::less<>> where_values_;
  std::vector<size_t> from_base_;  // the columns of the base's own values
  uint64_t window_rows_ = 0;
  uint64_t base_left_ = 0;  // records the base stores, less those read: a bound on its rows

  // An ordered join's windows: value_edges_[k] is the end (a part) of window
  // k's parts (of value_step_ values from value_lo_); next_edge_ the next window's.
  static constexpr size_t kParts = 4096;
  bool values_planned_ = false;
  int64_t value_lo_ = 0;
  uint64_t value_step_ = 1;
  std::vector<size_t> value_edges_;
  size_t next_edge_ = 0;

  // The base's scan, made at the first pull, and where it stands.
  std::unique_ptr<SeriesScanner> base_;
  ScanBatch base_batch_;
  size_t base_pos_ = 0;
  bool base_done_ = false;

  // The window being handed out, and the next row of it.
  std::shared_ptr<const Window> window_;
  size_t pos_ = 0;

  static constexpr uint64_t kReleaseBytes = 16 << 20;
  uint64_t read_bytes_ = 0;  // since the pages were last released
  // A window whose runs are fewer than 1/kRunFilterShare of its rows, or
  // whose rows are fewer than 1/kRunFilterShare of what a series stores,
  // reads the series with its runs as a filter.
  static constexpr uint64_t kRunFilterShare = 8;
};

// What column `c` is: its series' type, or missing_dtype's where the
// snapshot has no record of it; InvalidArgument for a fill of another kind.
Result<ColumnSpec> Spec(const SnapshotImpl& snap, ArrowJoinColumn c) {
  ColumnSpec spec;
  if (c.name.empty()) c.name = c.series;
  Result<SeriesInfo> info = snap.SeriesTypeOf(c.series);
  if (info.ok()) {
    spec.info = std::move(info).value();
  } else if (info.status().code() == StatusCode::kNotFound) {
    spec.missing = true;
    spec.info.name = c.series;
    spec.info.dtype = c.missing_dtype;
  } else {
    return info.status();
  }
  const DType d = spec.info.dtype;
  spec.fixed = !IsVarLength(d) && !spec.info.variable_shape;
  spec.record_bytes =
      spec.fixed ? DTypeSize(d) * static_cast<size_t>(Elements(spec.info.shape)) : 0;
  const bool is_float = d == DType::kFloat32 || d == DType::kFloat64;
  const bool scalar = spec.info.shape.empty() && !spec.info.variable_shape;
  const bool fits =
      std::holds_alternative<std::monostate>(c.fill) ||
      (scalar && std::holds_alternative<std::string>(c.fill) && d == DType::kString) ||
      (scalar && std::holds_alternative<double>(c.fill) && is_float) ||
      (scalar && std::holds_alternative<int64_t>(c.fill) && spec.fixed);
  if (!fits) {
    return Status::InvalidArgument("column '" + c.name + "': its fill is not a value of series '" +
                                   c.series + "' (" + std::string(DTypeName(d)) + ")");
  }
  if (c.empty_is_null && d != DType::kString && d != DType::kBytes) {
    return Status::InvalidArgument("column '" + c.name + "': empty_is_null is for strings, and '" +
                                   c.series + "' holds " + std::string(DTypeName(d)));
  }
  spec.column = std::move(c);
  return spec;
}

}  // namespace

Status JoinedArrowStream(std::shared_ptr<const Snapshot> snapshot, const ArrowJoin& join,
                         ArrowArrayStream* out) {
  if (join.stream.batch_rows < 1) {
    return Status::InvalidArgument("batch_rows must be at least 1, got " +
                                   std::to_string(join.stream.batch_rows));
  }
  if (join.window_bytes < (1u << 20)) {
    return Status::InvalidArgument("window_bytes must be at least 1 MiB, got " +
                                   std::to_string(join.window_bytes));
  }
  const auto& impl = static_cast<const SnapshotImpl&>(*snapshot);
  RUNSTORE_ASSIGN_OR_RETURN(const SeriesInfo base, impl.SeriesTypeOf(join.base));
  if (join.order_by_base_value) {
    const DType d = base.dtype;
    const bool integer = d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 ||
                         d == DType::kInt64 || d == DType::kUInt8 || d == DType::kUInt16 ||
                         d == DType::kUInt32;
    if (!integer || !base.shape.empty() || base.variable_shape) {
      return Status::InvalidArgument("order_by_base_value: series '" + join.base +
                                     "' must hold one integer (int8 to int64, uint8 to uint32) "
                                     "a record; it holds " +
                                     std::string(DTypeName(d)) +
                                     (base.shape.empty() && !base.variable_shape ? "" : " arrays"));
    }
  }
  RUNSTORE_ASSIGN_OR_RETURN(const bool string_runs, impl.SeriesHasStringRuns(join.base));
  std::vector<ColumnSpec> columns;
  std::set<std::string, std::less<>> names;
  auto name = [&](const std::string& n) -> Status {
    if (!names.insert(n).second) {
      return Status::InvalidArgument("two fields of the joined stream are named '" + n + "'");
    }
    return Status::OK();
  };
  if (!join.run_field.empty()) RUNSTORE_RETURN_IF_ERROR(name(join.run_field));
  if (!join.step_field.empty()) RUNSTORE_RETURN_IF_ERROR(name(join.step_field));
  for (const ArrowJoinColumn& c : join.columns) {
    RUNSTORE_ASSIGN_OR_RETURN(ColumnSpec spec, Spec(impl, c));
    RUNSTORE_RETURN_IF_ERROR(name(spec.column.name));
    if (spec.info.variable_shape) RUNSTORE_RETURN_IF_ERROR(name(spec.column.name + ".shape"));
    columns.push_back(std::move(spec));
  }
  std::optional<ColumnSpec> where;
  if (!join.where_series.empty()) {
    ArrowJoinColumn w{.series = join.where_series, .missing_dtype = DType::kString};
    if (join.where_fill) w.fill = *join.where_fill;
    RUNSTORE_ASSIGN_OR_RETURN(ColumnSpec spec, Spec(impl, std::move(w)));
    if (spec.info.dtype != DType::kString) {
      return Status::InvalidArgument("where_series '" + join.where_series +
                                     "' must hold strings; it holds " +
                                     std::string(DTypeName(spec.info.dtype)));
    }
    where = std::move(spec);
  }
  read::arrow::ExportStream(
      std::make_unique<JoinStream>(std::move(snapshot), join, string_runs, base.dtype,
                                   std::move(columns), std::move(where)),
      out);
  return Status::OK();
}

}  // namespace runstore
