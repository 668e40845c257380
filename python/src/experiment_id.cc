// The default experiment id (runstore.experiment_id) of a row of plain
// parameters, computed in one C++ call: the text the package's canonical
// encoder writes (python/runstore/experiments/_design.py: compact JSON with sorted
// keys, floats in repr form, NaN and Infinity, ensure_ascii=False) and the
// first 16 hex digits of its SHA-256. A sweep's callback derives one id per
// experiment, and the encoder and hashlib took several microseconds of it.
//
// It writes only what it writes exactly as the encoder does: str keys, and
// values that are exactly bool, int, float, str or None, strings that encode
// as UTF-8. For anything else it returns None and the Python path (the
// encoder itself) takes the row, so the two can never disagree on an id;
// python/tests/test_experiments.py compares them on random rows.
#include "experiment_id.h"

#include <Python.h>
#include <nanobind/nanobind.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bindings.h"
#include "numpy_api.h"

namespace runstore::python {

// json's escaping for ensure_ascii=False: the quote, the backslash and the
// control characters; \u00XX in lowercase hex for those without a short form.
void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// Lone surrogates: Python's encode() refuses them, and the Python path then
// raises as it always did.
bool Utf8Bytes(PyObject* s, std::string_view* out) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) {
    PyErr_Clear();
    return false;
  }
  *out = {p, static_cast<size_t>(n)};
  return true;
}

namespace {

// float.__repr__ of a finite d (Python's format_float_short, 'r' mode with
// Py_DTSF_ADD_DOT_0) from the shortest digits that read back as d, which
// std::to_chars gives as dtoa's mode 0 does (the nearest of the shortest):
// positional for exponents -4 < e < 16, "1.5e+16" and "1e-05" otherwise.
bool AppendRepr(std::string* out, double d) {
  char buf[40];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  if (ec != std::errc()) return false;
  // buf is [-]D[.DDD]e(+|-)EE[E].
  const char* p = buf;
  if (*p == '-') out->push_back(*p++);
  char digits[24];
  int n = 0;
  digits[n++] = *p++;
  if (*p == '.') {
    for (++p; p < end && *p != 'e' && n < 24; ++p) digits[n++] = *p;
  }
  if (p + 2 >= end || *p != 'e') return false;
  const bool negative_exp = p[1] == '-';
  int exp = 0;
  if (std::from_chars(p + 2, end, exp).ec != std::errc()) return false;
  if (negative_exp) exp = -exp;
  const int decpt = exp + 1;  // where the decimal point goes among the digits
  if (decpt <= -4 || decpt > 16) {
    out->push_back(digits[0]);
    if (n > 1) {
      out->push_back('.');
      out->append(digits + 1, n - 1);
    }
    char e[8];
    const int len = std::snprintf(e, sizeof(e), "e%+.02d", exp);
    out->append(e, len);
  } else if (decpt <= 0) {
    out->append("0.");
    out->append(-decpt, '0');
    out->append(digits, n);
  } else if (decpt < n) {
    out->append(digits, decpt);
    out->push_back('.');
    out->append(digits + decpt, n - decpt);
  } else {
    out->append(digits, n);
    out->append(decpt - n, '0');
    out->append(".0");
  }
  return true;
}

}  // namespace

bool AppendJsonFloat(std::string* out, double d) {
  if (std::isnan(d)) {
    out->append("NaN");
  } else if (std::isinf(d)) {
    out->append(d > 0 ? "Infinity" : "-Infinity");
  } else if (const size_t mark = out->size(); !AppendRepr(out, d)) {
    out->resize(mark);
    // float.__repr__ itself (what AppendRepr writes, faster).
    char* r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
    if (r == nullptr) {
      PyErr_Clear();
      return false;
    }
    out->append(r);
    PyMem_Free(r);
  }
  return true;
}

