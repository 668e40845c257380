// runstore._core.Store.scan_aligned: several scalar series read into columns
// aligned on the runs of one of them, without a Python object per record.
//
// The experiments layer reads an experiment's fields (its status, its
// parameters) from one series each and places them by run. Through scan()
// every record's run comes back as a Python object (a str per record for
// hashed ids) and is looked up in a dict: at 1,000,000 experiments that is
// most of the time and memory of `runstore status`. Here the runs of the base
// series are held once, as bytes, every other series' records are placed
// by an exact comparison of their runs (a hash finds the candidates), string
// values come back dictionary-encoded, and only the runs a caller asks for
// become Python objects.
#include <algorithm>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "errors.h"
#include "numpy_api.h"

namespace runstore::python {
namespace {

// A 1-d numpy array that takes over the memory of `v` (no copy).
template <typename T>
nb::object VectorArray(std::vector<T>&& v, int type) {
  auto* held = new std::vector<T>(std::move(v));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  npy_intp dims[1] = {static_cast<npy_intp>(held->size())};
  PyObject* a = PyArray_SimpleNewFromData(1, dims, type, held->data());
  if (a == nullptr) throw nb::python_error();
  nb::object array = nb::steal(a);
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(a), owner.release().ptr()) != 0) {
    throw nb::python_error();
  }
  return array;
}

// The runs of the base series, in its scan order, found by exact value.
class RunTable {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  // Room for `n` runs of `bytes` in all (hints, bounded by the caller by
  // what the store holds).
  void Reserve(size_t n, size_t bytes) {
    bytes_.reserve(bytes);
    is_str_.reserve(n);
    ends_.reserve(n);
    hint_ = n;
  }
  void Add(const RunRef& r) {
    // The integers are kept from the first integer run on: a table of
    // string runs (hashed ids) has none.
    if (!r.is_string && !have_ints_) {
      have_ints_ = true;
      ints_.reserve(std::max(hint_, is_str_.size() + 1));
      ints_.resize(is_str_.size(), 0);
    }
    if (have_ints_) ints_.push_back(r.is_string ? 0 : r.i);
    is_str_.push_back(r.is_string ? 1 : 0);
    if (r.is_string) bytes_.insert(bytes_.end(), r.s.begin(), r.s.end());
    ends_.push_back(bytes_.size());
  }
  size_t size() const { return is_str_.size(); }
  // Into `out` as arrays, in the order added: "run" (0 for a string run),
  // "run_is_str", and the UTF-8 of string run i at
  // run_bytes[run_ends[i-1]:run_ends[i]]. The table is empty afterwards.
  void MoveInto(nb::dict* out) {
    if (!have_ints_) {  // zeros, in pages never touched
      npy_intp dims[1] = {static_cast<npy_intp>(size())};
      PyObject* a = PyArray_ZEROS(1, dims, NPY_INT64, 0);
      if (a == nullptr) throw nb::python_error();
      (*out)["run"] = nb::steal(a);
    } else {
      (*out)["run"] = VectorArray(std::move(ints_), NPY_INT64);
    }
    (*out)["run_is_str"] = VectorArray(std::move(is_str_), NPY_BOOL);
    (*out)["run_ends"] = VectorArray(std::move(ends_), NPY_UINT64);
    (*out)["run_bytes"] = VectorArray(std::move(bytes_), NPY_UINT8);
    *this = RunTable();
  }
  // After the last Add: an open-addressing table of at least twice as many
  // slots as runs, each the position + 1 of a run whose hash starts there.
  void Index() {
    size_t slots = 16;
    while (slots < 2 * size()) slots *= 2;
    slots_.assign(slots, 0);
    for (uint32_t i = 0; i < size(); ++i) {
      size_t at = Hash(At(i)) & (slots - 1);
      while (slots_[at] != 0) at = (at + 1) & (slots - 1);
      slots_[at] = i + 1;
    }
  }
  RunRef At(uint32_t i) const {
    if (!is_str_[i]) return RunRef(ints_[i]);
    const uint64_t lo = i == 0 ? 0 : ends_[i - 1];
    return RunRef(
        std::string_view(reinterpret_cast<const char*>(bytes_.data()) + lo, ends_[i] - lo));
  }
  // The position of run `r`, trying `guess` first (series written by one
  // log_many come in the same order); kAbsent if the base lacks it.
  uint32_t Find(const RunRef& r, uint32_t guess) const {
    if (guess < size() && Same(At(guess), r)) return guess;
    const size_t mask = slots_.size() - 1;
    for (size_t at = Hash(r) & mask; slots_[at] != 0; at = (at + 1) & mask) {
      if (Same(At(slots_[at] - 1), r)) return slots_[at] - 1;
    }
    return kAbsent;
  }

