// Series of a snapshot as Arrow C streams (docs/query.md): record batches
// that any library speaking the Arrow C data interface takes without a copy
// (pyarrow, DuckDB, polars, Arrow C++, nanoarrow), produced as they are
// pulled, a bounded number of records at a time, so that a query over a store
// larger than memory runs in bounded memory.
//
// The structs are the Arrow C data interface's and C stream interface's ABI
// (runstore/arrow_c_abi.h), so that no Arrow library is needed to build
// runstore or to use this header beside one.
#ifndef RUNSTORE_ARROW_H_
#define RUNSTORE_ARROW_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runstore/arrow_c_abi.h"
#include "runstore/reader.h"
#include "runstore/status.h"

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

// A column of a joined stream (JoinedArrowStream): the values of a series.
struct ArrowJoinColumn {
  std::string series;
  // The field's name; empty: the series' name.
  std::string name;
  // The value of a row that has no record of the series: null when unset,
  // else one of the column's type (an integer for integer series, a number
  // for float series, a text for strings).
  std::variant<std::monostate, int64_t, double, std::string> fill;
  // Of a string series: an empty string reads as no record (null, or the fill).
  bool empty_is_null = false;
  // The column's type when the snapshot has no record of the series (every
  // row then its fill, or null).
  DType missing_dtype = DType::kFloat64;
};

// What JoinedArrowStream joins, and how.
struct ArrowJoin {
  // The series whose visible records' keys (run, step) are the rows: a left
  // join on it, in the order a scan returns them. Put the densest first.
  std::string base;
  // The columns after the keys, in this order (the base among them or not).
  std::vector<ArrowJoinColumn> columns;
  // The names of the key fields; an empty name leaves that field out (the
  // experiments table names its runs "experiment" and has no step).
  std::string run_field = "run";
  std::string step_field = "step";
  // Only the rows whose value of the string series `where_series` (with
  // `where_fill` for a row without a record, when set) is one of
  // `where_values`; the other columns are read for those rows only.
  std::string where_series;
  std::vector<std::string> where_values;
  std::optional<std::string> where_fill;
  // Rows in the order of the base's values (an integer series, such as the
  // experiments' definition order, ~design/~row), ties in scan order, where
  // false leaves them in the base's scan order. A window is then the rows of
  // a range of values: the base is read twice to plan the ranges (its least
  // and greatest value, then how many fall in each of at most 4,096 equal
  // parts of that range), then once a window.
  bool order_by_base_value = false;
  // The runs, steps and batch size, as for SeriesArrowStream; filters on the
  // rows (the base's keys), which the other series are read for.
  ArrowStreamOptions stream;
  // Bytes of keys and placed values that a window of rows holds: the stream
  // reads the base a window at a time and each other series once a window
  // (only its blocks that may hold the window's runs and steps), so this
  // bounds its memory and sets how often a series is searched. At least 1 MiB.
  uint64_t window_bytes = 64ull << 20;
};

// Makes `*out` a stream of the rows of series `join.base` (keeps `snapshot`
// alive until it is released): one struct column per batch with the fields
//
//   run_field    int64, or utf8 where a run id of the base is a string
//   step_field   int64
//   each column  the series' type as SeriesArrowStream's `value` (a variable
//                shape as two fields, NAME and NAME.shape), nullable: null
//                where the series has no record at the row's key (or its fill)
//
// Each value is copied into the window it is placed in (a join cannot view
// the segments' bytes), and the batches view the window (an ordered join's
// batches gather their rows into buffers of their own). NotFound for an
// unknown base; InvalidArgument for a where_series that is not of strings,
// order_by_base_value over a base that is not of integers, a fill that is
// not a value of its series, two fields of one name, batch_rows below 1 or
// window_bytes below 1 MiB; read errors are the stream's (get_next returns
// EIO, get_last_error says what it was).
Status JoinedArrowStream(std::shared_ptr<const Snapshot> snapshot, const ArrowJoin& join,
                         ArrowArrayStream* out);

}  // namespace runstore

#endif  // RUNSTORE_ARROW_H_
