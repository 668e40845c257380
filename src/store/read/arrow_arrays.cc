// The Arrow C structs of the streams (arrow_arrays.h).
#include "store/read/arrow_arrays.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace runstore::read::arrow {
namespace {

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

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace

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
                std::vector<ArrowSchema*> children, std::string metadata, int64_t flags) {
  auto* d =
      new SchemaData{std::move(format), std::move(name), std::move(metadata), std::move(children)};
  *out = ArrowSchema{};
  out->format = d->format.c_str();
  out->name = d->name.c_str();
  out->metadata = d->metadata.empty() ? nullptr : d->metadata.data();
  out->flags = flags;
  out->n_children = static_cast<int64_t>(d->children.size());
  out->children = d->children.empty() ? nullptr : d->children.data();
  out->release = Release<ArrowSchema, SchemaData>;
  out->private_data = d;
}

ArrowSchema* NewSchema(std::string format, std::string name, std::vector<ArrowSchema*> children,
                       std::string metadata, int64_t flags) {
  auto* s = new ArrowSchema;
  MakeSchema(s, std::move(format), std::move(name), std::move(children), std::move(metadata),
             flags);
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

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t m = 1;
  for (int64_t d : shape) m *= d;
  return m;
}

std::vector<ArrowSchema*> ValueFields(const SeriesInfo& info, const std::string& name,
                                      const std::string& shape_name, int64_t flags) {
  const std::string element = ElementFormat(info.dtype);
  if (info.variable_shape) {
    return {NewSchema("+L", name, {NewSchema(element, "item")}, {}, flags),
            NewSchema("+L", shape_name, {NewSchema("l", "item")}, {}, flags)};
  }
  if (!info.shape.empty()) {
    return {NewSchema("+w:" + std::to_string(Elements(info.shape)), name,
                      {NewSchema(element, "item")},
                      Metadata("runstore.shape", ShapeText(info.shape)), flags)};
  }
  return {NewSchema(element, name, {}, {}, flags)};
}

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

char* Own(ArrayData* d, size_t bytes) {
  d->owned.emplace_back((bytes + 7) / 8 + 1, 0);
  return reinterpret_cast<char*>(d->owned.back().data());
}

const void* Validity(ArrayData* d, const uint8_t* present, int64_t n, int64_t* nulls) {
  int64_t absent = 0;
  for (int64_t i = 0; i < n; ++i) absent += present[i] == 0;
  *nulls = absent;
  if (absent == 0) return nullptr;
  char* bits = Own(d, static_cast<size_t>((n + 7) / 8));
  for (int64_t i = 0; i < n; ++i) {
    if (present[i]) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
  }
  return bits;
}

namespace {

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

}  // namespace

ArrowArray* Primitive(DType dtype, const char* data, int64_t n,
                      const std::shared_ptr<const void>& owner, const uint8_t* present) {
  auto* d = new ArrayData;
  int64_t nulls = 0;
  d->buffers.push_back(present ? Validity(d, present, n, &nulls) : nullptr);
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
  a->null_count = nulls;
  return a;
}

ArrowArray* WithChild(int64_t n, std::vector<const void*> buffers, ArrowArray* child, ArrayData* d,
                      int64_t nulls) {
  if (d == nullptr) d = new ArrayData;
  d->buffers = std::move(buffers);
  d->children.push_back(child);
  auto* a = new ArrowArray;
  MakeArray(a, n, d);
  a->null_count = nulls;
  return a;
}

namespace {

StreamSource* Of(ArrowArrayStream* s) { return static_cast<StreamSource*>(s->private_data); }

}  // namespace

void ExportStream(std::unique_ptr<StreamSource> source, ArrowArrayStream* out) {
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
  out->private_data = source.release();
}

}  // namespace runstore::read::arrow
