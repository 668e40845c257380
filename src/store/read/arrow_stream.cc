// SeriesArrowStream (include/runstore/arrow.h, docs/query.md): a series'
// scan handed out as Arrow record batches through the C stream interface.
//
// Each batch is a struct array whose children point at the scan's own bytes
// (ScanBatch: the mapped segment, or the decompressed block) where Arrow lays
// them out as they are (integers, floats, fixed shapes), kept alive by the
// batch's private data until its release callback runs; what Arrow lays out
// otherwise (bools as bits, strings and bytes as offsets and data, string run
// ids, variable shapes) is copied into buffers the batch owns.
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "runstore/arrow.h"
#include "store/read/arrow_arrays.h"
#include "store/read/snapshot.h"

namespace runstore {
namespace {

using read::SnapshotImpl;
using read::arrow::ArrayData;
using read::arrow::Elements;
using read::arrow::ExportStream;
using read::arrow::MakeArray;
using read::arrow::MakeSchema;
using read::arrow::NewSchema;
using read::arrow::Primitive;
using read::arrow::StreamSource;
using read::arrow::Strings;
using read::arrow::ValueFields;
using read::arrow::VariableShapeLists;
using read::arrow::WithChild;

// --- the stream --------------------------------------------------------------

class Stream final : public StreamSource {
 public:
  Stream(std::shared_ptr<const Snapshot> snap, SeriesInfo info, bool string_runs, ScanOptions scan,
         int64_t batch_rows)
      : snap_(std::move(snap)),
        info_(std::move(info)),
        string_runs_(string_runs),
        scan_(std::move(scan)),
        batch_rows_(batch_rows) {}

  int GetSchema(ArrowSchema* out) override {
    std::vector<ArrowSchema*> fields;
    fields.push_back(NewSchema(string_runs_ ? "U" : "l", "run"));
    fields.push_back(NewSchema("l", "step"));
    for (ArrowSchema* f : ValueFields(info_, "value", "shape")) fields.push_back(f);
    MakeSchema(out, "+s", "", std::move(fields));
    return 0;
  }

  int GetNext(ArrowArray* out) override {
    while (pos_ >= static_cast<int64_t>(batch_.count)) {
      batch_ = ScanBatch();
      pos_ = 0;
      // The pages of the mapped segments leave the resident set every
      // kReleaseBytes read (docs/query.md): the batches handed out stay
      // valid, read back from the page cache if touched again, and a query
      // over a series larger than memory does not make it all resident.
      if (read_bytes_ >= kReleaseBytes) {
        snap_->ReleasePages();
        read_bytes_ = 0;
      }
      // The scan starts at the first pull: a schema alone (a view registered,
      // a query planned) resolves no keys and reads no block.
      if (scanner_ == nullptr) {
        auto scanner = snap_->Scan(info_.name, scan_);
        if (!scanner.ok()) return Fail(scanner.status());
        scanner_ = std::move(scanner).value();
      }
      Result<bool> more = scanner_->Next(&batch_);
      if (!more.ok()) return Fail(more.status());
      if (!*more) {
        *out = ArrowArray{};  // the end: a released array
        return 0;
      }
    }
    const int64_t n = std::min<int64_t>(batch_rows_, static_cast<int64_t>(batch_.count) - pos_);
    Batch(pos_, n, out);
    pos_ += n;
    read_bytes_ += static_cast<uint64_t>(n) *
                   (16 + DTypeSize(info_.dtype) * static_cast<uint64_t>(Elements(info_.shape)));
    return 0;
  }

 private:
  // Records [o, o + n) of the current scan batch as one struct array.
  void Batch(int64_t o, int64_t n, ArrowArray* out) {
    const ScanBatch& b = batch_;
    auto* d = new ArrayData;
    d->buffers.push_back(nullptr);
    if (string_runs_) {
      d->children.push_back(Strings(n, [&](int64_t i) -> std::string_view {
        const RunRef r = b.run_ref(static_cast<size_t>(o + i));
        if (r.is_string) return r.s;
        scratch_ = std::to_string(r.i);
        return scratch_;
      }));
    } else {
      d->children.push_back(Primitive(
          DType::kInt64, reinterpret_cast<const char*>(b.int_runs.data() + o), n, b.owner));
    }
    d->children.push_back(
        Primitive(DType::kInt64, reinterpret_cast<const char*>(b.steps.data() + o), n, b.owner));
    if (info_.variable_shape) {
      VariableShape(o, n, d);
    } else if (IsVarLength(info_.dtype)) {
      d->children.push_back(
          Strings(n, [&](int64_t i) { return b.records[static_cast<size_t>(o + i)].str(); }));
    } else {
      const int64_t m = Elements(info_.shape);
      const size_t record = DTypeSize(info_.dtype) * static_cast<size_t>(m);
      const char* data = b.values.data() + static_cast<size_t>(o) * record;
      ArrowArray* values = Primitive(info_.dtype, data, n * m, b.values.owner());
      d->children.push_back(info_.shape.empty() ? values : WithChild(n, {nullptr}, values));
    }
    MakeArray(out, n, d);
  }

  // The records' elements as a large list, and their shapes as another.
  void VariableShape(int64_t o, int64_t n, ArrayData* d) {
    const ScanBatch& b = batch_;
    auto record = [&](int64_t i) -> const Value& { return b.records[static_cast<size_t>(o + i)]; };
    ArrowArray *values = nullptr, *shapes = nullptr;
    VariableShapeLists(
        info_.dtype, n,
        [&](int64_t i) { return std::string_view(record(i).data(), record(i).nbytes()); },
        [&](int64_t i) { return std::span<const int64_t>(record(i).shape()); }, nullptr, &values,
        &shapes);
    d->children.push_back(values);
    d->children.push_back(shapes);
  }

  const std::shared_ptr<const Snapshot> snap_;
  const SeriesInfo info_;
  const bool string_runs_;
  const ScanOptions scan_;
  std::unique_ptr<SeriesScanner> scanner_;  // made at the first pull
  const int64_t batch_rows_;
  static constexpr uint64_t kReleaseBytes = 64 << 20;
  ScanBatch batch_;
  int64_t pos_ = 0;
  uint64_t read_bytes_ = 0;  // since the pages were last released
  std::string scratch_;      // an integer run id as text, while a batch of strings is made
};

}  // namespace

Status SeriesArrowStream(std::shared_ptr<const Snapshot> snapshot, std::string_view name,
                         const ArrowStreamOptions& options, ArrowArrayStream* out) {
  if (options.batch_rows < 1) {
    return Status::InvalidArgument("batch_rows must be at least 1, got " +
                                   std::to_string(options.batch_rows));
  }
  const auto& impl = static_cast<const SnapshotImpl&>(*snapshot);
  RUNSTORE_ASSIGN_OR_RETURN(SeriesInfo info, impl.SeriesTypeOf(name));
  RUNSTORE_ASSIGN_OR_RETURN(const bool string_runs, impl.SeriesHasStringRuns(name));
  ScanOptions scan;
  scan.runs = options.runs;
  scan.steps = options.steps;
  ExportStream(std::make_unique<Stream>(std::move(snapshot), std::move(info), string_runs,
                                        std::move(scan), options.batch_rows),
               out);
  return Status::OK();
}

}  // namespace runstore
