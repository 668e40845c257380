// The C API (include/runstore/runstore.h, docs/c_api.md) over the C++ one:
// handles that own C++ objects, each Status turned into a code and the
// calling thread's message, and no exception or C++ type across the
// boundary. A front end, like the CLI and the Python binding: it includes
// the public headers only.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "runstore/arrow.h"
#include "runstore/runstore.h"
#include "runstore/store.h"

#ifndef RUNSTORE_VERSION_STRING
#define RUNSTORE_VERSION_STRING "0.0.0"
#endif

struct runstore_store {
  std::unique_ptr<runstore::Store> store;
};
struct runstore_snapshot {
  std::shared_ptr<const runstore::Snapshot> snap;
  // Where runstore_series puts the infos it hands out (their strings must
  // live as long as the snapshot).
  mutable std::mutex mu;
  mutable std::vector<std::unique_ptr<runstore::SeriesInfo>> infos;
};
struct runstore_writer {
  std::unique_ptr<runstore::Writer> writer;
};
struct runstore_series_writer {
  runstore::Writer* writer;  // its runstore_writer's, which outlives it
  std::string name;
};
struct runstore_series_list {
  std::vector<runstore::SeriesInfo> infos;
};
struct runstore_run_list {
  std::vector<runstore::RunId> runs;
};
struct runstore_value {
  // Checked whole (runstore_get: no checker) or as it is read (runstore_get_lazy).
  runstore::LazyValue lazy;
  const runstore::Value& value() const { return lazy.value(); }
};
struct runstore_scanner {
  std::unique_ptr<runstore::SeriesScanner> scanner;
  size_t record_bytes = 0;
  runstore::ScanBatch batch;
  size_t at = 0;  // records of `batch` handed out
  bool done = false;
  // Runs of the records the last runstore_scanner_next read.
  std::vector<runstore::RunRef> runs;
};

