// The Arrow C data interface's structs as the streams of include/runstore/
// arrow.h build them: schemas and arrays whose private data owns their
// children and whatever their buffers view, and the stream whose callbacks
// hand them out. Shared by the stream of one series (arrow_stream.cc) and
// the stream of several series joined on their keys (arrow_join.cc).
#ifndef RUNSTORE_STORE_READ_ARROW_ARRAYS_H_
#define RUNSTORE_STORE_READ_ARROW_ARRAYS_H_

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/arrow.h"
#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore::read::arrow {

// --- schemas -----------------------------------------------------------------

// Arrow C metadata of one key and value.
std::string Metadata(std::string_view key, std::string_view value);

// `*out` a schema of `format` named `name`, owning its children (each made
// by NewSchema).
void MakeSchema(ArrowSchema* out, std::string format, std::string name,
                std::vector<ArrowSchema*> children = {}, std::string metadata = {},
                int64_t flags = 0);
ArrowSchema* NewSchema(std::string format, std::string name,
                       std::vector<ArrowSchema*> children = {}, std::string metadata = {},
                       int64_t flags = 0);

// Arrow's format string of a value element of `d`.
const char* ElementFormat(DType d);
int64_t Elements(const std::vector<int64_t>& shape);

// The fields of a value of series `info` named `name`: the value (its
// element type; a fixed_size_list for a fixed shape, with the shape in the
// metadata; a large list for a variable shape) and, for a variable shape, a
// second field `shape_name` (a large list of int64). `flags` on each.
std::vector<ArrowSchema*> ValueFields(const SeriesInfo& info, const std::string& name,
                                      const std::string& shape_name, int64_t flags = 0);

// --- arrays ------------------------------------------------------------------

struct ArrayData {
  std::vector<const void*> buffers;
  std::vector<ArrowArray*> children;  // each made with new, released and deleted with this
  std::vector<std::shared_ptr<const void>> keep;  // what the viewed bytes belong to
  std::vector<std::vector<int64_t>> owned;        // buffers of our own (8-byte aligned)
};

// `*out` an array of `length` records whose buffers and children `d` holds.
void MakeArray(ArrowArray* out, int64_t length, ArrayData* d);

// A zeroed buffer of `bytes` bytes that `d` owns.
char* Own(ArrayData* d, size_t bytes);

// A validity bitmap of `n` records, set where present[i] != 0, owned by `d`;
// null when every one is present. `*nulls` the count of those that are not.
const void* Validity(ArrayData* d, const uint8_t* present, int64_t n, int64_t* nulls);

// A primitive array (validity, values) of `n` elements of `dtype` at `data`:
// viewed where aligned (kept alive by `owner`), else copied; bools packed
// into bits. With `present`, null where present[i] == 0.
ArrowArray* Primitive(DType dtype, const char* data, int64_t n,
                      const std::shared_ptr<const void>& owner, const uint8_t* present = nullptr);

// A large utf8 or binary array of `n` strings, string(i) each (null where
// present[i] == 0, with `present`).
template <typename StringOf>
ArrowArray* Strings(int64_t n, StringOf string, const uint8_t* present = nullptr) {
  auto* d = new ArrayData;
  int64_t nulls = 0;
  const void* validity = present ? Validity(d, present, n, &nulls) : nullptr;
  auto* offsets = reinterpret_cast<int64_t*>(Own(d, sizeof(int64_t) * static_cast<size_t>(n + 1)));
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[i] = total;
    if (!present || present[i]) total += static_cast<int64_t>(string(i).size());
  }
  offsets[n] = total;
  char* data = Own(d, static_cast<size_t>(total));
  for (int64_t i = 0; i < n; ++i) {
    if (present && !present[i]) continue;
    const std::string_view s = string(i);
    if (!s.empty()) std::memcpy(data + offsets[i], s.data(), s.size());
  }
  d->buffers = {validity, offsets, data};
  auto* a = new ArrowArray;
  MakeArray(a, n, d);
  a->null_count = nulls;
  return a;
}