 private:
  static bool Same(const RunRef& a, const RunRef& b) {
    return a.is_string == b.is_string && (a.is_string ? a.s == b.s : a.i == b.i);
  }
  static uint64_t Hash(const RunRef& r) {
    return r.is_string ? std::hash<std::string_view>()(r.s)
                       : std::hash<int64_t>()(r.i) * 0x9E3779B97F4A7C15ull;
  }

  std::vector<uint8_t> is_str_;
  std::vector<int64_t> ints_;
  std::vector<uint64_t> ends_;  // of each run's bytes in bytes_
  std::vector<uint8_t> bytes_;
  std::vector<uint32_t> slots_;
  size_t hint_ = 0;
  bool have_ints_ = false;
};

// One series placed on the base's runs: numeric values, or string values as
// codes into `categories` (-1 where absent).
struct AlignedColumn {
  std::string name;
  SeriesInfo info;
  bool strings = false;
  size_t elem = 0;            // bytes of one record (of its code, for strings)
  std::vector<int64_t> dims;  // of the values array: {n, *record shape}
  nb::object values;          // numpy array of the base's length
  nb::object present;         // numpy bool array
  char* values_at = nullptr;
  bool* present_at = nullptr;
  std::deque<std::string> categories;  // stable: `codes` holds views of them
};

// Reads every record of `name` at `step`, calling place(batch, i) for each.
// A batch of a series of numbers must hold `record_bytes` per record, one of
// strings (no record_bytes) a record each: anything else (a store whose headers disagree) is
// Corruption, never a read past the batch.
Status ForEachRecord(const Snapshot& snap, const std::string& name, int64_t step,
                     std::optional<size_t> record_bytes, const ScanOptions& options,
                     const std::function<Status(const ScanBatch&, size_t)>& place) {
  RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap.Scan(name, options));
  ScanBatch batch;
  // The pages the scan mapped leave the resident set every 4 MiB of records
  // read (keys and values) and at the end: the columns, not the store's
  // pages, are what stays.
  constexpr size_t kReleaseEvery = size_t{4} << 20;
  size_t since_release = 0;
  while (true) {
    RUNSTORE_ASSIGN_OR_RETURN(bool have, scanner->Next(&batch));
    if (!have) break;
    const bool fits = record_bytes ? batch.values.nbytes() == batch.count * *record_bytes
                                   : batch.records.size() == batch.count;
    if (!fits) {
      return Status::Corruption("series '" + name + "': a batch of " + std::to_string(batch.count) +
                                " records does not hold one value of its type each");
    }
    for (size_t i = 0; i < batch.count; ++i) {
      if (batch.steps[i] != step) continue;
      RUNSTORE_RETURN_IF_ERROR(place(batch, i));
    }
    since_release += batch.values.nbytes() + 16 * batch.count;
    for (const Value& v : batch.records) since_release += v.nbytes();
    if (since_release >= kReleaseEvery) {
      batch = ScanBatch();
      snap.ReleasePages();
      since_release = 0;
    }
  }
  snap.ReleasePages();
  return Status::OK();
}

// Numbers of a fixed shape, and scalar strings.
Status CheckAlignable(const std::string& name, const SeriesInfo& info) {
  if (info.variable_shape || info.dtype == DType::kBytes ||
      (info.dtype == DType::kString && !info.shape.empty())) {
    return Status::InvalidArgument("series '" + name +
                                   "' is not a series of numbers of one shape or of scalar "
                                   "strings: scan_aligned reads those only");
  }
  return Status::OK();
}

