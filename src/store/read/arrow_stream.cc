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
#include "store/read/snapshot.h"

namespace runstore {
namespace {

using read::SnapshotImpl;

// --- schemas -----------------------------------------------------------------

struct SchemaData {
  std::string format, name, metadata;
  std::vector<ArrowSchema*> children;  // each made with new, released and deleted with this
};

// The release callback of a schema or an array whose private data is a
// `Data`: its children released and deleted, then the data.
template <typename Struct, typename Data>
void Release(Struct* s) {
  auto* d = static_cast<Data*>(s->private_data);
  for (Struct* c : d->children) {
    if (c->release != nullptr) c->release(c);
    delete c;
  }
  delete d;
  s->release = nullptr;
}

// The Arrow C metadata encoding of one key and value: a count of pairs, then
// each key and value as a length and bytes (int32, native byte order).
std::string Metadata(std::string_view key, std::string_view value) {
  std::string out;
  auto put = [&](int32_t n) { out.append(reinterpret_cast<const char*>(&n), sizeof(n)); };
  put(1);
  put(static_cast<int32_t>(key.size()));
  out.append(key);
  put(static_cast<int32_t>(value.size()));
  out.append(value);
  return out;
}

void MakeSchema(ArrowSchema* out, std::string format, std::string name,
                std::vector<ArrowSchema*> children = {}, std::string metadata = {}) {
  auto* d =
      new SchemaData{std::move(format), std::move(name), std::move(metadata), std::move(children)};
  *out = ArrowSchema{};
  out->format = d->format.c_str();
  out->name = d->name.c_str();
  out->metadata = d->metadata.empty() ? nullptr : d->metadata.data();
  out->n_children = static_cast<int64_t>(d->children.size());
  out->children = d->children.empty() ? nullptr : d->children.data();
  out->release = Release<ArrowSchema, SchemaData>;
  out->private_data = d;
}

ArrowSchema* NewSchema(std::string format, std::string name,
                       std::vector<ArrowSchema*> children = {}, std::string metadata = {}) {
  auto* s = new ArrowSchema;
  MakeSchema(s, std::move(format), std::move(name), std::move(children), std::move(metadata));
  return s;
}

const char* ElementFormat(DType d) {
  switch (d) {
    case DType::kBool:
      return "b";
    case DType::kInt8:
      return "c";
    case DType::kInt16:
      return "s";
    case DType::kInt32:
      return "i";
    case DType::kInt64:
      return "l";
    case DType::kUInt8:
      return "C";
    case DType::kUInt16:
      return "S";
    case DType::kUInt32:
      return "I";
    case DType::kUInt64:
      return "L";
    case DType::kFloat32:
      return "f";
    case DType::kFloat64:
      return "g";
    case DType::kString:
      return "U";  // large utf8: 64-bit offsets, whatever a batch's strings add up to
    case DType::kBytes:
      return "Z";  // large binary
  }
  return "g";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t m = 1;
  for (int64_t d : shape) m *= d;
  return m;
}

// --- arrays ------------------------------------------------------------------

struct ArrayData {
  std::vector<const void*> buffers;
  std::vector<ArrowArray*> children;  // each made with new, released and deleted with this
  std::vector<std::shared_ptr<const void>> keep;  // what the viewed bytes belong to
  std::vector<std::vector<int64_t>> owned;        // buffers of our own (8-byte aligned)
};

// An array of `length` records whose buffers and children `d` holds.
void MakeArray(ArrowArray* out, int64_t length, ArrayData* d) {
  *out = ArrowArray{};
  out->length = length;
  out->n_buffers = static_cast<int64_t>(d->buffers.size());
  out->buffers = d->buffers.data();
  out->n_children = static_cast<int64_t>(d->children.size());
  out->children = d->children.empty() ? nullptr : d->children.data();
  out->release = Release<ArrowArray, ArrayData>;
  out->private_data = d;
}

// A buffer of `bytes` bytes that `d` owns.
char* Own(ArrayData* d, size_t bytes) {
  d->owned.emplace_back((bytes + 7) / 8 + 1, 0);
  return reinterpret_cast<char*>(d->owned.back().data());
}

// The bytes [data, data + bytes) of an element type of `align` bytes, viewed
// where they are aligned for it (kept alive by `owner`), else copied.
const void* View(ArrayData* d, const char* data, size_t bytes, size_t align,
                 const std::shared_ptr<const void>& owner) {
  if (reinterpret_cast<uintptr_t>(data) % align == 0) {
    d->keep.push_back(owner);
    return data;
  }
  char* copy = Own(d, bytes);
  std::memcpy(copy, data, bytes);
  return copy;
}

// A primitive array (validity, values) of `n` elements of `dtype` at `data`.
ArrowArray* Primitive(DType dtype, const char* data, int64_t n,
                      const std::shared_ptr<const void>& owner) {
  auto* d = new ArrayData;
  d->buffers.push_back(nullptr);  // no nulls
  if (dtype == DType::kBool) {
    char* bits = Own(d, static_cast<size_t>((n + 7) / 8));
    for (int64_t i = 0; i < n; ++i) {
      if (data[i] != 0) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
    }
    d->buffers.push_back(bits);
  } else {
    const size_t size = DTypeSize(dtype);
    d->buffers.push_back(View(d, data, size * static_cast<size_t>(n), size, owner));
  }
  auto* a = new ArrowArray;
  MakeArray(a, n, d);
  return a;
}

// A large utf8 or binary array of `n` strings, string(i) each.
template <typename StringOf>
ArrowArray* Strings(int64_t n, StringOf string) {
  auto* d = new ArrayData;
  auto* offsets = reinterpret_cast<int64_t*>(Own(d, sizeof(int64_t) * static_cast<size_t>(n + 1)));
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[i] = total;
    total += static_cast<int64_t>(string(i).size());
  }
  offsets[n] = total;
  char* data = Own(d, static_cast<size_t>(total));
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view s = string(i);
    if (!s.empty()) std::memcpy(data + offsets[i], s.data(), s.size());
  }
  d->buffers = {nullptr, offsets, data};
  auto* a = new ArrowArray;
  MakeArray(a, n, d);
  return a;
}

