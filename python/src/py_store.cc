// runstore._core.Store: opening a store and reading it.
#include <nanobind/stl/vector.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "errors.h"
#include "numpy_api.h"
#include "runstore/sync.h"

namespace runstore::python {
namespace {

using namespace nb::literals;

nb::object ShapeTuple(const std::vector<int64_t>& shape) {
  nb::list l;
  for (int64_t d : shape) l.append(d);
  return nb::tuple(l);
}

nb::dict SeriesDict(const SeriesInfo& s) {
  nb::dict d;
  d["name"] = s.name;
  d["dtype"] = std::string(DTypeName(s.dtype));
  d["variable_shape"] = s.variable_shape;
  d["shape"] = s.variable_shape ? nb::none() : ShapeTuple(s.shape);
  d["count"] = s.count;
  d["stored_bytes"] = s.stored_bytes;
  d["first_logged"] = s.first_logged;
  return d;
}

template <typename T>
T OptionalCast(nb::handle h, T fallback) {
  return h.is_none() ? fallback : nb::cast<T>(h);
}

// Whether `s`, returned by opening or refreshing a store, is the error of one
// segment file that could not be read (Corruption or IOError naming the
// file): what OnDamaged::kSkip would leave out and list instead.
bool IsDamagedSegmentError(const Status& s) {
  if (s.code() != StatusCode::kCorruption && s.code() != StatusCode::kIOError) return false;
  const std::string& m = s.message();
  const size_t at = m.find("segments/");
  return at != std::string::npos && m.find(".rss", at) != std::string::npos;
}

}  // namespace

StoreUse::StoreUse(StoreForkState& state, const std::string& path) : state_(state) {
  if (state.guard.InOtherProcess() || state.broken) [[unlikely]] {
    // The first call in a child of fork() (the GIL makes it the only one).
    if (state.broken || state.busy.load(std::memory_order_relaxed) > 0) {
      state.broken = true;
      Throw(PyExc_RuntimeError,
            "store " + path + " was in use by another thread of process " +
                std::to_string(state.guard.owner_pid()) + " when this process (" +
                std::to_string(getpid()) +
                ") was forked from it: that thread does not exist here and may have held the "
                "store's locks, so this copy cannot be used. Open the store again in this "
                "process: runstore.open(path)");
    }
    state.guard = ForkGuard();  // the child's own from now on
  }
  state.busy.fetch_add(1, std::memory_order_relaxed);
}

void PyStore::CheckOpen(const Status& s) const {
  if (s.ok()) return;
  if (skip_damaged_ || !IsDamagedSegmentError(s)) ThrowStatus(s);
  ThrowStatus(Status(s.code(),
                     s.message() + " (open with on_damaged=\"skip\" to read the other segments)",
                     s.sys_errno()));
}

PyStore::PyStore(const std::string& path, bool read_only, bool create, bool skip_damaged)
    : read_only_(read_only), skip_damaged_(skip_damaged) {
  // No file name holds a NUL: the system calls would see the path up to it,
  // and create that.
  if (const size_t nul = path.find('\0'); nul != std::string::npos) {
    std::string shown = path;
    for (size_t i = nul; i != std::string::npos; i = shown.find('\0', i))
      shown.replace(i, 1, "\\0");
    Throw(PyExc_ValueError, "store path '" + shown + "' contains a NUL character");
  }
  StoreOptions o;
  o.read_only = read_only;
  o.create_if_missing = create && !read_only;
  o.on_damaged = skip_damaged ? OnDamaged::kSkip : OnDamaged::kFail;
  Result<std::unique_ptr<Store>> r = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    r = Store::Open(path, o);
  }
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
    nb::object args =
        nb::steal(Py_BuildValue("(iNN)", ENOENT, MessageText(r.status().message()).release().ptr(),
                                MessageText(path).release().ptr()));
    PyErr_SetObject(PyExc_FileNotFoundError, args.ptr());
    throw nb::python_error();
  }
  CheckOpen(r.status());
  store_ = std::move(r).value();
}

PyWriter* PyStore::NewWriter(nb::handle writer_id, nb::handle buffer_bytes, nb::handle codec,
                             nb::handle zstd_level, nb::handle commit_every_s,
                             nb::handle commit_every_bytes, nb::handle segment_bytes,
                             bool allow_reserved, nb::handle staging_dir, nb::handle ship_every_s,
                             bool record_time) {
  const StoreUse use = Use();
  WriterOptions o;
  o.record_time = record_time;
  // Private: lets the runstore package write its '~design/...' and
  // '~status/...' records (docs/experiments.md); not documented for users.
  o.allow_reserved_names = allow_reserved;
  if (!writer_id.is_none()) o.writer_id = std::string(Utf8(writer_id.ptr(), "writer_id"));
  o.buffer_bytes = OptionalCast<size_t>(buffer_bytes, o.buffer_bytes);
  if (!codec.is_none()) o.codec = Unwrap(ParseCodec(Utf8(codec.ptr(), "codec")));
  o.zstd_level = OptionalCast<int>(zstd_level, o.zstd_level);
  o.commit_every_s = OptionalCast<double>(commit_every_s, o.commit_every_s);
  o.commit_every_bytes = OptionalCast<uint64_t>(commit_every_bytes, o.commit_every_bytes);
  o.segment_bytes = OptionalCast<uint64_t>(segment_bytes, o.segment_bytes);
  // None: $RUNSTORE_STAGING_DIR decides; "": no staging.
  if (!staging_dir.is_none()) o.staging_dir = std::string(Utf8(staging_dir.ptr(), "staging_dir"));
  o.ship_every_s = OptionalCast<double>(ship_every_s, o.ship_every_s);
  Result<std::unique_ptr<Writer>> r = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    r = store_->NewWriter(o);
  }
  CheckOpen(r.status());
  return new PyWriter(std::move(r).value(), o.commit_every_s == 0, o.record_time);
}

void PyStore::Refresh() {
  const StoreUse use = Use();
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = store_->Refresh().status();
  }
  CheckOpen(s);
}

namespace {

// The series of the store's current snapshot, listed without the GIL.
std::vector<SeriesInfo> ListSeriesNoGil(Store& store, bool include_reserved) {
  auto snap = store.GetSnapshot();
  Result<std::vector<SeriesInfo>> r = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    r = snap->ListSeries(include_reserved);
  }
  return Unwrap(std::move(r));
}

}  // namespace