namespace {

using runstore::Status;
using runstore::StatusCode;

// The calling thread's last failure. A success only lowers the flag (a
// trivially initialised thread_local, no guard), so that a call that succeeds
// costs no more than it must: the message is kept for the next failure.
// The flag is read and written by every call: the initial-exec model makes
// that one instruction (the library's few bytes of static TLS), where the
// default model of a shared library calls __tls_get_addr each time.
thread_local std::string last_error;
__attribute__((tls_model("initial-exec"))) thread_local bool failed = false;

runstore_code Code(StatusCode c) { return static_cast<runstore_code>(static_cast<int>(c)); }

runstore_code Fail(const Status& s) {
  last_error = s.ToString();
  failed = true;
  return Code(s.code());
}

runstore_code Fail(runstore_code code, std::string message) {
  last_error = std::move(message);
  failed = true;
  return code;
}

runstore_code Ok() {
  failed = false;
  return RUNSTORE_OK;
}

// Runs `f` (returning a runstore_code), turning what C++ throws into a code:
// nothing may unwind into C. Inlined into each call, so that a call's
// arguments are not gathered into a closure for it.
template <typename F>
[[gnu::always_inline]] inline runstore_code Guard(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Fail(RUNSTORE_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(RUNSTORE_IO_ERROR, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return Fail(RUNSTORE_IO_ERROR, "unexpected error");
  }
}

runstore_code NullArgument(const char* what) {
  return Fail(RUNSTORE_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

runstore::RunRef RunOf(const runstore_run& r) {
  if (r.is_string) return runstore::RunRef(std::string_view(r.str ? r.str : "", r.len));
  return runstore::RunRef(r.i);
}

runstore_run RunToC(const runstore::RunRef& r) {
  runstore_run out{};
  out.is_string = r.is_string ? 1 : 0;
  if (r.is_string) {
    out.str = r.s.data();
    out.len = r.s.size();
  } else {
    out.i = r.i;
  }
  return out;
}

// Whether `d` names a dtype (tested before the narrowing to the format's byte,
// so that 257 is not taken for 1).
bool ValidDType(int d) {
  return d > 0 && d <= UINT8_MAX && runstore::IsValidDType(static_cast<uint8_t>(d));
}

runstore_series_info InfoToC(const runstore::SeriesInfo& s) {
  runstore_series_info out{};
  out.name = s.name.c_str();
  out.dtype = static_cast<runstore_dtype>(s.dtype);
  out.variable_shape = s.variable_shape ? 1 : 0;
  out.rank = static_cast<int>(s.shape.size());
  out.shape = s.shape.empty() ? nullptr : s.shape.data();
  out.count = s.count;
  return out;
}

// The C options as the C++ scan's.
runstore_code ScanOptionsOf(const runstore_scan_options* o, runstore::ScanOptions* out) {
  if (o == nullptr) return RUNSTORE_OK;
  if (o->runs == nullptr && o->run_count > 0) return NullArgument("runstore_scan_options.runs");
  if (o->runs != nullptr) {
    std::vector<runstore::RunId> runs;
    runs.reserve(o->run_count);
    for (size_t i = 0; i < o->run_count; ++i) runs.push_back(RunOf(o->runs[i]).ToRunId());
    out->runs.emplace(std::move(runs));
  }
  if (o->has_steps) {
    if (o->first_step > o->last_step) {
      return Fail(RUNSTORE_INVALID_ARGUMENT,
                  "runstore_scan_options: first_step " + std::to_string(o->first_step) +
                      " is past last_step " + std::to_string(o->last_step));
    }
    out->steps = runstore::ScanOptions::StepRange{o->first_step, o->last_step};
  }
  return RUNSTORE_OK;
}

// The info of series `name` of `snapshot`, the arguments checked.
runstore_code InfoOf(const runstore_snapshot* snapshot, const char* name,
                     runstore::SeriesInfo* info) {
  if (snapshot == nullptr) return NullArgument("snapshot");
  if (name == nullptr) return NullArgument("name");
  auto r = snapshot->snap->GetSeriesInfo(name);
  if (!r.ok()) return Fail(r.status());
  *info = std::move(r).value();
  return RUNSTORE_OK;
}

// A function that makes a handle H of what `read` returns from the
// snapshot (a Result): *out is NULL unless it succeeds.
template <typename H, typename Read>
runstore_code MakeHandle(H** out, const runstore_snapshot* snapshot, Read&& read) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    if (snapshot == nullptr) return NullArgument("snapshot");
    auto r = read(*snapshot->snap);
    if (!r.ok()) return Fail(r.status());
    *out = new H{std::move(r).value()};
    return Ok();
  });
}

// The arguments an append of function `fn` checks: `data` (named `data_name`)
// holds `nbytes` of `dtype` over `rank` dimensions at `shape`. A batch
// (`batch`) takes numbers only, and its values have one dimension more than
// a record.
runstore_code CheckAppend(const char* fn, const runstore_writer* writer, const char* name,
                          const char* data_name, const void* data, size_t nbytes,
                          runstore_dtype dtype, const int64_t* shape, int rank, bool batch) {
  if (writer == nullptr) return NullArgument("writer");
  if (name == nullptr) return NullArgument("name");
  if (data == nullptr && nbytes > 0) return NullArgument(data_name);
  if (!ValidDType(dtype)) {
    return Fail(RUNSTORE_INVALID_ARGUMENT, std::string(fn) + ": dtype " +
                                               std::to_string(static_cast<int>(dtype)) +
                                               " is not a runstore_dtype");
  }
  if (batch && runstore::IsVarLength(static_cast<runstore::DType>(dtype))) {
    return Fail(RUNSTORE_INVALID_ARGUMENT,
                std::string(fn) + ": dtype " + std::to_string(static_cast<int>(dtype)) +
                    " is not a number type (strings and bytes are appended one by one)");
  }
  const int max_rank = batch ? runstore::kMaxRank - 1 : runstore::kMaxRank;
  if (rank < 0 || rank > max_rank || (rank > 0 && shape == nullptr)) {
    return Fail(
        RUNSTORE_INVALID_ARGUMENT,
        std::string(fn) + ": rank " + std::to_string(rank) +
            (rank > 0 && shape == nullptr ? " with a NULL shape"
                                          : " is not within 0.." + std::to_string(max_rank)));
  }
  return RUNSTORE_OK;
}

// A number a call, the loop's path: its dtype and shape are known, so the
// writer checks the rest. This form has the name's length (a
// runstore_series_writer's); the one below measures it.
template <typename T>
[[gnu::always_inline]] inline runstore_code AppendNumber(runstore::Writer& writer,
                                                         const runstore::RunRef& run,
                                                         std::string_view name, int64_t step,
                                                         T value) {
  return Guard([&] {
    Status s = writer.Append(run, name, step, value);
    return s.ok() ? Ok() : Fail(s);
  });
}
template <typename T>
[[gnu::always_inline]] inline runstore_code AppendNumber(runstore_writer* writer,
                                                         const runstore::RunRef& run,
                                                         const char* name, int64_t step, T value) {
  if (writer == nullptr) return NullArgument("writer");
  if (name == nullptr) return NullArgument("name");
  return AppendNumber(*writer->writer, run, name, step, value);
}

// runstore_append_batch and its int-run form: `count` records whose run i is
// run_of(i), appended by one AppendBatch.
template <typename RunOfIndex>
runstore_code AppendBatchOf(runstore_writer* writer, size_t count, RunOfIndex&& run_of,
                            const int64_t* steps, const char* name, runstore_dtype dtype,
                            const int64_t* shape, int rank, const void* values, size_t nbytes) {
  return Guard([&] {
    if (runstore_code c = CheckAppend("runstore_append_batch", writer, name, "values", values,
                                      nbytes, dtype, shape, rank, /*batch=*/true);
        c != RUNSTORE_OK) {
      return c;
    }
    if (count > 0 && steps == nullptr) return NullArgument("steps");
    std::vector<runstore::RunRef> run_refs;
    run_refs.reserve(count);
    for (size_t i = 0; i < count; ++i) run_refs.push_back(run_of(i));
    std::vector<int64_t> dims;
    dims.reserve(static_cast<size_t>(rank) + 1);
    dims.push_back(static_cast<int64_t>(count));
    dims.insert(dims.end(), shape, shape + rank);
    runstore::ValueRef v;
    v.dtype = static_cast<runstore::DType>(dtype);
    v.shape = dims;
    v.data = values != nullptr ? values : "";
    v.nbytes = nbytes;
    Status s =
        writer->writer->AppendBatch(run_refs, name, std::span<const int64_t>(steps, count), v);
    return s.ok() ? Ok() : Fail(s);
  });
}

// A snapshot handle of what `get` returns from the store: *out is NULL
// unless it succeeds.
template <typename Get>
runstore_code NewSnapshot(runstore_store* store, runstore_snapshot** out, Get&& get) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    if (store == nullptr) return NullArgument("store");
    auto snap = get(*store->store);
    if (!snap.ok()) return Fail(snap.status());
    auto* s = new runstore_snapshot;
    s->snap = std::move(snap).value();
    *out = s;
    return Ok();
  });
}

