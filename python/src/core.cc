// runstore._core: the compiled half of the runstore Python package. The
// package (python/runstore) is the public face; see its docstrings.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#define RUNSTORE_NUMPY_IMPORT
#include "bindings.h"
#include "convert.h"
#include "errors.h"
#include "numpy_api.h"
#include "runstore/store.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "runstore's C++ core (private: use the runstore package).";
  if (_import_array() < 0) throw nb::python_error();
  runstore::python::InitErrors(m);
  runstore::python::BindConvert(m);
  runstore::python::BindWriter(m);
  runstore::python::BindStore(m);
  runstore::python::BindExperimentId(m);
  runstore::python::BindEmaBatch(m);
  m.attr("FORMAT_VERSION") = runstore::kFormatVersion;
  nb::list dtypes;
  for (int d = 1; d <= 13; ++d) {
    dtypes.append(std::string(runstore::DTypeName(static_cast<runstore::DType>(d))));
  }
  m.attr("DTYPES") = nb::tuple(dtypes);
  m.attr("CODECS") = nb::make_tuple("none", "lz4", "zstd");
}