// An array with one child (a fixed_size_list or a large list).
ArrowArray* WithChild(int64_t n, std::vector<const void*> buffers, ArrowArray* child,
                      ArrayData* d = nullptr) {
  if (d == nullptr) d = new ArrayData;
  d->buffers = std::move(buffers);
  d->children.push_back(child);
  auto* a = new ArrowArray;
  MakeArray(a, n, d);
  return a;
}

// --- the stream --------------------------------------------------------------

class Stream {
 public:
  Stream(std::shared_ptr<const Snapshot> snap, SeriesInfo info, bool string_runs, ScanOptions scan,
         int64_t batch_rows)
      : snap_(std::move(snap)),
        info_(std::move(info)),
        string_runs_(string_runs),
        scan_(std::move(scan)),
        batch_rows_(batch_rows) {}

  int GetSchema(ArrowSchema* out) {
    std::vector<ArrowSchema*> fields;
    fields.push_back(NewSchema(string_runs_ ? "U" : "l", "run"));
    fields.push_back(NewSchema("l", "step"));
    const std::string element = ElementFormat(info_.dtype);
    if (info_.variable_shape) {
      fields.push_back(NewSchema("+L", "value", {NewSchema(element, "item")}));
      fields.push_back(NewSchema("+L", "shape", {NewSchema("l", "item")}));
    } else if (!info_.shape.empty()) {
      fields.push_back(NewSchema("+w:" + std::to_string(Elements(info_.shape)), "value",
                                 {NewSchema(element, "item")},
                                 Metadata("runstore.shape", ShapeText(info_.shape))));
    } else {
      fields.push_back(NewSchema(element, "value"));
    }
    MakeSchema(out, "+s", "", std::move(fields));
    return 0;
  }