// Runs `f` on the writer's C++ writer.
template <typename F>
runstore_code OnWriter(runstore_writer* writer, F&& f) {
  return Guard([&] {
    if (writer == nullptr) return NullArgument("writer");
    Status s = f(*writer->writer);
    return s.ok() ? Ok() : Fail(s);
  });
}

}  // namespace

extern "C" {

int runstore_abi_version(void) { return RUNSTORE_C_ABI_VERSION; }

const char* runstore_version(void) { return RUNSTORE_VERSION_STRING; }

const char* runstore_last_error(void) { return failed ? last_error.c_str() : ""; }

const char* runstore_code_name(runstore_code code) {
  switch (code) {
    case RUNSTORE_OK:
      return "OK";
    case RUNSTORE_NOT_FOUND:
      return "NotFound";
    case RUNSTORE_CORRUPTION:
      return "Corruption";
    case RUNSTORE_IO_ERROR:
      return "IOError";
    case RUNSTORE_INVALID_ARGUMENT:
      return "InvalidArgument";
    case RUNSTORE_NOT_SUPPORTED:
      return "NotSupported";
    case RUNSTORE_ALREADY_EXISTS:
      return "AlreadyExists";
    case RUNSTORE_FAILED_PRECONDITION:
      return "FailedPrecondition";
    case RUNSTORE_RESOURCE_EXHAUSTED:
      return "ResourceExhausted";
    default:
      break;
  }
  return "Unknown";
}

size_t runstore_dtype_size(runstore_dtype dtype) {
  if (!ValidDType(dtype)) return 0;
  const auto d = static_cast<runstore::DType>(dtype);
  return runstore::IsVarLength(d) ? 0 : runstore::DTypeSize(d);
}

runstore_run runstore_run_string(const char* s) {
  runstore_run r{};
  r.is_string = 1;
  r.str = s;
  r.len = s ? std::strlen(s) : 0;
  return r;
}

// ---- stores ----

runstore_code runstore_open(const char* path, unsigned flags, runstore_store** out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    if (path == nullptr) return NullArgument("path");
    constexpr unsigned kKnown =
        RUNSTORE_OPEN_READ_ONLY | RUNSTORE_OPEN_NO_CREATE | RUNSTORE_OPEN_SKIP_DAMAGED;
    if (flags & ~kKnown) {
      return Fail(RUNSTORE_INVALID_ARGUMENT,
                  "runstore_open: unknown flags " + std::to_string(flags & ~kKnown));
    }
    runstore::StoreOptions o;
    o.read_only = flags & RUNSTORE_OPEN_READ_ONLY;
    o.create_if_missing = !(flags & RUNSTORE_OPEN_NO_CREATE) && !o.read_only;
    o.on_damaged = flags & RUNSTORE_OPEN_SKIP_DAMAGED ? runstore::OnDamaged::kSkip
                                                      : runstore::OnDamaged::kFail;
    auto store = runstore::Store::Open(path, o);
    if (!store.ok()) return Fail(store.status());
    *out = new runstore_store{std::move(store).value()};
    return Ok();
  });
}