nb::list PyStore::Names(bool include_reserved) {
  const StoreUse use = Use();
  nb::list out;
  for (const SeriesInfo& s : ListSeriesNoGil(*store_, include_reserved)) out.append(s.name);
  return out;
}

nb::list PyStore::Series(bool include_reserved, bool counts) {
  const StoreUse use = Use();
  nb::list out;
  if (!counts) {
    // The types only: no key resolution, no block read (Snapshot::ListSeriesTypes).
    for (const SeriesInfo& s : store_->GetSnapshot()->ListSeriesTypes(include_reserved)) {
      nb::dict d = SeriesDict(s);
      nb::del(d["count"]);
      out.append(d);
    }
    return out;
  }
  for (const SeriesInfo& s : ListSeriesNoGil(*store_, include_reserved)) {
    out.append(SeriesDict(s));
  }
  return out;
}

nb::dict PyStore::SeriesInfoOf(const std::string& name) {
  const StoreUse use = Use();
  auto snap = store_->GetSnapshot();
  Result<SeriesInfo> r = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    r = snap->GetSeriesInfo(name);
  }
  return SeriesDict(Unwrap(std::move(r)));
}

nb::list PyStore::Runs() {
  const StoreUse use = Use();
  auto snap = store_->GetSnapshot();
  Result<std::vector<RunId>> r = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    r = snap->ListRuns();
  }
  const std::vector<RunId>& runs = Unwrap(std::move(r));
  nb::list out;
  for (const RunId& id : runs) out.append(RunIdToPython(id));
  return out;
}

nb::list PyStore::Segments() {
  const StoreUse use = Use();
  nb::list out;
  for (const SegmentInfo& s : store_->GetSnapshot()->ListSegments()) {
    nb::dict d;
    d["file"] = s.file;
    d["writer_id"] = s.writer_id;
    d["sequence"] = s.sequence;
    d["sealed"] = s.sealed;
    d["committed_bytes"] = s.committed_bytes;
    d["file_bytes"] = s.file_bytes;
    d["commits"] = s.commits;
    d["blocks"] = s.blocks;
    d["created_ns"] = s.created_ns;
    out.append(d);
  }
  return out;
}

nb::list PyStore::DamagedSegments() {
  const StoreUse use = Use();
  nb::list out;
  for (const DamagedSegment& d : store_->GetSnapshot()->DamagedSegments()) {
    nb::dict e;
    e["file"] = MessageText(d.file);
    e["kind"] = std::string(StatusCodeName(d.status.code()));
    e["message"] = MessageText(d.status.message());
    out.append(e);
  }
  return out;
}

nb::dict PyStore::VerifyAll(nb::handle progress) {
  const StoreUse use = Use();
  auto snap = store_->GetSnapshot();
  VerifyReport report;
  PyProgress on_progress(progress);
  {
    nb::gil_scoped_release nogil;
    if (on_progress.enabled()) {
      report = snap->VerifyAll([&](uint64_t done, uint64_t total) { on_progress(done, total); });
    } else {
      report = snap->VerifyAll();
    }
  }
  on_progress.Rethrow();
  if (report.problems.empty() && !report.unchecked.empty()) {
    // Nothing found wrong, but not everything checked: the process ran out
    // of descriptors or memory (ResourceExhaustedError), which is no damage.
    const Status& first = report.unchecked.front();
    ThrowStatus(Status(first.code(),
                       "could not check " + std::to_string(report.unchecked.size()) +
                           " segment(s): " + first.message(),
                       first.sys_errno()));
  }
  nb::list problems;
  for (const Status& p : report.problems) {
    problems.append(
        nb::make_tuple(std::string(StatusCodeName(p.code())), MessageText(p.message())));
  }
  nb::dict d;
  d["segments"] = report.segments;
  d["blocks_checked"] = report.blocks_checked;
  d["bytes_checked"] = report.bytes_checked;
  d["problems"] = problems;
  return d;
}

nb::object PyStore::Get(nb::handle run, const std::string& name, nb::handle step_obj) {
  const StoreUse use = Use();
  const RunRef r = ToRunRef(run.ptr());  // borrows `run`, which the call keeps alive
  const int64_t step = ToStep(step_obj.ptr());
  auto snap = store_->GetSnapshot();
  Result<Value> v = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    v = snap->Get(r, name, step);
  }
  return ValueToPython(Unwrap(std::move(v)));
}

namespace {

// The core of runstore.LazyArray: a LazyValue and the unchecked numpy view of
// its bytes, from which the Python class cuts the views it returns after
// CheckView has checked the bytes they reach.
class PyLazyValue {
 public:
  // `fork` and `path`: the store's, whose snapshot the checks read.
  PyLazyValue(LazyValue lazy, std::shared_ptr<StoreForkState> fork, std::string path)
      : lazy_(std::move(lazy)),
        raw_(MakeArrayView(lazy_.value())),
        fork_(std::move(fork)),
        path_(std::move(path)) {}

  nb::object raw() const { return raw_; }
  bool all_checked() const { return lazy_.all_checked(); }

  void CheckAll() const {
    const StoreUse use(*fork_, path_);
    Status s;
    {
      nb::gil_scoped_release nogil;
      s = lazy_.CheckAll();
    }
    Check(s);
  }