// An array with one child (a fixed_size_list or a large list) and `buffers`
// (validity first), made in `d` (a new ArrayData when null).
ArrowArray* WithChild(int64_t n, std::vector<const void*> buffers, ArrowArray* child,
                      ArrayData* d = nullptr, int64_t nulls = 0);

// The lists of a variable shape's records: the elements of record i are
// `element_bytes(i)` (a byte string of whole elements of `dtype`) and its
// dimensions dims(i) (a span of int64); `*values` and `*shapes` the two large
// lists (null where present[i] == 0, with `present`).
template <typename ElementsOf, typename DimsOf>
void VariableShapeLists(DType dtype, int64_t n, ElementsOf element_bytes, DimsOf dims,
                        const uint8_t* present, ArrowArray** values, ArrowArray** shapes) {
  const size_t size = DTypeSize(dtype);
  auto* elements = new ArrayData;
  auto* shape_data = new ArrayData;
  int64_t nulls = 0;
  const void* validity = present ? Validity(elements, present, n, &nulls) : nullptr;
  const void* shape_validity = present ? Validity(shape_data, present, n, &nulls) : nullptr;
  auto* value_offsets =
      reinterpret_cast<int64_t*>(Own(elements, sizeof(int64_t) * static_cast<size_t>(n + 1)));
  auto* shape_offsets =
      reinterpret_cast<int64_t*>(Own(shape_data, sizeof(int64_t) * static_cast<size_t>(n + 1)));
  int64_t total = 0, rank = 0;
  for (int64_t i = 0; i < n; ++i) {
    value_offsets[i] = total;
    shape_offsets[i] = rank;
    if (present && !present[i]) continue;
    total += static_cast<int64_t>(element_bytes(i).size() / size);
    rank += static_cast<int64_t>(dims(i).size());
  }
  value_offsets[n] = total;
  shape_offsets[n] = rank;
  auto flat = std::make_shared<std::vector<char>>(size * static_cast<size_t>(total));
  auto all_dims = std::make_shared<std::vector<int64_t>>();
  all_dims->reserve(static_cast<size_t>(rank));
  for (int64_t i = 0; i < n; ++i) {
    if (present && !present[i]) continue;
    const std::string_view e = element_bytes(i);
    if (!e.empty()) {
      std::memcpy(flat->data() + size * static_cast<size_t>(value_offsets[i]), e.data(), e.size());
    }
    const auto d = dims(i);
    all_dims->insert(all_dims->end(), d.begin(), d.end());
  }
  // The children view them (the lists hold only their offsets).
  ArrowArray* element_array = Primitive(dtype, flat->data(), total, flat);
  ArrowArray* dim_array =
      Primitive(DType::kInt64, reinterpret_cast<const char*>(all_dims->data()), rank, all_dims);
  *values = WithChild(n, {validity, value_offsets}, element_array, elements, nulls);
  *shapes = WithChild(n, {shape_validity, shape_offsets}, dim_array, shape_data, nulls);
}

// --- streams -----------------------------------------------------------------

// What a stream's callbacks call.
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  virtual int GetSchema(ArrowSchema* out) = 0;
  // The next batch into *out (a released array at the end); an errno value
  // on error, whose text LastError gives.
  virtual int GetNext(ArrowArray* out) = 0;
  const char* LastError() const { return error_.empty() ? nullptr : error_.c_str(); }

 protected:
  // Records `s` as the stream's error: EIO.
  int Fail(const Status& s) {
    error_ = s.ToString();
    return EIO;
  }

 private:
  std::string error_;
};

// `*out` the stream whose callbacks call `source`, which it owns.
void ExportStream(std::unique_ptr<StreamSource> source, ArrowArrayStream* out);

}  // namespace runstore::read::arrow

#endif  // RUNSTORE_STORE_READ_ARROW_ARRAYS_H_