// A stable order of the records by the base's values (numbers): where record
// perm[i] goes.
template <typename T>
std::vector<uint32_t> OrderBy(const std::string& values) {
  const size_t n = values.size() / sizeof(T);
  auto at = [&](uint32_t i) {
    T v;
    std::memcpy(&v, values.data() + i * sizeof(T), sizeof(T));
    return v;
  };
  std::vector<uint32_t> perm(n);
  for (uint32_t i = 0; i < n; ++i) perm[i] = i;
  // A design written in one go is stored in the order of its rows: then the
  // order is the storage order, found in one pass rather than a sort.
  bool ascending = true;
  for (size_t i = 1; i < n && ascending; ++i)
    ascending = !(at(static_cast<uint32_t>(i)) < at(static_cast<uint32_t>(i - 1)));
  if (ascending) return perm;
  std::stable_sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) { return at(a) < at(b); });
  return perm;
}

Result<std::vector<uint32_t>> OrderOf(DType dtype, const std::string& values) {
  switch (dtype) {
    case DType::kInt8:
      return OrderBy<int8_t>(values);
    case DType::kInt16:
      return OrderBy<int16_t>(values);
    case DType::kInt32:
      return OrderBy<int32_t>(values);
    case DType::kInt64:
      return OrderBy<int64_t>(values);
    case DType::kUInt8:
      return OrderBy<uint8_t>(values);
    case DType::kUInt16:
      return OrderBy<uint16_t>(values);
    case DType::kUInt32:
      return OrderBy<uint32_t>(values);
    case DType::kUInt64:
      return OrderBy<uint64_t>(values);
    default:
      return Status::InvalidArgument("scan_aligned orders by a base series of integers only");
  }
}

// The column of series `name`, checked to be one scan_aligned reads.
AlignedColumn ColumnOf(const Snapshot& snap, const std::string& name) {
  AlignedColumn col;
  col.name = name;
  Result<SeriesInfo> info = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    info = snap.GetSeriesInfo(name);
  }
  col.info = Unwrap(std::move(info));
  Check(CheckAlignable(name, col.info));
  col.strings = col.info.dtype == DType::kString;
  col.elem = col.strings ? sizeof(int32_t) : DTypeSize(col.info.dtype);
  col.dims = {0};
  for (int64_t d : col.info.shape) {
    if (d < 0 || (d > 0 && col.elem > SIZE_MAX / 2 / static_cast<size_t>(d))) {
      Check(Status::Corruption("series '" + name + "': its record shape is too large"));
    }
    col.elem *= static_cast<size_t>(d);
    col.dims.push_back(d);
  }
  return col;
}

// Where one column's records go: its value (string values as codes into its
// categories, found by `codes`, which holds views of them).
class Placer {
 public:
  explicit Placer(AlignedColumn* col) : col_(*col) {}
  void Put(const ScanBatch& b, size_t i, char* at) {
    if (!col_.strings) {
      std::memcpy(at, b.values.data() + i * col_.elem, col_.elem);
      return;
    }
    const Value& v = b.records[i];
    auto it = codes_.find(std::string_view(v.data(), v.nbytes()));
    if (it == codes_.end()) {
      col_.categories.emplace_back(v.data(), v.nbytes());
      it = codes_.emplace(col_.categories.back(), static_cast<int32_t>(col_.categories.size() - 1))
               .first;
    }
    std::memcpy(at, &it->second, sizeof(int32_t));
  }

 private:
  AlignedColumn& col_;
  std::unordered_map<std::string_view, int32_t> codes_;
};

// Allocates the arrays of `columns` for `n` rows: zeroed by the allocator
// (calloc), so that the pages of rows no record reaches are not touched and
// a column costs the records placed in it; string codes -1 (absent).
void AllocateColumns(std::vector<AlignedColumn>* columns, npy_intp n) {
  for (AlignedColumn& col : *columns) {
    col.dims[0] = n;
    const int type = col.strings ? NPY_INT32 : NumpyTypeNum(col.info.dtype);
    PyObject* a = PyArray_ZEROS(static_cast<int>(col.dims.size()), col.dims.data(), type, 0);
    if (a == nullptr) throw nb::python_error();
    col.values = nb::steal(a);
    col.present = NewArray(NPY_BOOL, {n});
    col.values_at = ArrayData(col.values);
    col.present_at = reinterpret_cast<bool*>(ArrayData(col.present));
    std::memset(col.present_at, 0, static_cast<size_t>(n));
    if (col.strings) std::fill_n(reinterpret_cast<int32_t*>(col.values_at), n, -1);
  }
}