  // Checks every byte that `view`, an array viewing raw()'s memory, can read.
  void CheckView(nb::handle view) const {
    const StoreUse use(*fork_, path_);
    if (!PyArray_Check(view.ptr())) Throw(PyExc_TypeError, "check_view takes a numpy array");
    auto* a = reinterpret_cast<PyArrayObject*>(view.ptr());
    const int nd = PyArray_NDIM(a);
    const int64_t itemsize = PyArray_ITEMSIZE(a);
    const char* base = lazy_.value().data();
    const int64_t start = PyArray_BYTES(a) - base;
    std::vector<int64_t> dims(PyArray_DIMS(a), PyArray_DIMS(a) + nd);
    std::vector<int64_t> strides(PyArray_STRIDES(a), PyArray_STRIDES(a) + nd);
    const bool contiguous = PyArray_IS_C_CONTIGUOUS(a) || PyArray_IS_F_CONTIGUOUS(a);
    const int64_t nbytes = static_cast<int64_t>(PyArray_NBYTES(a));
    // A view outside the value would be a bug of the caller, not damage.
    int64_t lo = start, hi = start + (PyArray_SIZE(a) > 0 ? itemsize : 0);
    for (int i = 0; i < nd && PyArray_SIZE(a) > 0; ++i) {
      (strides[i] < 0 ? lo : hi) += (dims[i] - 1) * strides[i];
    }
    if (lo < 0 || hi > static_cast<int64_t>(lazy_.value().nbytes())) {
      Throw(PyExc_ValueError, "check_view: the array does not view this value's bytes");
    }
    Status s;
    {
      nb::gil_scoped_release nogil;
      if (contiguous) {
        s = lazy_.Check(static_cast<uint64_t>(start), static_cast<uint64_t>(nbytes));
      } else {
        std::vector<LazyValue::Range> ranges;
        s = CheckStrided(start, dims, strides, itemsize, 0, &ranges);
        if (s.ok()) s = lazy_.Check(ranges);
      }
    }
    Check(s);
  }

 private:
  // Elements closer than the smallest chunk (format::kMinChunkShift) leave no
  // chunk between them unread: a run of them is checked as one range.
  static constexpr int64_t kDenseStride = int64_t{1} << 12;
  // Ranges are checked in batches of this many, so that a view of many
  // scattered elements needs little memory to check.
  static constexpr size_t kBatch = size_t{1} << 16;

  // Adds the byte ranges the elements of a strided view reach to *ranges
  // (merging neighbours), checking them whenever a batch is full.
  Status CheckStrided(int64_t at, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& strides, int64_t itemsize, size_t d,
                      std::vector<LazyValue::Range>* ranges) const {
    auto add = [&](int64_t offset, int64_t len) {
      const auto o = static_cast<uint64_t>(offset), n = static_cast<uint64_t>(len);
      if (!ranges->empty() && ranges->back().offset + ranges->back().len == o) {
        ranges->back().len += n;
        return Status::OK();
      }
      if (ranges->size() == kBatch) {
        RUNSTORE_RETURN_IF_ERROR(lazy_.Check(*ranges));
        ranges->clear();
      }
      ranges->push_back({o, n});
      return Status::OK();
    };
    const size_t nd = dims.size();
    if (nd == 0) return add(at, itemsize);
    const int64_t stride = strides[d], n = dims[d];
    if (n == 0) return Status::OK();
    if (d + 1 == nd && std::abs(stride) <= kDenseStride) {
      return add(stride < 0 ? at + (n - 1) * stride : at, std::abs(stride) * (n - 1) + itemsize);
    }
    for (int64_t i = 0; i < n; ++i) {
      RUNSTORE_RETURN_IF_ERROR(
          d + 1 == nd ? add(at + i * stride, itemsize)
                      : CheckStrided(at + i * stride, dims, strides, itemsize, d + 1, ranges));
    }
    return Status::OK();
  }

  LazyValue lazy_;
  nb::object raw_;
  std::shared_ptr<StoreForkState> fork_;
  std::string path_;
};

}  // namespace

nb::object PyStore::GetLazy(nb::handle run, const std::string& name, nb::handle step_obj) {
  const StoreUse use = Use();
  const RunRef r = ToRunRef(run.ptr());
  const int64_t step = ToStep(step_obj.ptr());
  auto snap = store_->GetSnapshot();
  Result<LazyValue> v = Status::NotFound("");
  {
    nb::gil_scoped_release nogil;
    v = snap->GetLazy(r, name, step);
  }
  LazyValue lazy = Unwrap(std::move(v));
  if (IsVarLength(lazy.value().dtype())) {
    Throw(PyExc_TypeError, "series '" + name + "' holds " +
                               std::string(DTypeName(lazy.value().dtype())) +
                               " values, not arrays; use get()");
  }
  return nb::cast(PyLazyValue(std::move(lazy), fork_, path()), nb::rv_policy::move);
}

namespace {

// The memory of one column of a scan, grown as its batches arrive, and handed
// to numpy at the end without a copy. Small columns are malloc'd; from
// kMapFrom bytes a column is a mapping aligned to huge pages, which the
// kernel may back with transparent huge pages as it does numpy's own large
// arrays (fewer page faults on the copy), and which grows by moving its pages
// into a larger mapping (mremap) rather than by copying them. Rows of zero
// bytes take no memory.
class GrowingColumn {
 public:
  explicit GrowingColumn(size_t row_bytes) : row_bytes_(row_bytes) {}
  ~GrowingColumn() { Free(data_, mapped_bytes_); }
  GrowingColumn(const GrowingColumn&) = delete;
  GrowingColumn& operator=(const GrowingColumn&) = delete;