void AppendJsonInt(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

namespace {

// The value as the encoder writes it; false if it is not a plain value.
bool AppendValue(std::string* out, PyObject* v) {
  if (v == Py_True) {
    out->append("true");
  } else if (v == Py_False) {
    out->append("false");
  } else if (v == Py_None) {
    out->append("null");
  } else if (PyFloat_CheckExact(v)) {
    return AppendJsonFloat(out, PyFloat_AS_DOUBLE(v));
  } else if (PyLong_CheckExact(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0) {
      PyObject* text = PyObject_Str(v);  // int.__repr__, any size
      if (text == nullptr) {
        PyErr_Clear();
        return false;
      }
      std::string_view t;
      const bool ok = Utf8Bytes(text, &t);
      if (ok) out->append(t);
      Py_DECREF(text);
      return ok;
    }
    AppendJsonInt(out, x);
  } else if (PyUnicode_CheckExact(v)) {
    std::string_view s;
    if (!Utf8Bytes(v, &s)) return false;
    AppendJsonString(out, s);
  } else {
    return false;
  }
  return true;
}

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

// OpenSSL's libcrypto.
bool HexId(std::string_view text, char out[17]) {
  thread_local std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  // Fetched once: EVP_sha256() would fetch the implementation again at every init.
  static EVP_MD* sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx || sha256 == nullptr || EVP_DigestInit_ex2(ctx.get(), sha256, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), text.data(), text.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), md, &len) != 1 || len < 8) {
    return false;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out[0] = 'e';
  for (int i = 0; i < 8; ++i) {
    out[1 + 2 * i] = kHex[md[i] >> 4];
    out[2 + 2 * i] = kHex[md[i] & 15];
  }
  return true;
}

namespace {

// The canonical text of a dict of plain parameters, or false.
bool CanonicalText(PyObject* params, std::string* text) {
  if (!PyDict_CheckExact(params)) return false;
  std::vector<std::pair<std::string_view, PyObject*>> items;
  items.reserve(static_cast<size_t>(PyDict_GET_SIZE(params)));
  Py_ssize_t pos = 0;
  PyObject* key;
  PyObject* value;
  while (PyDict_Next(params, &pos, &key, &value)) {
    std::string_view k;
    if (!PyUnicode_CheckExact(key) || !Utf8Bytes(key, &k)) return false;
    items.emplace_back(k, value);
  }
  // UTF-8 bytes sort as their code points: the order of sort_keys=True.
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  text->push_back('{');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) text->push_back(',');
    AppendJsonString(text, items[i].first);
    text->push_back(':');
    if (!AppendValue(text, items[i].second)) return false;
  }
  text->push_back('}');
  return true;
}

// One parameter column of a design, read by PlainIds: a C-contiguous numpy
// array of numbers or bools, or of objects (each a plain value).
struct PlainColumn {
  std::string key;  // "name": as the encoder writes it
  PyArrayObject* values = nullptr;
  const npy_bool* present = nullptr;
};

// The value at row i of a numeric column as the encoder writes what tolist()
// gives for it; false for an object that is not a plain value.
bool AppendCell(std::string* out, PyArrayObject* a, npy_intp i, bool gil) {
  // Without the GIL a float is written by AppendRepr alone (false where it
  // would need float.__repr__ itself, which it never has for a finite one).
  auto append_float = [&](double d) {
    if (gil || !std::isfinite(d)) return AppendJsonFloat(out, d);
    return AppendRepr(out, d);
  };
  const char* at = PyArray_BYTES(a) + i * PyArray_ITEMSIZE(a);
  auto get = [&]<typename T>(T* v) { std::memcpy(v, at, sizeof(T)); };
  switch (PyArray_TYPE(a)) {
    case NPY_BOOL: {
      npy_bool b;
      get(&b);
      out->append(b ? "true" : "false");
      return true;
    }
#define RUNSTORE_INT_CELL(NPY, T) \
  case NPY: {                     \
    T v;                          \
    get(&v);                      \
    AppendJsonInt(out, v);        \
    return true;                  \
  }
      RUNSTORE_INT_CELL(NPY_INT8, int8_t)
      RUNSTORE_INT_CELL(NPY_INT16, int16_t)
      RUNSTORE_INT_CELL(NPY_INT32, int32_t)
      RUNSTORE_INT_CELL(NPY_INT64, int64_t)
      RUNSTORE_INT_CELL(NPY_UINT8, uint8_t)
      RUNSTORE_INT_CELL(NPY_UINT16, uint16_t)
      RUNSTORE_INT_CELL(NPY_UINT32, uint32_t)
#undef RUNSTORE_INT_CELL
    case NPY_UINT64: {
      uint64_t v;
      get(&v);
      char buf[24];
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
      out->append(buf, end);
      return true;
    }
    case NPY_FLOAT32: {
      float v;
      get(&v);
      return append_float(static_cast<double>(v));
    }
    case NPY_FLOAT64: {
      double v;
      get(&v);
      return append_float(v);
    }
    case NPY_OBJECT: {
      PyObject* v;
      get(&v);
      return gil && v != nullptr && AppendValue(out, v);
    }
    default:
      return false;
  }
}