void runstore_close(runstore_store* store) { delete store; }

runstore_code runstore_refresh(runstore_store* store, runstore_snapshot** out) {
  return NewSnapshot(store, out, [](runstore::Store& s) { return s.Refresh(); });
}

runstore_code runstore_snapshot_of(runstore_store* store, runstore_snapshot** out) {
  return NewSnapshot(store, out, [](runstore::Store& s) {
    return runstore::Result<std::shared_ptr<const runstore::Snapshot>>(s.GetSnapshot());
  });
}

void runstore_snapshot_release(runstore_snapshot* snapshot) { delete snapshot; }

// ---- writing ----

runstore_code runstore_writer_open(runstore_store* store, const char* writer_id,
                                   runstore_writer** out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    if (store == nullptr) return NullArgument("store");
    runstore::WriterOptions o;
    if (writer_id != nullptr) o.writer_id = writer_id;
    auto w = store->store->NewWriter(o);
    if (!w.ok()) return Fail(w.status());
    *out = new runstore_writer{std::move(w).value()};
    return Ok();
  });
}

runstore_code runstore_append(runstore_writer* writer, runstore_run run, const char* name,
                              int64_t step, runstore_dtype dtype, const int64_t* shape, int rank,
                              const void* data, size_t nbytes) {
  return Guard([&] {
    if (runstore_code c = CheckAppend("runstore_append", writer, name, "data", data, nbytes, dtype,
                                      shape, rank, /*batch=*/false);
        c != RUNSTORE_OK) {
      return c;
    }
    runstore::ValueRef v;
    v.dtype = static_cast<runstore::DType>(dtype);
    v.shape = std::span<const int64_t>(shape, static_cast<size_t>(rank));
    v.data = data != nullptr ? data : "";
    v.nbytes = nbytes;
    Status s = writer->writer->Append(RunOf(run), name, step, v);
    return s.ok() ? Ok() : Fail(s);
  });
}

runstore_code runstore_append_batch(runstore_writer* writer, const runstore_run* runs,
                                    const int64_t* steps, size_t count, const char* name,
                                    runstore_dtype dtype, const int64_t* shape, int rank,
                                    const void* values, size_t nbytes) {
  if (count > 0 && runs == nullptr) return NullArgument("runs");
  return AppendBatchOf(
      writer, count, [&](size_t i) { return RunOf(runs[i]); }, steps, name, dtype, shape, rank,
      values, nbytes);
}

runstore_code runstore_append_batch_int(runstore_writer* writer, const int64_t* runs,
                                        const int64_t* steps, size_t count, const char* name,
                                        runstore_dtype dtype, const int64_t* shape, int rank,
                                        const void* values, size_t nbytes) {
  if (count > 0 && runs == nullptr) return NullArgument("runs");
  return AppendBatchOf(
      writer, count, [&](size_t i) { return runstore::RunRef(runs[i]); }, steps, name, dtype, shape,
      rank, values, nbytes);
}

