// Store.table (python/runstore/query): a series as an Arrow C stream handed to
// Python in a PyCapsule, as the Arrow PyCapsule interface names them
// ("arrow_array_stream", "arrow_schema"), for pyarrow, DuckDB, polars and
// pandas to take without runstore needing pyarrow. The batches are made by
// the core (include/runstore/arrow.h) as the consumer pulls them, without the
// GIL (a consumer may pull from threads of its own).
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

}  // namespace runstore::python