  // Makes room for `rows` rows: at least twice the rows it had, or `hint`
  // (the rows expected in all) if that is enough and less. False if the
  // memory cannot be had. GIL not needed.
  bool Reserve(size_t rows, size_t hint) {
    if (rows <= capacity_ || row_bytes_ == 0) return true;
    size_t grown = std::max(rows, capacity_ > SIZE_MAX / 2 ? SIZE_MAX : 2 * capacity_);
    if (hint >= rows && hint < grown) grown = hint;
    if (grown > (SIZE_MAX - kHugePage) / row_bytes_) return false;
    return Grow(grown);
  }
  // Copies `n` rows from `src` to row `at` (room reserved).
  void Put(size_t at, const void* src, size_t n) {
    if (n > 0 && row_bytes_ > 0) std::memcpy(data_ + at * row_bytes_, src, n * row_bytes_);
  }
  // A writable C-contiguous numpy array of the first dims[0] rows with these
  // dims, owning the memory (its base is a capsule that frees it); the column
  // is empty afterwards. Needs the GIL.
  nb::object Release(int type_num, const std::vector<npy_intp>& dims) {
    const size_t rows = static_cast<size_t>(dims[0]);
    if (row_bytes_ == 0 || rows == 0) return NewArray(type_num, dims);
    Shrink(rows);  // gives back what a count that the rows did not confirm asked for
    PyArray_Descr* descr = PyArray_DescrFromType(type_num);  // stolen below
    PyObject* a = PyArray_NewFromDescr(&PyArray_Type, descr, static_cast<int>(dims.size()),
                                       const_cast<npy_intp*>(dims.data()), nullptr, data_,
                                       NPY_ARRAY_CARRAY, nullptr);
    if (a == nullptr) throw nb::python_error();
    nb::object array = nb::steal(a);
    PyObject* capsule = PyCapsule_New(data_, nullptr, [](PyObject* c) {
      Free(PyCapsule_GetPointer(c, nullptr), reinterpret_cast<size_t>(PyCapsule_GetContext(c)));
    });
    if (capsule == nullptr) throw nb::python_error();
    if (PyCapsule_SetContext(capsule, reinterpret_cast<void*>(mapped_bytes_)) != 0) {
      Py_DECREF(capsule);
      throw nb::python_error();
    }
    data_ = nullptr;
    capacity_ = mapped_bytes_ = 0;
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(a), capsule) != 0) {
      throw nb::python_error();
    }
    return array;
  }

 private:
  static constexpr size_t kMapFrom = size_t{4} << 20;  // as numpy asks for huge pages
  static constexpr size_t kHugePage = size_t{2} << 20;

  static size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
  // Frees memory of this class: a mapping of `mapped_bytes`, or malloc'd if 0.
  static void Free(void* p, size_t mapped_bytes) {
    if (mapped_bytes != 0) {
      munmap(p, mapped_bytes);
    } else {
      std::free(p);
    }
  }

  bool Grow(size_t rows) {
    const size_t bytes = rows * row_bytes_;
#ifdef __linux__
    if (mapped_bytes_ != 0 || bytes >= kMapFrom) return GrowMapped(rows, bytes);
#endif
    void* p = std::realloc(data_, bytes);
    if (p == nullptr) return false;
    data_ = static_cast<char*>(p);
    capacity_ = rows;
    return true;
  }

#ifdef __linux__
  bool GrowMapped(size_t rows, size_t bytes) {
    const size_t len = RoundUp(bytes, kHugePage);
    // A fresh mapping aligned to a huge page: map one huge page more than
    // needed and trim both ends.
    void* r =
        mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return false;
    char* const raw = static_cast<char*>(r);
    char* const at = raw + (RoundUp(reinterpret_cast<uintptr_t>(raw), kHugePage) -
                            reinterpret_cast<uintptr_t>(raw));
    if (at > raw) munmap(raw, static_cast<size_t>(at - raw));
    if (raw + len + kHugePage > at + len) {
      munmap(at + len, static_cast<size_t>(raw + len + kHugePage - (at + len)));
    }
#ifdef MADV_HUGEPAGE
    madvise(at, len, MADV_HUGEPAGE);
#endif
    if (mapped_bytes_ != 0) {
      // The old pages move to the start of the new mapping (page tables, not
      // bytes); they are copied only if the kernel refuses the move.
      if (mremap(data_, mapped_bytes_, mapped_bytes_, MREMAP_MAYMOVE | MREMAP_FIXED, at) ==
          MAP_FAILED) {
        std::memcpy(at, data_, capacity_ * row_bytes_);
        munmap(data_, mapped_bytes_);
      }
    } else if (data_ != nullptr) {
      std::memcpy(at, data_, capacity_ * row_bytes_);
      std::free(data_);
    }
    data_ = at;
    mapped_bytes_ = len;
    capacity_ = rows;
    return true;
  }
#endif

  void Shrink(size_t rows) {
    if (rows >= capacity_) return;
    const size_t bytes = rows * row_bytes_;
    if (mapped_bytes_ != 0) {
      const size_t keep = RoundUp(bytes, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
      if (keep < mapped_bytes_) {
        munmap(data_ + keep, mapped_bytes_ - keep);
        mapped_bytes_ = keep;
      }
    } else if (void* p = std::realloc(data_, bytes); p != nullptr) {
      data_ = static_cast<char*>(p);
    }
    capacity_ = rows;
  }

  const size_t row_bytes_;
  char* data_ = nullptr;
  size_t capacity_ = 0;      // rows
  size_t mapped_bytes_ = 0;  // the length of the mapping data_ starts, or 0 if malloc'd
};

// The run ids a scan asks for.
std::vector<RunId> ToRunIds(nb::handle runs) {
  const Runs parsed = ParseRunList(runs, "scan");  // keeps the strs the refs borrow
  std::vector<RunId> out;
  for (const RunRef& r : parsed.refs) out.push_back(r.ToRunId());
  return out;
}

// The batches of one scan, as PyStore::Scan reads them. A scan of some runs or
// steps does not know its count before it ends: its batches (views of the
// blocks, or the rows gathered from them) are read first, releasing the pages
// they mapped every few blocks; the others are read as they are copied.
struct ScanSource {
  SeriesInfo info;
  std::unique_ptr<SeriesScanner> scanner;
  bool filtered = false;
  std::deque<ScanBatch> collected;  // a filtered scan's batches, read already
  size_t collected_count = 0;

  // Rows the scan returns: what a filtered scan's batches hold, else what
  // the series' block headers claim (which the batches must confirm).
  size_t total() const { return filtered ? collected_count : info.count; }
  // The next batch; false at the end. GIL not needed.
  Result<bool> Next(ScanBatch* batch) {
    if (!filtered) return scanner->Next(batch);
    if (collected.empty()) return false;
    *batch = std::move(collected.front());
    collected.pop_front();
    return true;
  }
};