runstore_code runstore_append_f64(runstore_writer* writer, runstore_run run, const char* name,
                                  int64_t step, double value) {
  return AppendNumber(writer, RunOf(run), name, step, value);
}

runstore_code runstore_append_i64(runstore_writer* writer, runstore_run run, const char* name,
                                  int64_t step, int64_t value) {
  return AppendNumber(writer, RunOf(run), name, step, value);
}

runstore_code runstore_series_writer_open(runstore_writer* writer, const char* name,
                                          runstore_series_writer** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (writer == nullptr) return NullArgument("writer");
  if (name == nullptr) return NullArgument("name");
  return Guard([&] {
    *out = new runstore_series_writer{writer->writer.get(), name};
    return Ok();
  });
}

runstore_code runstore_series_writer_append_f64(runstore_series_writer* series, int64_t run,
                                                int64_t step, double value) {
  if (series == nullptr) return NullArgument("series");
  return AppendNumber(*series->writer, runstore::RunRef(run), series->name, step, value);
}

runstore_code runstore_series_writer_append_i64(runstore_series_writer* series, int64_t run,
                                                int64_t step, int64_t value) {
  if (series == nullptr) return NullArgument("series");
  return AppendNumber(*series->writer, runstore::RunRef(run), series->name, step, value);
}

void runstore_series_writer_release(runstore_series_writer* series) { delete series; }

runstore_code runstore_append_f64_int(runstore_writer* writer, int64_t run, const char* name,
                                      int64_t step, double value) {
  return AppendNumber(writer, runstore::RunRef(run), name, step, value);
}

runstore_code runstore_append_i64_int(runstore_writer* writer, int64_t run, const char* name,
                                      int64_t step, int64_t value) {
  return AppendNumber(writer, runstore::RunRef(run), name, step, value);
}

runstore_code runstore_append_string(runstore_writer* writer, runstore_run run, const char* name,
                                     int64_t step, const char* value) {
  if (value == nullptr) return NullArgument("value");
  return runstore_append(writer, run, name, step, RUNSTORE_STRING, nullptr, 0, value,
                         std::strlen(value));
}

runstore_code runstore_flush(runstore_writer* writer) {
  return OnWriter(writer, [](runstore::Writer& w) { return w.Flush(); });
}

runstore_code runstore_commit(runstore_writer* writer) {
  return OnWriter(writer, [](runstore::Writer& w) { return w.Commit(); });
}

runstore_code runstore_commit_async(runstore_writer* writer, uint64_t* ticket) {
  if (ticket == nullptr) return NullArgument("ticket");
  return OnWriter(writer, [&](runstore::Writer& w) {
    auto t = w.CommitAsync();
    if (!t.ok()) return t.status();
    *ticket = *t;
    return Status::OK();
  });
}

runstore_code runstore_wait_for_commit(runstore_writer* writer, uint64_t ticket) {
  return OnWriter(writer, [&](runstore::Writer& w) { return w.WaitForCommit(ticket); });
}

uint64_t runstore_durable_ticket(const runstore_writer* writer) {
  return writer == nullptr ? 0 : writer->writer->DurableTicket();
}

runstore_code runstore_resume(runstore_writer* writer, runstore_run run, int64_t step) {
  return OnWriter(writer, [&](runstore::Writer& w) { return w.Resume(RunOf(run), step); });
}

runstore_code runstore_writer_close(runstore_writer* writer) {
  return OnWriter(writer, [](runstore::Writer& w) { return w.Close(); });
}

void runstore_writer_release(runstore_writer* writer) { delete writer; }

// ---- reading ----

runstore_code runstore_list_series(const runstore_snapshot* snapshot, runstore_series_list** out) {
  return MakeHandle(out, snapshot, [](const runstore::Snapshot& snap) {
    return snap.ListSeries(/*include_reserved=*/false);
  });
}

size_t runstore_series_list_size(const runstore_series_list* list) {
  return list == nullptr ? 0 : list->infos.size();
}