using Hex = std::array<char, 17>;

// The design's columns as PlainIds writes them (sorted by key, as
// sort_keys=True sorts: UTF-8 bytes sort as code points), or false for one
// it does not take: a name that is not a str, values or a mask that are not
// 1-d C-contiguous arrays of n entries.
bool PlainColumns(nb::list names, nb::list values, nb::list present, Py_ssize_t n,
                  std::vector<PlainColumn>* cols) {
  for (size_t c = 0; c < nb::len(names); ++c) {
    std::string_view name;
    PyObject* a = values[c].ptr();
    PyObject* p = present[c].ptr();
    if (!PyUnicode_CheckExact(names[c].ptr()) || !Utf8Bytes(names[c].ptr(), &name) ||
        !PyArray_Check(a) || !PyArray_Check(p) ||
        PyArray_NDIM(reinterpret_cast<PyArrayObject*>(a)) != 1 ||
        !PyArray_IS_C_CONTIGUOUS(reinterpret_cast<PyArrayObject*>(a)) ||
        PyArray_DIM(reinterpret_cast<PyArrayObject*>(a), 0) != n ||
        PyArray_TYPE(reinterpret_cast<PyArrayObject*>(p)) != NPY_BOOL ||
        !PyArray_IS_C_CONTIGUOUS(reinterpret_cast<PyArrayObject*>(p)) ||
        PyArray_DIM(reinterpret_cast<PyArrayObject*>(p), 0) != n) {
      return false;
    }
    PlainColumn col;
    AppendJsonString(&col.key, name);
    col.key.push_back(':');
    col.values = reinterpret_cast<PyArrayObject*>(a);
    col.present = static_cast<const npy_bool*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(p)));
    cols->push_back(std::move(col));
  }
  std::sort(cols->begin(), cols->end(),
            [](const PlainColumn& a, const PlainColumn& b) { return a.key < b.key; });
  return true;
}

// The ids of rows [lo, hi) into hex[lo..hi): false for a value it does not
// write. `gil`: whether the caller holds the GIL (a column of objects needs it).
bool DeriveIds(const std::vector<PlainColumn>& cols, Py_ssize_t lo, Py_ssize_t hi, bool gil,
               Hex* hex) {
  std::string text;
  for (Py_ssize_t i = lo; i < hi; ++i) {
    text.assign("{");
    bool any = false;
    for (const PlainColumn& col : cols) {
      if (!col.present[i]) continue;
      if (any) text.push_back(',');
      any = true;
      text.append(col.key);
      if (!AppendCell(&text, col.values, i, gil)) return false;
    }
    text.push_back('}');
    if (!HexId(text, hex[i].data())) return false;
  }
  return true;
}