// Reads every column's series (the records of `options`) at `step` into the
// row of its run: the run at position p of `runs` is row row_of(p). Without
// the GIL.
template <typename RowOf>
Status PlaceColumns(const Snapshot& snap, std::vector<AlignedColumn>* columns, const RunTable& runs,
                    const RowOf& row_of, int64_t step, const ScanOptions& options) {
  for (AlignedColumn& col : *columns) {
    Placer placer(&col);
    uint32_t next = 0;
    RUNSTORE_RETURN_IF_ERROR(ForEachRecord(
        snap, col.name, step, col.strings ? std::nullopt : std::optional<size_t>(col.elem), options,
        [&](const ScanBatch& b, size_t i) {
          const uint32_t p = runs.Find(b.run_ref(i), next);
          if (p == RunTable::kAbsent) return Status::OK();  // not one of the rows' runs
          const uint32_t at = row_of(p);
          placer.Put(b, i, col.values_at + at * col.elem);
          col.present_at[at] = true;
          next = p + 1;
          return Status::OK();
        }));
  }
  return Status::OK();
}

// The columns as scan_aligned hands them over: by name, 'value' and
// 'present', and the 'categories' of string columns.
nb::dict ColumnsDict(std::vector<AlignedColumn>* columns) {
  nb::dict cols;
  for (AlignedColumn& col : *columns) {
    nb::dict d;
    d["value"] = col.values;
    d["present"] = col.present;
    if (col.strings) {
      nb::list cats;
      for (const std::string& c : col.categories) {
        cats.append(nb::steal(
            PyUnicode_DecodeUTF8(c.data(), static_cast<Py_ssize_t>(c.size()), "surrogateescape")));
      }
      d["categories"] = cats;
    }
    cols[col.name.c_str()] = d;
  }
  return cols;
}

// Gives what a read allocated on the C heap back to the system: glibc keeps
// freed memory of this size for later allocations, and a process that reads
// once (runstore status) would hold it to the end.
void TrimHeap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