runstore_series_info runstore_series_list_at(const runstore_series_list* list, size_t i) {
  if (list == nullptr || i >= list->infos.size()) return runstore_series_info{};
  return InfoToC(list->infos[i]);
}

void runstore_series_list_release(runstore_series_list* list) { delete list; }

runstore_code runstore_series(const runstore_snapshot* snapshot, const char* name,
                              runstore_series_info* out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = runstore_series_info{};
    auto info = std::make_unique<runstore::SeriesInfo>();
    if (runstore_code c = InfoOf(snapshot, name, info.get()); c != RUNSTORE_OK) return c;
    std::lock_guard<std::mutex> lock(snapshot->mu);
    snapshot->infos.push_back(std::move(info));
    *out = InfoToC(*snapshot->infos.back());
    return Ok();
  });
}

runstore_code runstore_list_runs(const runstore_snapshot* snapshot, runstore_run_list** out) {
  return MakeHandle(out, snapshot, [](const runstore::Snapshot& snap) { return snap.ListRuns(); });
}

size_t runstore_run_list_size(const runstore_run_list* list) {
  return list == nullptr ? 0 : list->runs.size();
}

runstore_run runstore_run_list_at(const runstore_run_list* list, size_t i) {
  if (list == nullptr || i >= list->runs.size()) return runstore_run{};
  return RunToC(runstore::RunRef(list->runs[i]));
}

void runstore_run_list_release(runstore_run_list* list) { delete list; }

runstore_code runstore_get(const runstore_snapshot* snapshot, runstore_run run, const char* name,
                           int64_t step, runstore_value** out) {
  return MakeHandle(
      out, snapshot, [&](const runstore::Snapshot& snap) -> runstore::Result<runstore::LazyValue> {
        if (name == nullptr) return Status::InvalidArgument("name is NULL");
        RUNSTORE_ASSIGN_OR_RETURN(runstore::Value v, snap.Get(RunOf(run), name, step));
        return runstore::LazyValue(std::move(v), nullptr);
      });
}

runstore_code runstore_get_lazy(const runstore_snapshot* snapshot, runstore_run run,
                                const char* name, int64_t step, runstore_value** out) {
  return MakeHandle(out, snapshot,
                    [&](const runstore::Snapshot& snap) -> runstore::Result<runstore::LazyValue> {
                      if (name == nullptr) return Status::InvalidArgument("name is NULL");
                      return snap.GetLazy(RunOf(run), name, step);
                    });
}

runstore_code runstore_value_check(const runstore_value* value, uint64_t offset, uint64_t len) {
  return Guard([&] {
    if (value == nullptr) return NullArgument("value");
    const uint64_t n = value->value().nbytes();
    if (offset > n || len > n - offset) {
      return Fail(RUNSTORE_INVALID_ARGUMENT,
                  "runstore_value_check: bytes [" + std::to_string(offset) + ", +" +
                      std::to_string(len) + ") are past the value's " + std::to_string(n));
    }
    Status s = value->lazy.Check(offset, len);
    return s.ok() ? Ok() : Fail(s);
  });
}

runstore_dtype runstore_value_dtype(const runstore_value* value) {
  return value == nullptr ? static_cast<runstore_dtype>(0)
                          : static_cast<runstore_dtype>(value->value().dtype());
}

int runstore_value_rank(const runstore_value* value) {
  return value == nullptr ? 0 : value->value().rank();
}

const int64_t* runstore_value_shape(const runstore_value* value) {
  return value == nullptr || value->value().shape().empty() ? nullptr
                                                            : value->value().shape().data();
}

const void* runstore_value_data(const runstore_value* value) {
  return value == nullptr ? nullptr : value->value().data();
}

size_t runstore_value_nbytes(const runstore_value* value) {
  return value == nullptr ? 0 : value->value().nbytes();
}

int runstore_value_zero_copy(const runstore_value* value) {
  return value != nullptr && value->value().zero_copy() ? 1 : 0;
}

void runstore_value_release(runstore_value* value) { delete value; }

