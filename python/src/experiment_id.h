// experiment_id.h: the pieces of the default experiment id (runstore.experiment_id)
// that C++ callers share: the canonical encoder's text of plain values
// (python/runstore/experiments/_design.py: compact JSON, sorted keys, floats in repr
// form, NaN and Infinity, ensure_ascii=False) and the id of such a text.
// experiment_id.cc derives the id of a dict; ema_batch.cc of an EMA
// experiment. Every function here needs the GIL.
#ifndef RUNSTORE_PYTHON_EXPERIMENT_ID_H_
#define RUNSTORE_PYTHON_EXPERIMENT_ID_H_

#include <Python.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace runstore::python {

// The UTF-8 bytes of a str, valid while it lives; false (and no Python error
// set) for a str that has no UTF-8 form (lone surrogates).
bool Utf8Bytes(PyObject* s, std::string_view* out);

// A str as json.dumps writes it with ensure_ascii=False: quoted, with the
// quote, the backslash and the control characters escaped.
void AppendJsonString(std::string* out, std::string_view utf8);

// A float as the encoder writes it: float.__repr__, or NaN, Infinity,
// -Infinity. False (and no Python error set) if Python could not format it.
bool AppendJsonFloat(std::string* out, double d);

// An int that fits int64, as int.__repr__ writes it.
void AppendJsonInt(std::string* out, int64_t v);

// "e" + the first 16 hex digits of the SHA-256 of `text` into out[0..16]
// (no terminating NUL); false if OpenSSL failed.
bool HexId(std::string_view text, char out[17]);

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_EXPERIMENT_ID_H_
