// How a block header holds its key range and series name in memory. Every
// reader keeps the header of every block of the store (the segment indexes),
// so these are sized for that: a run id of up to 22 bytes (a default, hashed
// experiment id is 17) is held inline, and the blocks of one segment share
// one string per series name. With std::string for both, a block of a hashed
// run cost its reader three allocations and 150 bytes more.
#ifndef RUNSTORE_FORMAT_KEY_H_
#define RUNSTORE_FORMAT_KEY_H_

#include <compare>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runstore/types.h"

namespace runstore::format {

// A run id as a block header holds it: an integer, or a string held inline
// up to kInline bytes and on the heap beyond (up to kMaxRunIdLength). Orders
// as RunId does: integers first, then strings by their bytes.
class StoredRun {
 public:
  static constexpr size_t kInline = 22;

  StoredRun() { SetInt(0); }
  StoredRun(int64_t i) { SetInt(i); }              // NOLINT: a run id is an integer or a string
  StoredRun(std::string_view s) { SetString(s); }  // NOLINT
  StoredRun(const std::string& s) : StoredRun(std::string_view(s)) {}  // NOLINT
  StoredRun(const char* s) : StoredRun(std::string_view(s)) {}         // NOLINT
  StoredRun(const RunRef& r) : StoredRun() { Assign(r); }              // NOLINT
  StoredRun(const RunId& r) : StoredRun(RunRef(r)) {}                  // NOLINT
  StoredRun(const StoredRun& o) : StoredRun() { Assign(RunRef(o)); }
  StoredRun(StoredRun&& o) noexcept { Steal(&o); }
  StoredRun& operator=(const StoredRun& o) {
    if (this != &o) Assign(RunRef(o));
    return *this;
  }
  StoredRun& operator=(StoredRun&& o) noexcept {
    if (this != &o) {
      Free();
      Steal(&o);
    }
    return *this;
  }
  ~StoredRun() { Free(); }

  bool is_int() const { return kind() == kInt; }
  bool is_string() const { return kind() != kInt; }
  int64_t int_value() const { return Load<int64_t>(0); }
  std::string_view string_value() const {
    if (kind() == kInlineString) return std::string_view(bytes_, Load<uint8_t>(kSizeAt));
    return std::string_view(Load<const char*>(0), Load<uint32_t>(8));
  }
  // Whether a string is held inline (tests: no allocation of its own).
  bool is_inline() const { return kind() != kHeapString; }
  operator RunRef() const {  // NOLINT: a view, as RunId converts
    return is_int() ? RunRef(int_value()) : RunRef(string_value());
  }
  RunId ToRunId() const { return RunRef(*this).ToRunId(); }

  friend bool operator==(const StoredRun& a, const StoredRun& b) {
    if (a.is_int() != b.is_int()) return false;
    return a.is_int() ? a.int_value() == b.int_value() : a.string_value() == b.string_value();
  }
  friend std::strong_ordering operator<=>(const StoredRun& a, const StoredRun& b) {
    if (a.is_int() != b.is_int()) {
      return a.is_int() ? std::strong_ordering::less : std::strong_ordering::greater;
    }
    if (a.is_int()) return a.int_value() <=> b.int_value();
    const int c = a.string_value().compare(b.string_value());
    return c < 0 ? std::strong_ordering::less
                 : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
  }

 private:
  // bytes_: an integer, or an inline string and its size (byte 22), or a
  // heap string's pointer and size (bytes 0-7, 8-11); the kind in byte 23.
  enum : uint8_t { kInt = 0, kInlineString = 1, kHeapString = 2 };
  static constexpr size_t kSizeAt = 22, kKindAt = 23;

  template <typename T>
  T Load(size_t at) const {
    T v;
    std::memcpy(&v, bytes_ + at, sizeof(T));
    return v;
  }
  template <typename T>
  void Store(size_t at, T v) {
    std::memcpy(bytes_ + at, &v, sizeof(T));
  }
  uint8_t kind() const { return static_cast<uint8_t>(bytes_[kKindAt]); }
  void SetInt(int64_t i) {
    Store<int64_t>(0, i);
    bytes_[kKindAt] = static_cast<char>(kInt);
  }
  void Assign(const RunRef& r) {
    if (!r.is_string) {
      Free();
      SetInt(r.i);
    } else {
      // r may view this run's own heap string: copy before freeing it.
      StoredRun copy(r.s);
      Free();
      Steal(&copy);
    }
  }
  void SetString(std::string_view s) {
    if (s.size() <= kInline) {
      if (!s.empty()) std::memcpy(bytes_, s.data(), s.size());
      Store<uint8_t>(kSizeAt, static_cast<uint8_t>(s.size()));
      bytes_[kKindAt] = static_cast<char>(kInlineString);
    } else {
      char* p = new char[s.size()];
      std::memcpy(p, s.data(), s.size());
      Store<const char*>(0, p);
      Store<uint32_t>(8, static_cast<uint32_t>(s.size()));
      bytes_[kKindAt] = static_cast<char>(kHeapString);
    }
  }
  void Free() {
    if (kind() == kHeapString) delete[] Load<const char*>(0);
    SetInt(0);
  }
  void Steal(StoredRun* o) {
    std::memcpy(bytes_, o->bytes_, sizeof(bytes_));
    o->SetInt(0);
  }

  alignas(8) char bytes_[24];
};
static_assert(sizeof(StoredRun) == 24);

// A (run, step) key. Ordering: run first (ints before strings), then step.
struct Key {
  StoredRun run;
  int64_t step = 0;
  friend bool operator==(const Key&, const Key&) = default;
  friend std::strong_ordering operator<=>(const Key& a, const Key& b) {
    if (auto c = a.run <=> b.run; c != 0) return c;
    return a.step <=> b.step;
  }
};

// A series name as block headers hold it: the blocks of one segment index
// share one string per name (NameTable). Empty until assigned.
class SeriesName {
 public:
  SeriesName() = default;
  SeriesName(std::string s)  // NOLINT: a name is a string
      : s_(std::make_shared<const std::string>(std::move(s))) {}
  SeriesName(const char* s) : SeriesName(std::string(s)) {}  // NOLINT
  explicit SeriesName(std::shared_ptr<const std::string> s) : s_(std::move(s)) {}

  const std::string& str() const { return s_ ? *s_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT
  size_t size() const { return str().size(); }
  bool empty() const { return str().empty(); }
  friend bool operator==(const SeriesName& a, const SeriesName& b) { return a.str() == b.str(); }
  friend bool operator==(const SeriesName& a, std::string_view b) { return a.str() == b; }
  friend bool operator==(const SeriesName& a, const char* b) { return a.str() == b; }

 private:
  friend class NameTable;
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }
  std::shared_ptr<const std::string> s_;
};

// The names of one segment index's blocks, each held once.
class NameTable {
 public:
  SeriesName Intern(std::string_view name) {
    auto it = names_.find(name);
    if (it == names_.end()) {
      auto s = std::make_shared<const std::string>(name);
      it = names_.emplace(std::string_view(*s), std::move(s)).first;
    }
    return SeriesName(it->second);
  }
  // Makes `name`'s string the table's for it, if the table has none.
  void Share(const SeriesName& name) {
    if (name.s_) names_.emplace(std::string_view(*name.s_), name.s_);
  }

 private:
  std::unordered_map<std::string_view, std::shared_ptr<const std::string>> names_;
};

}  // namespace runstore::format

#endif  // RUNSTORE_FORMAT_KEY_H_