nb::dict PyStore::ScanAligned(const std::string& base, const std::vector<std::string>& names,
                              int64_t step, bool with_ids, bool ordered) {
  const StoreUse use = Use();
  auto snap = store_->GetSnapshot();
  AlignedColumn base_col = ColumnOf(*snap, base);
  if (!base_col.info.shape.empty()) {
    Check(Status::InvalidArgument("base series '" + base + "' is not of scalars"));
  }
  std::vector<AlignedColumn> columns;
  for (const std::string& name : names) columns.push_back(ColumnOf(*snap, name));
  // The base's runs in the order the scan read them, and (with `ordered`)
  // its values, which order the rows: the run stored at p goes to row
  // rank[p], and row i holds the run stored at perm[i].
  RunTable runs;
  std::vector<uint32_t> perm, rank;
  auto row_of = [&](uint32_t p) { return rank.empty() ? p : rank[p]; };
  auto stored_at = [&](npy_intp i) {
    return perm.empty() ? static_cast<uint32_t>(i) : perm[static_cast<size_t>(i)];
  };
  std::string base_values;
  Status s;
  {
    nb::gil_scoped_release nogil;
    AlignedColumn& col = base_col;
    Placer placer(&col);
    // Each record takes at least a byte of the store, so a header's count
    // never reserves more than the series' stored bytes; and a reservation is
    // not touched: one beyond what the runs take costs no memory, and the run
    // bytes never reallocate (doubling) for a store of uncompressed keys.
    const auto records = static_cast<size_t>(std::min(col.info.count, col.info.stored_bytes));
    runs.Reserve(records, static_cast<size_t>(col.info.stored_bytes));
    if (ordered) base_values.reserve(records * col.elem);
    s = ForEachRecord(*snap, base, step,
                      col.strings ? std::nullopt : std::optional<size_t>(col.elem), ScanOptions(),
                      [&](const ScanBatch& b, size_t i) {
                        runs.Add(b.run_ref(i));
                        if (ordered) {
                          base_values.resize(base_values.size() + col.elem);
                          placer.Put(b, i, base_values.data() + base_values.size() - col.elem);
                        }
                        return Status::OK();
                      });
    if (s.ok() && ordered) {
      // The runs stay where the scan put them; `perm` and `rank` map between
      // that and the order of the base's values.
      Result<std::vector<uint32_t>> ordered_perm = OrderOf(col.info.dtype, base_values);
      std::string().swap(base_values);  // the base orders the rows; it is no column
      s = ordered_perm.status();
      // Where each stored run goes, and the table that finds a run, only for the
      // columns placed on them (not for the runs alone: a list of experiments).
      if (s.ok()) {
        perm = std::move(*ordered_perm);
        bool identity = true;  // stored in row order: row_of(p) is p
        for (uint32_t i = 0; i < perm.size() && identity; ++i) identity = perm[i] == i;
        if (!columns.empty() && !identity) {
          rank.resize(perm.size());
          for (uint32_t i = 0; i < perm.size(); ++i) rank[perm[i]] = i;
        }
      }
    }
    if (s.ok() && !columns.empty()) runs.Index();
  }
  Check(s);
  const auto n = static_cast<npy_intp>(runs.size());
  AllocateColumns(&columns, n);
  {
    nb::gil_scoped_release nogil;
    s = PlaceColumns(*snap, &columns, runs, row_of, step, ScanOptions());
  }
  Check(s);
  nb::dict result;
  if (with_ids) {
    // The runs as Python objects, in the rows' order: int64 when every run
    // is an integer, else an object array of int and str.
    bool any_str = false;
    for (npy_intp i = 0; i < n && !any_str; ++i) any_str = runs.At(stored_at(i)).is_string;
    nb::object ids = NewArray(any_str ? NPY_OBJECT : NPY_INT64, {n});
    for (npy_intp i = 0; i < n; ++i) {
      const RunRef r = runs.At(stored_at(i));
      if (!any_str) {
        reinterpret_cast<int64_t*>(ArrayData(ids))[i] = r.i;
        continue;
      }
      PyObject* o = r.is_string
                        ? PyUnicode_DecodeUTF8(r.s.data(), static_cast<Py_ssize_t>(r.s.size()),
                                               "surrogateescape")
                        : PyLong_FromLongLong(r.i);
      if (o == nullptr) throw nb::python_error();
      Py_XSETREF(reinterpret_cast<PyObject**>(ArrayData(ids))[i], o);
    }
    result["ids"] = ids;
  }
  // The runs as the scan stored them, handed over without a copy, and with
  // `ordered` where each row's run is among them.
  runs.MoveInto(&result);
  if (!perm.empty()) result["order"] = VectorArray(std::move(perm), NPY_UINT32);
  result["columns"] = ColumnsDict(&columns);
  runs = RunTable();
  std::vector<uint32_t>().swap(rank);
  TrimHeap();
  return result;
}

nb::dict PyStore::ReadAligned(nb::handle runs_obj, const std::vector<std::string>& names,
                              int64_t step) {
  const StoreUse use = Use();
  auto snap = store_->GetSnapshot();
  std::vector<AlignedColumn> columns;
  for (const std::string& name : names) columns.push_back(ColumnOf(*snap, name));
  const python::Runs parsed =
      ParseRunList(runs_obj, "read_aligned");  // keeps the strs the refs borrow
  RunTable runs;
  std::vector<RunId> ids;
  ids.reserve(parsed.refs.size());
  for (const RunRef& r : parsed.refs) {
    runs.Add(r);
    ids.push_back(r.ToRunId());
  }
  runs.Index();
  for (uint32_t i = 0; i < runs.size(); ++i) {
    if (runs.Find(runs.At(i), UINT32_MAX) != i) {  // the first of equal runs
      Throw(PyExc_ValueError, "read_aligned: runs[" + std::to_string(i) +
                                  "] is also an earlier run of the list; the runs must differ");
    }
  }
  AllocateColumns(&columns, static_cast<npy_intp>(runs.size()));
  Status s;
  {
    nb::gil_scoped_release nogil;
    // One set of the runs, prepared once, filters the scan of every series.
    const ScanOptions options{.runs = RunSet(std::move(ids))};
    s = PlaceColumns(
        *snap, &columns, runs, [](uint32_t p) { return p; }, step, options);
  }
  Check(s);
  nb::dict result;
  result["columns"] = ColumnsDict(&columns);
  TrimHeap();
  return result;
}

}  // namespace runstore::python