// Opens the scan of `name` and reads its first batch into *first (a filtered
// scan: all of them), with the GIL released; raises what went wrong after.
// Returns whether there is a first batch.
bool OpenScan(const Snapshot& snap, const std::string& name, const ScanOptions& options,
              ScanSource* source, ScanBatch* first) {
  source->filtered = options.runs.has_value() || options.steps.has_value();
  Result<SeriesInfo> info_r = Status::NotFound("");
  Result<std::unique_ptr<SeriesScanner>> scanner_r = Status::NotFound("");
  Result<bool> first_r = false;
  {
    nb::gil_scoped_release nogil;
    info_r = snap.GetSeriesInfo(name);
    if (info_r.ok()) scanner_r = snap.Scan(name, options);
    if (scanner_r.ok()) first_r = (*scanner_r)->Next(first);
    // The pages a filtered scan maps leave the resident set every few blocks: the runs of a
    // chunk of experiments may lie in every block of a compacted series, and the pages
    // faulted in around the rows it copies (the kernel maps their neighbours too) would
    // otherwise make the whole series resident (800 MiB for one chunk of a sweep's array
    // outcome). The rows picked out are copies; a block taken whole is read again from the
    // page cache when it is copied.
    constexpr int kReleaseEvery = 16;
    int since_release = 0;
    while (source->filtered && first_r.ok() && *first_r) {
      source->collected_count += first->count;
      source->collected.push_back(std::move(*first));
      if (++since_release == kReleaseEvery) {
        snap.ReleasePages();
        since_release = 0;
      }
      first_r = (*scanner_r)->Next(first);
    }
  }
  source->info = Unwrap(std::move(info_r));
  source->scanner = Unwrap(std::move(scanner_r));
  bool have = Unwrap(std::move(first_r));
  if (source->filtered) have = Unwrap(source->Next(first));
  return have;
}

// The columns a scan's batches are copied into, row after row, and the
// arrays they become. Rows are counted as they arrive: `total` is what the
// block headers claim, which a compressed block's payload confirms only when
// it is decoded (a zstd block may claim 32768 records per stored byte). The
// columns start with the rows whose values the series' stored bytes could
// hold uncompressed (all of an uncompressed series: one allocation), grow to
// twice their rows as more arrive, and never past `total` while it holds; so
// a lying header gets at most twice what the blocks really hold. A filtered
// scan has read its batches already: `total` is what they hold.
class ScanColumns {
 public:
  ScanColumns(const std::string& name, const SeriesInfo& info, bool keys, bool filtered,
              size_t total)
      : name_(name),
        info_(info),
        keys_(keys),
        filtered_(filtered),
        total_(total),
        fixed_(!IsVarLength(info.dtype) && !info.variable_shape),
        record_bytes_(RecordBytes(name, info, fixed_)),
        runs_(keys ? 8 : 0),
        steps_(keys ? 8 : 0),
        values_(fixed_ ? record_bytes_ : 0) {
    const size_t initial =
        filtered ? total
                 : static_cast<size_t>(std::min<uint64_t>(
                       total, info.stored_bytes / std::max<size_t>(record_bytes_, 1)));
    if (!Reserve(initial)) throw std::bad_alloc();
  }

  // Whether values are numbers of one shape, copied without the GIL (else
  // each is a Python object, AddObjects).
  bool fixed() const { return fixed_; }
  bool out_of_memory() const { return out_of_memory_; }

  // Copies the keys and numeric values of `batch` after the rows so far (GIL
  // not needed). Corruption for a batch past the rows the series claims or
  // of the wrong size; out_of_memory() when the columns cannot grow.
  Status Copy(const ScanBatch& batch) {
    if (!filtered_ && rows_ + batch.count > total_) {
      return Status::Corruption("series '" + name_ + "': the scan returned more than its " +
                                std::to_string(total_) + " records");
    }
    if (fixed_ && batch.values.nbytes() != batch.count * record_bytes_) {
      return Status::Corruption("series '" + name_ + "': a batch of " +
                                std::to_string(batch.count) + " records holds " +
                                std::to_string(batch.values.nbytes()) + " bytes of values");
    }
    if (!Reserve(rows_ + batch.count)) {
      out_of_memory_ = true;
      return Status::OK();
    }
    if (keys_) {
      runs_.Put(rows_, batch.int_runs.data(), batch.count);
      steps_.Put(rows_, batch.steps.data(), batch.count);
    }
    if (fixed_) values_.Put(rows_, batch.values.data(), batch.count);
    for (size_t i = 0; i < batch.run_is_string.size(); ++i) {
      if (batch.run_is_string[i]) string_runs_.emplace_back(rows_ + i, batch.string_runs[i]);
    }
    rows_ += batch.count;
    return Status::OK();
  }

  // The values of `batch`, just copied, as Python objects (needs the GIL).
  void AddObjects(const ScanBatch& batch) {
    objects_.reserve(objects_.size() + batch.count);
    for (size_t i = 0; i < batch.count; ++i) objects_.push_back(ValueToPython(batch.records[i]));
  }

  // The arrays "run", "step" (with keys) and "value", read-only (needs the
  // GIL). RuntimeError if the rows are not the ones the series claims.
  nb::dict Release() {
    if (!filtered_ && rows_ != total_) {
      Throw(PyExc_RuntimeError, "series '" + name_ + "': the scan returned " +
                                    std::to_string(rows_) + " records, expected " +
                                    std::to_string(total_));
    }
    const auto rows = static_cast<npy_intp>(rows_);
    nb::dict out;
    nb::object value_array;
    if (fixed_) {
      std::vector<npy_intp> vdims{rows};
      vdims.insert(vdims.end(), info_.shape.begin(), info_.shape.end());
      value_array = values_.Release(NumpyTypeNum(info_.dtype), vdims);
    } else {
      value_array = NewArray(NPY_OBJECT, {rows});
      auto** slots = reinterpret_cast<PyObject**>(ArrayData(value_array));
      for (size_t i = 0; i < rows_; ++i) Py_XSETREF(slots[i], objects_[i].release().ptr());
    }
    if (keys_) {
      nb::object run_array = RunArray(runs_.Release(NPY_INT64, {rows}));
      nb::object step_array = steps_.Release(NPY_INT64, {rows});
      MakeReadOnly(run_array);
      MakeReadOnly(step_array);
      out["run"] = run_array;
      out["step"] = step_array;
    }
    MakeReadOnly(value_array);
    out["value"] = value_array;
    return out;
  }

 private:
  // Bytes of one record's value (0 for values that are Python objects).
  static size_t RecordBytes(const std::string& name, const SeriesInfo& info, bool fixed) {
    size_t bytes = fixed ? DTypeSize(info.dtype) : 0;
    for (int64_t d : info.shape) {
      if (d < 0 || (d > 0 && bytes > SIZE_MAX / static_cast<size_t>(d))) {
        Check(Status::Corruption("series '" + name + "': its record shape is too large"));
      }
      bytes *= static_cast<size_t>(d);
    }
    return bytes;
  }

