// numpy_api.h: the numpy C API for the binding's translation units.
//
// core.cc defines RUNSTORE_NUMPY_IMPORT before including this header and
// imports the API table once at module init; every other file only uses it.
#ifndef RUNSTORE_PYTHON_NUMPY_API_H_
#define RUNSTORE_PYTHON_NUMPY_API_H_

#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL RUNSTORE_PyArray_API
#ifndef RUNSTORE_NUMPY_IMPORT
#define NO_IMPORT_ARRAY
#endif
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>

#if NPY_ABI_VERSION < 0x02000000
#error "runstore's binding builds against numpy 2 headers (it still runs with numpy 1.x)"
#endif

static_assert(sizeof(npy_intp) == sizeof(int64_t), "runstore needs a 64-bit platform");

#endif  // RUNSTORE_PYTHON_NUMPY_API_H_
