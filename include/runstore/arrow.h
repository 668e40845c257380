// A series of a snapshot as an Arrow C stream (docs/query.md): record batches
// that any library speaking the Arrow C data interface takes without a copy
// (pyarrow, DuckDB, polars, Arrow C++, nanoarrow), produced as they are
// pulled, a bounded number of records at a time, so that a query over a store
// larger than memory runs in bounded memory.
//
// The structs are the Arrow C data interface's and C stream interface's ABI
// (https://arrow.apache.org/docs/format/CDataInterface.html), declared here
// under the guards the specification gives, so that no Arrow library is
// needed to build runstore or to use this header beside one.
#ifndef RUNSTORE_ARROW_H_
#define RUNSTORE_ARROW_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "runstore/reader.h"
#include "runstore/status.h"

extern "C" {

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif  // ARROW_C_DATA_INTERFACE

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};

#endif  // ARROW_C_STREAM_INTERFACE

}  // extern "C"

namespace runstore {

struct ArrowStreamOptions {
  // The records of these runs, and of steps in this range, only: the scan's
  // filters (ScanOptions), which read only the blocks that may hold them.
  std::optional<RunSet> runs;
  std::optional<ScanOptions::StepRange> steps;
  // Records of a batch at most (a block of more is handed out in slices of
  // it, which share its memory). At least 1.
  int64_t batch_rows = 65536;
};

// Makes `*out` a stream of the visible records of series `name` of `snapshot`
// (which the stream keeps alive until it is released): one struct column
// per batch with the children
//
//   run    int64 when every record's run id is an integer, else utf8 (an
//          integer id written as its decimal text)
//   step   int64
//   value  the series' type: int8..uint64, float32, float64, bool, utf8
//          (string), binary (bytes); a fixed shape (d0, d1, ...) as a
//          fixed_size_list of d0*d1*... elements in C order, the shape in the
//          field's metadata ("runstore.shape": "[d0, d1]"); a variable shape
//          as a list of the elements, and a column `shape` (list of int64)
//          beside it
//
// in the order a scan returns them (segment by segment, block by block). No
// column has nulls. The buffers of run (integers), step and value point into
// the bytes the scan returned: the mapped segment file for a block stored
// uncompressed, the decompressed block otherwise, kept alive by each batch's
// release callback; what Arrow lays out otherwise is copied (bools into bits,
// strings and bytes into offsets and data, string run ids, and the elements
// of variable shapes). NotFound for an unknown series, InvalidArgument for a
// batch_rows below 1. The scan starts at the first get_next: the schema alone
// reads no block. Errors met while reading (a damaged block) are the
// stream's: get_next returns EIO and get_last_error says what it was.
Status SeriesArrowStream(std::shared_ptr<const Snapshot> snapshot, std::string_view name,
                         const ArrowStreamOptions& options, ArrowArrayStream* out);

}  // namespace runstore

#endif  // RUNSTORE_ARROW_H_