  bool Reserve(size_t rows) {
    return runs_.Reserve(rows, total_) && steps_.Reserve(rows, total_) &&
           values_.Reserve(rows, total_);
  }

  // The run column: the int64 one, or with string run ids among them an
  // object array of int and str.
  nb::object RunArray(nb::object ints) const {
    if (string_runs_.empty()) return ints;
    const auto* run_out = reinterpret_cast<const int64_t*>(ArrayData(ints));
    nb::object mixed = NewArray(NPY_OBJECT, {static_cast<npy_intp>(rows_)});
    auto** slots = reinterpret_cast<PyObject**>(ArrayData(mixed));
    size_t k = 0;
    for (size_t i = 0; i < rows_; ++i) {
      nb::object o;
      if (k < string_runs_.size() && string_runs_[k].first == i) {
        const std::string& s = string_runs_[k++].second;
        o = nb::steal(
            PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape"));
      } else {
        o = nb::steal(PyLong_FromLongLong(run_out[i]));
      }
      if (!o.is_valid()) throw nb::python_error();
      Py_XSETREF(slots[i], o.release().ptr());
    }
    return mixed;
  }

  const std::string& name_;
  const SeriesInfo& info_;
  const bool keys_, filtered_;
  const size_t total_;
  const bool fixed_;
  const size_t record_bytes_;
  GrowingColumn runs_, steps_, values_;
  std::vector<nb::object> objects_;  // variable-shape, string and bytes values
  std::vector<std::pair<size_t, std::string>> string_runs_;
  size_t rows_ = 0;
  bool out_of_memory_ = false;
};

}  // namespace

// Concatenates every batch of the series into one array per column. With the
// GIL released: planning, reading and decompressing blocks, and copying
// numeric columns. A series held in one block comes back as views of it.
nb::dict PyStore::Scan(const std::string& name, bool keys, nb::handle runs_obj,
                       std::optional<std::pair<int64_t, int64_t>> step_range) {
  const StoreUse use = Use();
  ScanOptions options{.keys = keys};
  if (!runs_obj.is_none()) options.runs = ToRunIds(runs_obj);
  if (step_range) options.steps = ScanOptions::StepRange{step_range->first, step_range->second};
  auto snap = store_->GetSnapshot();
  ScanSource source;
  ScanBatch batch;
  bool have = OpenScan(*snap, name, options, &source, &batch);
  const size_t total = source.total();
  const SeriesInfo& info = source.info;

  if (have && !IsVarLength(info.dtype) && !info.variable_shape && batch.count == total &&
      batch.run_is_string.empty()) {
    // One batch: views, no copy (zero-copy when the block is uncompressed
    // and its key columns are stored plainly).
    nb::dict out;
    const bool zc = batch.keys_zero_copy;
    if (keys) {
      out["run"] = MakeArrayView(Value(DType::kInt64, {static_cast<int64_t>(total)},
                                       reinterpret_cast<const char*>(batch.int_runs.data()),
                                       total * 8, batch.owner, zc));
      out["step"] = MakeArrayView(Value(DType::kInt64, {static_cast<int64_t>(total)},
                                        reinterpret_cast<const char*>(batch.steps.data()),
                                        total * 8, batch.owner, zc));
    }
    out["value"] = MakeArrayView(batch.values);
    return out;
  }

  ScanColumns columns(name, info, keys, source.filtered, total);
  Status error;
  if (columns.fixed()) {
    // Copy each batch and read the next one without the GIL.
    nb::gil_scoped_release nogil;
    while (have) {
      error = columns.Copy(batch);
      if (!error.ok() || columns.out_of_memory()) break;
      Result<bool> next = source.Next(&batch);
      if (!next.ok()) {
        error = next.status();
        break;
      }
      have = *next;
    }
  } else {
    while (have) {
      Check(columns.Copy(batch));
      if (columns.out_of_memory()) break;
      columns.AddObjects(batch);
      Result<bool> next = false;
      {
        nb::gil_scoped_release nogil;
        next = source.Next(&batch);
      }
      have = Unwrap(std::move(next));
    }
  }
  Check(error);
  if (columns.out_of_memory()) throw std::bad_alloc();  // nanobind raises MemoryError
  return columns.Release();
}

namespace {

// runstore.sync: SyncStaging without the GIL, its report as a dict.
nb::dict Sync(nb::handle staging_dir, nb::handle store, double wait_s, bool force,
              nb::handle progress) {
  SyncOptions o;
  o.wait_s = wait_s;
  o.force = force;
  PyProgress on_progress(progress);
  if (on_progress.enabled()) {
    o.progress = [&](size_t done, size_t staged, uint64_t bytes) {
      on_progress(done, staged, bytes);
    };
  }
  const std::string staging(Utf8(staging_dir.ptr(), "staging_dir"));
  const std::string path(Utf8(store.ptr(), "store"));
  SyncReport r;
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = SyncStaging(staging, path, o, &r);
  }
  on_progress.Rethrow();
  // A missing staging directory or store is a missing file, not a missing key.
  if (s.code() == StatusCode::kNotFound) Throw(PyExc_FileNotFoundError, s.message());
  Check(s);
  nb::dict d;
  auto names = [](const std::vector<std::string>& v) {
    nb::list l;
    for (const std::string& n : v) l.append(MessageText(n));
    return l;
  };
  d["shipped"] = names(r.shipped);
  d["already_published"] = names(r.already_published);
  d["skipped"] = names(r.skipped);
  d["cleaned"] = names(r.cleaned);
  d["damaged_leases"] = names(r.damaged_leases);
  d["bytes_shipped"] = r.bytes_shipped;
  return d;
}

}  // namespace

