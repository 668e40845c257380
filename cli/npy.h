// npy.h: the header of a NumPy .npy file (format version 1.0), written by
// hand so that `runstore get` can stream a value's bytes after it unchanged.
//
// Layout: "\x93NUMPY", 0x01 0x00, a little-endian uint16 header length, then
// an ASCII dict "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }"
// padded with spaces and ended by '\n' so that the data starts at a multiple
// of 64 bytes (numpy itself pads to 64 since 1.x; it only requires 16).
//
// dtypes: bool '|b1', int8 '|i1', uint8 '|u1', and '<i2' ... '<f8' for the
// wider types (the byte order of this machine, as the bytes are in memory).
// string values become a 0-d array of dtype '|S<n>' holding the UTF-8 bytes
// (np.load(f)[()].decode() gives the str; an empty string is '|S1' with one
// NUL byte). bytes values become a 1-d '|u1' array of their length, which
// keeps every byte, including trailing NULs ('|S' would drop those).
//
// Thread safety: stateless.
#ifndef RUNSTORE_CLI_NPY_H_
#define RUNSTORE_CLI_NPY_H_

#include <cstdint>
#include <span>
#include <string>

#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore::cli {

struct NpyLayout {
  std::string header;       // magic through the '\n', a multiple of 64 bytes
  size_t zero_padding = 0;  // NUL bytes to write after the value's bytes
};

// The descr for a numeric dtype ("<f8"); empty for string and bytes.
std::string NpyDescr(DType dtype);

// The layout for one value of `dtype` and `shape` holding `nbytes` bytes.
// InvalidArgument if nbytes does not match the shape.
Result<NpyLayout> PlanNpy(DType dtype, std::span<const int64_t> shape, size_t nbytes);

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_NPY_H_