// The first two rows of one id, (j, i), or None: an open-addressed table of
// row numbers, placed by the id's digits (a digest, so spread evenly).
nb::object FirstRepeat(const std::vector<Hex>& hex) {
  const size_t n = hex.size();
  size_t slots = 16;
  while (slots < 2 * n) slots *= 2;
  std::vector<int64_t> table(slots, -1);
  for (size_t i = 0; i < n; ++i) {
    const char* id = hex[i].data();
    uint64_t lo, hi;
    std::memcpy(&lo, id + 1, 8);
    std::memcpy(&hi, id + 9, 8);
    for (size_t k = (lo ^ (hi * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull >> 17;; ++k) {
      int64_t& slot = table[k & (slots - 1)];
      if (slot < 0) {
        slot = static_cast<int64_t>(i);
        break;
      }
      if (std::memcmp(hex[static_cast<size_t>(slot)].data(), id, 17) == 0) {
        return nb::make_tuple(slot, i);
      }
    }
  }
  return nb::none();
}

// The default ids of the rows of a design given as columns (names, values,
// present), and the first two rows with one id: what plain_experiment_id
// gives for each row's dict of present values, without making the dicts.
// None for a column it does not write exactly (the dicts then take the rows).
nb::object PlainIds(nb::list names, nb::list values, nb::list present, Py_ssize_t n) {
  std::vector<PlainColumn> cols;
  if (!PlainColumns(names, values, present, n, &cols)) return nb::none();
  std::vector<Hex> hex(static_cast<size_t>(n));
  // Columns of numbers are read without the GIL, by one thread per core on
  // large designs (the text and SHA-256 of a row take about a microsecond);
  // a column of objects needs the GIL throughout.
  const bool objects = std::any_of(cols.begin(), cols.end(), [](const PlainColumn& c) {
    return PyArray_TYPE(c.values) == NPY_OBJECT;
  });
  bool ok = true;
  if (objects || n < 100000) {
    ok = DeriveIds(cols, 0, n, true, hex.data());
  } else {
    nb::gil_scoped_release nogil;
    const auto threads =
        static_cast<Py_ssize_t>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
    std::vector<std::thread> pool;
    std::vector<char> done(static_cast<size_t>(threads), 0);
    for (Py_ssize_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        done[static_cast<size_t>(t)] =
            DeriveIds(cols, n * t / threads, n * (t + 1) / threads, false, hex.data());
      });
    }
    for (auto& th : pool) th.join();
    ok = std::all_of(done.begin(), done.end(), [](char d) { return d != 0; });
  }
  if (!ok) return nb::none();
  // The ids as one array of 17-byte strings (no Python object per id: the
  // caller writes them as runs and makes the frame's column of them).
  nb::object ids =
      nb::steal(PyArray_New(&PyArray_Type, 1, &n, NPY_STRING, nullptr, nullptr, 17, 0, nullptr));
  if (!ids.is_valid()) throw nb::python_error();
  char* out = static_cast<char*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(ids.ptr())));
  if (n > 0) std::memcpy(out, hex.data(), 17 * static_cast<size_t>(n));
  return nb::make_tuple(ids, FirstRepeat(hex));
}

}  // namespace

void BindExperimentId(nb::module_& m) {
  m.def("plain_experiment_ids", &PlainIds, nb::arg("names"), nb::arg("values"), nb::arg("present"),
        nb::arg("n"),
        "(ids, first) for a design of columns: ids, an array of dtype S17 of what "
        "plain_experiment_id gives for each row's dict of its present values (as UTF-8 bytes) "
        "(names[c] -> "
        "values[c][i] where present[c][i]), and the first two rows (j, i) with one id, or None. "
        "values: 1-d C-contiguous arrays of n numbers, bools or plain objects; None for any "
        "other column (the rows' dicts then take the design).");
  m.def(
      "plain_experiment_id",
      [](nb::handle params) -> nb::object {
        std::string text;
        char id[17];
        if (!CanonicalText(params.ptr(), &text) || !HexId(text, id)) return nb::none();
        return nb::steal(PyUnicode_FromStringAndSize(id, sizeof(id)));
      },
      nb::arg("params"),
      "runstore.experiment_id of a dict of str keys and plain bool, int, float, str or None "
      "values; None for any other dict (the Python path derives its id).");
  m.def(
      "plain_canonical_text",
      [](nb::handle params) -> nb::object {
        std::string text;
        if (!CanonicalText(params.ptr(), &text)) return nb::none();
        return nb::steal(PyUnicode_FromStringAndSize(text.data(), Py_ssize_t(text.size())));
      },
      nb::arg("params"), "The text plain_experiment_id hashes, or None (for tests).");
}

}  // namespace runstore::python