void BindStore(nb::module_& m) {
  m.def(
      "segment_budget",
      [](std::optional<size_t> mappings, std::optional<size_t> files) {
        SegmentBudget b = GetSegmentBudget();
        if (mappings || files) {
          b.mappings = mappings.value_or(b.mappings);
          b.files = files.value_or(b.files);
          Check(SetSegmentBudget(b));
        }
        return nb::make_tuple(b.mappings, b.files);
      },
      "mappings"_a = nb::none(), "files"_a = nb::none(),
      nb::sig("def segment_budget(mappings: int | None = None, files: int | None = None) -> "
              "tuple[int, int]"),
      "GetSegmentBudget / SetSegmentBudget (runstore/store.h): see runstore.segment_budget.");
  m.def("sync", &Sync, "staging_dir"_a, "store"_a, nb::kw_only(), "wait_s"_a = 5.0,
        "force"_a = false, "progress"_a = nb::none(),
        nb::sig("def sync(staging_dir: str, store: str, *, wait_s: float = 5.0, "
                "force: bool = False, progress: typing.Callable[[int, int, int], None] | None "
                "= None) -> dict[str, Any]"),
        "SyncStaging (runstore/sync.h): see runstore.sync.");
  nb::class_<PyLazyValue>(m, "LazyValue",
                          "The core of runstore.LazyArray: a numeric value whose bytes are "
                          "checked as they are read (the C++ runstore::LazyValue).")
      .def("raw", &PyLazyValue::raw,
           "The read-only numpy view of all of the value's bytes, NOT checked: read only what "
           "check_view or check_all has checked.")
      .def("check_view", &PyLazyValue::CheckView, "view"_a,
           "Checks the chunks of every byte the numpy array ``view`` (a view of raw()) reaches, "
           "each chunk once. CorruptionError naming the file and offset of a damaged one.")
      .def("check_all", &PyLazyValue::CheckAll, "Checks every chunk.")
      .def_prop_ro("all_checked", &PyLazyValue::all_checked,
                   "Whether every byte has been checked.");
  nb::class_<PyStore>(m, "Store", "A runstore store (the C++ runstore::Store); see runstore.Store.")
      .def(nb::init<const std::string&, bool, bool, bool>(), "path"_a, "read_only"_a = false,
           "create"_a = true, "skip_damaged"_a = false,
           "Opens the store at ``path``; creates it when missing if ``create`` and not "
           "``read_only``. With ``skip_damaged``, segments that cannot be read are left out "
           "and listed by damaged_segments(). "
           "FileNotFoundError if there is none, ValueError if the path is not a store, "
           "UnsupportedFormatError for a newer format version, CorruptionError or OSError for "
           "a damaged or unreadable segment (without skip_damaged), OSError for file-system "
           "errors.")
      .def_prop_ro("path", &PyStore::path, "The store's directory.")
      .def_prop_ro("read_only", &PyStore::read_only, "True if opened read-only.")
      .def_prop_ro("skip_damaged", &PyStore::skip_damaged,
                   "True if damaged segments are left out (opened with skip_damaged).")
      .def("writer", &PyStore::NewWriter, nb::kw_only(), "writer_id"_a = nb::none(),
           "buffer_bytes"_a = nb::none(), "codec"_a = nb::none(), "zstd_level"_a = nb::none(),
           "commit_every_s"_a = nb::none(), "commit_every_bytes"_a = nb::none(),
           "segment_bytes"_a = nb::none(), "allow_reserved"_a = false, "staging_dir"_a = nb::none(),
           "ship_every_s"_a = nb::none(), "record_time"_a = false, nb::rv_policy::take_ownership,
           nb::sig(
               "def writer(self, *, writer_id: str | None = None, buffer_bytes: int | None = None, "
               "codec: str | None = None, zstd_level: int | None = None, "
               "commit_every_s: float | None = None, commit_every_bytes: int | None = None, "
               "segment_bytes: int | None = None, allow_reserved: bool = False, "
               "staging_dir: str | None = None, ship_every_s: float | None = None, "
               "record_time: bool = False) -> Writer"),
           "Creates a Writer (see runstore.Store.writer). RuntimeError for a read-only store.")
      .def("refresh", &PyStore::Refresh,
           "Takes a new snapshot including every commit made since the last one.")
      .def(
          "release_pages",
          [](PyStore& self) {
            const StoreUse use = self.Use();
            auto snap = self.store()->GetSnapshot();
            nb::gil_scoped_release nogil;
            snap->ReleasePages();
          },
          "Drops the pages of the snapshot's mapped segments from resident memory; arrays "
          "already returned stay valid (their pages are read again when touched).")
      .def(
          "write_catalog",
          [](PyStore& self) {
            const StoreUse use = self.Use();
            std::optional<Result<uint64_t>> r;
            {
              nb::gil_scoped_release nogil;
              r.emplace(self.store()->WriteCatalog());
            }
            return Unwrap(std::move(*r));
          },
          "Writes the store's catalog; returns the number of sealed segments in it.")
      .def("names", &PyStore::Names, "include_reserved"_a = false,
           "Names of the series with visible records, sorted.")
      .def("runs", &PyStore::Runs,
           "Every run id with a visible record, sorted (ints first, then strs).")
      .def("series", &PyStore::Series, "include_reserved"_a = false, "counts"_a = true,
           "One dict per series: name, dtype, shape (None if variable), variable_shape, count, "
           "stored_bytes, first_logged. counts=False leaves count out and reads no block: "
           "every series with a block, also one whose records are all hidden.")
      .def("series_info", &PyStore::SeriesInfoOf, "name"_a,
           "The series() dict of one series; KeyError if absent.")
      .def("segments", &PyStore::Segments, "One dict per segment file of the snapshot.")
      .def("damaged_segments", &PyStore::DamagedSegments,
           "One dict {file, kind, message} per segment the snapshot left out as damaged "
           "(kind: 'Corruption' or 'IOError'); empty unless opened with skip_damaged.")
      .def(
          "compact",
          [](PyStore& self, bool dry_run, double older_than, uint64_t smaller_than,
             uint64_t memory_bytes, double retain, nb::handle progress, bool adopt_unsealed) {
            const StoreUse use = self.Use();
            CompactOptions o;
            PyProgress on_progress(progress);
            if (on_progress.enabled()) {
              o.progress = [&](uint64_t done, uint64_t total) { on_progress(done, total); };
            }
            o.dry_run = dry_run;
            o.adopt_unsealed = adopt_unsealed;
            o.older_than_s = older_than;
            o.retain_inputs_s = retain;
            o.smaller_than_bytes = smaller_than;
            o.memory_bytes = memory_bytes;
            CompactReport r;
            Status s;
            {
              nb::gil_scoped_release nogil;
              s = self.store()->Compact(o, &r);
            }
            on_progress.Rethrow();
            Check(s);
            nb::dict d;
            d["dry_run"] = r.dry_run;
            d["inputs"] = r.inputs;
            d["input_bytes"] = r.input_bytes;
            d["input_records"] = r.input_records;
            d["excluded"] = r.excluded;
            d["staged"] = r.staged;
            d["held_back"] = r.held_back;
            d["outputs"] = r.outputs;
            d["output_bytes"] = r.output_bytes;
            d["output_records"] = r.output_records;
            d["removed_leftovers"] = r.removed_leftovers;
            d["retained"] = r.retained;
            d["adopted"] = r.adopted;
            d["seconds"] = r.seconds;
            return d;
          },
          "dry_run"_a = false, "older_than"_a = 0.0, "smaller_than"_a = 0,
          "memory_bytes"_a = uint64_t{256} << 20, "retain"_a = CompactOptions().retain_inputs_s,
          "progress"_a = nb::none(), "adopt_unsealed"_a = false,
          "Store::Compact: merges small sealed segments into few sorted ones; returns the "
          "report as a dict (see runstore.Store.compact).")
      .def("verify_all", &PyStore::VerifyAll, "progress"_a = nb::none(),
           "Reads every block of every segment and checks every checksum, continuing past "
           "problems: {segments, blocks_checked, bytes_checked, problems}, where problems "
           "lists (kind, message) for every damaged segment left out and every bad block.")
      .def("get", &PyStore::Get, "run"_a.none(), "name"_a, "step"_a.none() = 0,
           nb::sig("def get(self, run: int | str, name: str, step: int = 0) -> numpy.ndarray | str "
                   "| bytes"),
           "The value under (run, name, step): a read-only numpy array (0-d for scalars; a view of "
           "the "
           "mapped file when stored uncompressed), a str, or bytes. KeyError if there is none.")
      .def("get_lazy", &PyStore::GetLazy, "run"_a.none(), "name"_a, "step"_a.none() = 0,
           "The core of Store.array: a LazyValue of a numeric record. KeyError if there is none, "
           "TypeError for str and bytes series.")
      .def("scan", &PyStore::Scan, "name"_a, "keys"_a = true, "runs"_a = nb::none(),
           "steps"_a = nb::none(),
           "Every visible record of a series (of the runs in ``runs``, with a step in the "
           "inclusive (first, last) ``steps``, when given) as a dict of read-only numpy arrays "
           "'run', 'step', 'value', in storage order ('value' alone with keys=False). KeyError "
           "for an unknown series.")
      .def("scan_aligned", &PyStore::ScanAligned, "base"_a, "names"_a, "step"_a = 0,
           "ids"_a = false, "ordered"_a = false,
           "Series ``names`` at ``step`` (numbers of one shape, or scalar strings) placed on "
           "the runs of series ``base`` (its records at ``step``, one row each: in storage "
           "order, or with ordered=True in the order of its integer values, ties in storage "
           "order), with no Python object per record. A dict of 'columns', one dict per "
           "series of ``names``, in the rows' order: 'value' (str series: int32 codes into "
           "'categories', -1 where absent) and 'present'; the runs as stored, 'run' (int64, 0 "
           "for a str run), 'run_is_str', 'run_ends' and 'run_bytes' (the UTF-8 of str run k "
           "is run_bytes[run_ends[k-1]:run_ends[k]]), and with ordered=True 'order' (row i's "
           "run is the one stored at order[i]); with ids=True also 'ids', the rows' runs as "
           "int64 (all int) or objects. Records of runs the base lacks are left out. KeyError "
           "for an unknown series, ValueError for one it does not read.")
      .def("arrow_stream", &PyStore::ArrowStream, "name"_a, "runs"_a = nb::none(),
           "steps"_a = nb::none(), "batch_rows"_a = 65536,
           "Series ``name`` as an Arrow C stream in a PyCapsule named 'arrow_array_stream' "
           "(the Arrow PyCapsule interface): record batches of columns run, step, value of at "
           "most ``batch_rows`` records, made as they are pulled, of the runs ``runs`` and the "
           "inclusive (first, last) ``steps`` when given. KeyError for an unknown series.")
      .def("arrow_schema", &PyStore::ArrowSchemaOf, "name"_a,
           "The schema of arrow_stream(name), in a PyCapsule named 'arrow_schema'.")
      .def(
          "arrow_join", &PyStore::ArrowJoin, "base"_a, "columns"_a, "run_field"_a = "run",
          "step_field"_a = "step", "where_series"_a = "",
          "where_values"_a = std::vector<std::string>(), "where_fill"_a = nb::none(),
          "runs"_a = nb::none(), "steps"_a = nb::none(), "batch_rows"_a = 65536,
          "window_bytes"_a = uint64_t{64} << 20, "order_by_base_value"_a = false,
          "schema_only"_a = false,
          "Series joined on the keys (run, step) of series ``base``, as an Arrow C stream in a "
          "PyCapsule named 'arrow_array_stream' (with schema_only=True its schema, "
          "'arrow_schema'): "
          "the fields run_field and step_field (left out when empty), then a column per tuple "
          "(series, name, fill, empty_is_null, missing_dtype) of ``columns``, null where the "
          "series has no record at a row's key (or ``fill``, when not None). With "
          "``where_series``, only the rows whose value of it (``where_fill`` where it has none) is "
          "one of ``where_values``. With order_by_base_value, rows in the order of the base's "
          "(integer) values. KeyError for an unknown base, ValueError for a column or filter "
          "that does not fit its series.")
      .def("read_aligned", &PyStore::ReadAligned, "runs"_a, "names"_a, "step"_a = 0,
           "Series ``names`` at ``step``, as scan_aligned reads them, placed on the runs of the "
           "list ``runs`` (int or str, all different; row i is runs[i]): only the blocks whose "
           "run index may hold one of them are read. {'columns': ...} as scan_aligned gives "
           "them. KeyError for an unknown series, ValueError for one it does not read or for a "
           "run given twice.");
}

}  // namespace runstore::python