runstore_code runstore_scan(const runstore_snapshot* snapshot, const char* name,
                            const runstore_scan_options* options, runstore_scanner** out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    runstore::SeriesInfo info_value;
    if (runstore_code c = InfoOf(snapshot, name, &info_value); c != RUNSTORE_OK) return c;
    const runstore::SeriesInfo* info = &info_value;
    if (runstore::IsVarLength(info->dtype) || info->variable_shape) {
      return Fail(RUNSTORE_NOT_SUPPORTED,
                  "runstore_scan: series '" + std::string(name) + "' holds " +
                      (info->variable_shape ? std::string("arrays of variable shape")
                                            : std::string(runstore::DTypeName(info->dtype))) +
                      ", which a scan into fixed-size buffers cannot read: use runstore_get or "
                      "runstore_arrow_stream");
    }
    runstore::ScanOptions o;
    if (runstore_code c = ScanOptionsOf(options, &o); c != RUNSTORE_OK) return c;
    auto scanner = snapshot->snap->Scan(name, o);
    if (!scanner.ok()) return Fail(scanner.status());
    auto* s = new runstore_scanner;
    s->scanner = std::move(scanner).value();
    size_t elements = 1;
    for (int64_t d : info->shape) elements *= static_cast<size_t>(d);
    s->record_bytes = elements * runstore::DTypeSize(info->dtype);
    *out = s;
    return Ok();
  });
}

size_t runstore_scanner_record_bytes(const runstore_scanner* scanner) {
  return scanner == nullptr ? 0 : scanner->record_bytes;
}

runstore_code runstore_scanner_next(runstore_scanner* scanner, size_t capacity, int64_t* steps,
                                    void* values, size_t* n) {
  return Guard([&] {
    if (n == nullptr) return NullArgument("n");
    *n = 0;
    if (scanner == nullptr) return NullArgument("scanner");
    if (capacity == 0) {
      return Fail(RUNSTORE_INVALID_ARGUMENT,
                  "runstore_scanner_next: capacity 0 (0 records read means the end)");
    }
    scanner->runs.clear();
    while (!scanner->done && scanner->at == scanner->batch.count) {
      auto more = scanner->scanner->Next(&scanner->batch);
      if (!more.ok()) return Fail(more.status());
      scanner->at = 0;
      if (!*more) {
        scanner->done = true;
        scanner->batch = runstore::ScanBatch();
      }
    }
    const runstore::ScanBatch& b = scanner->batch;
    const size_t take = std::min(capacity, b.count - scanner->at);
    if (take == 0) return Ok();
    if (steps != nullptr) std::memcpy(steps, b.steps.data() + scanner->at, take * sizeof(int64_t));
    if (values != nullptr && scanner->record_bytes > 0) {
      std::memcpy(values, b.values.data() + scanner->at * scanner->record_bytes,
                  take * scanner->record_bytes);
    }
    scanner->runs.reserve(take);
    for (size_t i = 0; i < take; ++i) scanner->runs.push_back(b.run_ref(scanner->at + i));
    scanner->at += take;
    *n = take;
    return Ok();
  });
}

runstore_run runstore_scanner_run(const runstore_scanner* scanner, size_t i) {
  if (scanner == nullptr || i >= scanner->runs.size()) return runstore_run{};
  return RunToC(scanner->runs[i]);
}

void runstore_scanner_release(runstore_scanner* scanner) { delete scanner; }

runstore_code runstore_arrow_stream(const runstore_snapshot* snapshot, const char* name,
                                    const runstore_scan_options* options, int64_t batch_rows,
                                    struct ArrowArrayStream* out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("out");
    out->release = nullptr;
    if (snapshot == nullptr) return NullArgument("snapshot");
    if (name == nullptr) return NullArgument("name");
    if (batch_rows < 0) {
      return Fail(RUNSTORE_INVALID_ARGUMENT, "runstore_arrow_stream: batch_rows " +
                                                 std::to_string(batch_rows) + " is negative");
    }
    runstore::ScanOptions o;
    if (runstore_code c = ScanOptionsOf(options, &o); c != RUNSTORE_OK) return c;
    runstore::ArrowStreamOptions so;
    so.runs = std::move(o.runs);
    so.steps = o.steps;
    if (batch_rows > 0) so.batch_rows = batch_rows;
    Status s = runstore::SeriesArrowStream(snapshot->snap, name, so, out);
    return s.ok() ? Ok() : Fail(s);
  });
}

}  // extern "C"
