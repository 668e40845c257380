// Store.table (python/runstore/query): a series as an Arrow C stream handed to
// Python in a PyCapsule, as the Arrow PyCapsule interface names them
// ("arrow_array_stream", "arrow_schema"), for pyarrow, DuckDB, polars and
// pandas to take without runstore needing pyarrow. The batches are made by
// the core (include/runstore/arrow.h) as the consumer pulls them, without the
// GIL (a consumer may pull from threads of its own).
#include <cerrno>
#include <cstdlib>

#include "bindings.h"
#include "convert.h"
#include "errors.h"
#include "runstore/arrow.h"

namespace runstore::python {
namespace {

// The capsule owns the struct; a consumer that took the stream (or schema)
// moved it out and left `release` null.
void FreeStream(void* p) noexcept {
  auto* s = static_cast<ArrowArrayStream*>(p);
  if (s->release != nullptr) s->release(s);
  std::free(s);
}

void FreeSchema(void* p) noexcept {
  auto* s = static_cast<ArrowSchema*>(p);
  if (s->release != nullptr) s->release(s);
  std::free(s);
}

}  // namespace

ArrowStreamOptions PyStore::StreamOptions(nb::handle runs_obj,
                                          std::optional<std::pair<int64_t, int64_t>> steps,
                                          int64_t batch_rows) {
  ArrowStreamOptions options;
  if (!runs_obj.is_none()) {
    const python::Runs parsed = ParseRunList(runs_obj, "table");  // keeps the strs the refs borrow
    std::vector<RunId> ids;
    ids.reserve(parsed.refs.size());
    for (const RunRef& r : parsed.refs) ids.push_back(r.ToRunId());
    options.runs = RunSet(std::move(ids));
  }
  if (steps) options.steps = ScanOptions::StepRange{steps->first, steps->second};
  options.batch_rows = batch_rows;
  return options;
}

nb::object PyStore::ArrowStream(const std::string& name, nb::handle runs,
                                std::optional<std::pair<int64_t, int64_t>> steps,
                                int64_t batch_rows) {
  const StoreUse use = Use();
  const ArrowStreamOptions options = StreamOptions(runs, steps, batch_rows);
  auto* stream = static_cast<ArrowArrayStream*>(std::calloc(1, sizeof(ArrowArrayStream)));
  if (stream == nullptr) throw std::bad_alloc();
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = SeriesArrowStream(store_->GetSnapshot(), name, options, stream);
  }
  if (!s.ok()) {
    std::free(stream);
    ThrowStatus(s);
  }
  return nb::capsule(stream, "arrow_array_stream", FreeStream);
}

nb::object PyStore::ArrowSchemaOf(const std::string& name) {
  const StoreUse use = Use();
  ArrowArrayStream stream{};
  Check(SeriesArrowStream(store_->GetSnapshot(), name, {}, &stream));
  auto* schema = static_cast<ArrowSchema*>(std::calloc(1, sizeof(ArrowSchema)));
  if (schema == nullptr) {
    stream.release(&stream);
    throw std::bad_alloc();
  }
  const int rc = stream.get_schema(&stream, schema);
  stream.release(&stream);
  if (rc != 0) {
    std::free(schema);
    Throw(PyExc_RuntimeError, "the schema of series '" + name + "' could not be made");
  }
  return nb::capsule(schema, "arrow_schema", FreeSchema);
}

nb::object PyStore::ArrowJoin(const std::string& base, nb::list columns,
                              const std::string& run_field, const std::string& step_field,
                              const std::string& where_series,
                              const std::vector<std::string>& where_values,
                              std::optional<std::string> where_fill, nb::handle runs,
                              std::optional<std::pair<int64_t, int64_t>> steps, int64_t batch_rows,
                              uint64_t window_bytes, bool order_by_base_value, bool schema_only) {
  const StoreUse use = Use();
  runstore::ArrowJoin join;
  join.base = base;
  for (nb::handle item : columns) {
    auto t = nb::cast<nb::tuple>(item);
    if (t.size() != 5) Throw(PyExc_ValueError, "arrow_join: each column is a tuple of 5");
    ArrowJoinColumn c;
    c.series = nb::cast<std::string>(t[0]);
    c.name = nb::cast<std::string>(t[1]);
    nb::handle fill = t[2];
    if (PyBool_Check(fill.ptr())) {
      c.fill = int64_t{fill.ptr() == Py_True};
    } else if (PyLong_Check(fill.ptr())) {
      c.fill = nb::cast<int64_t>(fill);
    } else if (PyFloat_Check(fill.ptr())) {
      c.fill = nb::cast<double>(fill);
    } else if (PyUnicode_Check(fill.ptr())) {
      c.fill = nb::cast<std::string>(fill);
    } else if (!fill.is_none()) {
      Throw(PyExc_TypeError, "arrow_join: a fill is None, an int, a float or a str");
    }
    c.empty_is_null = nb::cast<bool>(t[3]);
    c.missing_dtype = ParseDTypeSpec(t[4]);
    join.columns.push_back(std::move(c));
  }
  join.run_field = run_field;
  join.step_field = step_field;
  join.where_series = where_series;
  join.where_values = where_values;
  join.where_fill = std::move(where_fill);
  join.stream = StreamOptions(runs, steps, batch_rows);
  join.window_bytes = window_bytes;
  join.order_by_base_value = order_by_base_value;
  auto* stream = static_cast<ArrowArrayStream*>(std::calloc(1, sizeof(ArrowArrayStream)));
  if (stream == nullptr) throw std::bad_alloc();
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = JoinedArrowStream(store_->GetSnapshot(), join, stream);
  }
  if (!s.ok()) {
    std::free(stream);
    ThrowStatus(s);
  }
  if (!schema_only) return nb::capsule(stream, "arrow_array_stream", FreeStream);
  auto* schema = static_cast<ArrowSchema*>(std::calloc(1, sizeof(ArrowSchema)));
  const int rc = schema == nullptr ? ENOMEM : stream->get_schema(stream, schema);
  FreeStream(stream);
  if (rc != 0) {
    std::free(schema);
    Throw(PyExc_RuntimeError, "the schema of the join on series '" + base + "' could not be made");
  }
  return nb::capsule(schema, "arrow_schema", FreeSchema);
}

}  // namespace runstore::python