  int GetNext(ArrowArray* out) {
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

  const char* LastError() const { return error_.empty() ? nullptr : error_.c_str(); }

 private:
  int Fail(const Status& s) {
    error_ = s.ToString();
    return EIO;
  }

  // Records [o, o + n) of the current scan batch as one struct array.
  void Batch(int64_t o, int64_t n, ArrowArray* out) {
    const ScanBatch& b = batch_;
    auto* d = new ArrayData;
    d->buffers.push_back(nullptr);
    if (string_runs_) {
      d->children.push_back(Strings(n, [&](int64_t i) -> std::string_view {
        const size_t r = static_cast<size_t>(o + i);
        if (!b.run_is_string.empty() && b.run_is_string[r]) return b.string_runs[r];
        scratch_ = std::to_string(b.int_runs[r]);
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
    const size_t size = DTypeSize(info_.dtype);
    auto* elements = new ArrayData;
    auto* shapes = new ArrayData;
    auto* value_offsets =
        reinterpret_cast<int64_t*>(Own(elements, sizeof(int64_t) * static_cast<size_t>(n + 1)));
    auto* shape_offsets =
        reinterpret_cast<int64_t*>(Own(shapes, sizeof(int64_t) * static_cast<size_t>(n + 1)));
    int64_t total = 0, dims = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Value& v = b.records[static_cast<size_t>(o + i)];
      value_offsets[i] = total;
      shape_offsets[i] = dims;
      total += v.size();
      dims += v.rank();
    }
    value_offsets[n] = total;
    shape_offsets[n] = dims;
    std::vector<char> flat(size * static_cast<size_t>(total));
    std::vector<int64_t> all_dims;
    all_dims.reserve(static_cast<size_t>(dims));
    for (int64_t i = 0; i < n; ++i) {
      const Value& v = b.records[static_cast<size_t>(o + i)];
      if (v.nbytes())
        std::memcpy(flat.data() + size * static_cast<size_t>(value_offsets[i]), v.data(),
                    v.nbytes());
      all_dims.insert(all_dims.end(), v.shape().begin(), v.shape().end());
    }
    // The children view them (the lists hold only their offsets).
    auto keep_flat = std::make_shared<std::vector<char>>(std::move(flat));
    auto keep_dims = std::make_shared<std::vector<int64_t>>(std::move(all_dims));
    ArrowArray* element_array = Primitive(info_.dtype, keep_flat->data(), total, keep_flat);
    ArrowArray* dim_array =
        Primitive(DType::kInt64, reinterpret_cast<const char*>(keep_dims->data()), dims, keep_dims);
    d->children.push_back(WithChild(n, {nullptr, value_offsets}, element_array, elements));
    d->children.push_back(WithChild(n, {nullptr, shape_offsets}, dim_array, shapes));
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
  std::string error_;
  std::string scratch_;  // an integer run id as text, while a batch of strings is made
};

Stream* Of(ArrowArrayStream* s) { return static_cast<Stream*>(s->private_data); }

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
  auto* stream = new Stream(std::move(snapshot), std::move(info), string_runs, std::move(scan),
                            options.batch_rows);
  *out = ArrowArrayStream{};
  out->get_schema = [](ArrowArrayStream* s, ArrowSchema* schema) {
    return Of(s)->GetSchema(schema);
  };
  out->get_next = [](ArrowArrayStream* s, ArrowArray* array) { return Of(s)->GetNext(array); };
  out->get_last_error = [](ArrowArrayStream* s) { return Of(s)->LastError(); };
  out->release = [](ArrowArrayStream* s) {
    delete Of(s);
    s->release = nullptr;
  };
  out->private_data = stream;
  return Status::OK();
}

}  // namespace runstore
