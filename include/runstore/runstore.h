/* runstore.h: the C API of runstore (C11; also C++).
 *
 * For programs in C, and for the languages that call C (Rust, Julia, R, Go,
 * Fortran): open a store, write records with writers of their own, read
 * them back through snapshots, zero-copy where the bytes allow. It wraps the
 * C++ API (runstore/store.h) and follows its semantics exactly; see
 * docs/c_api.md for a walk through it and docs/design.md for what a commit,
 * a snapshot and a zero-copy view guarantee.
 *
 * Link with -lrunstore_c (pkg-config: runstore). The library exports the
 * runstore_* functions below and nothing else; C++ types never cross it.
 *
 * Conventions:
 *   - Handles are opaque and owned by the caller, who frees each with its
 *     _release function (a store: runstore_close); NULL is accepted and
 *     ignored. A writer is closed (runstore_writer_close) before it is
 *     released, to see what the close says.
 *   - Functions that can fail return a runstore_code: RUNSTORE_OK (0) or the
 *     kind of failure. The message of the calling thread's last failure is
 *     runstore_last_error() (valid until that thread's next call into this
 *     library); it names what was wrong (a path, a series, a limit).
 *   - Strings in are NUL-terminated UTF-8 unless a length is given; string
 *     run ids carry their length, so they may hold any bytes.
 *   - A snapshot and everything read from it stay valid until released, even
 *     after the store is closed or compacted: views of segment files keep
 *     their mappings alive.
 *   - Every function may be called from several threads at once, on one
 *     handle or several, except that a scanner belongs to one thread at a
 *     time. After fork(), open new handles in the child (the parent's
 *     writers refuse to write there, as in C++).
 */
#ifndef RUNSTORE_RUNSTORE_H_
#define RUNSTORE_RUNSTORE_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "runstore/arrow_c_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The declarations below are the library's exports, whatever visibility the
 * code that includes them is compiled with. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The version of this interface. Bumped when a declaration below changes
 * incompatibly; runstore_abi_version() is the library's, to compare at run
 * time with the header a program was compiled against. */
#define RUNSTORE_C_ABI_VERSION 1
int runstore_abi_version(void);
/* The library's version, "MAJOR.MINOR.PATCH". */
const char* runstore_version(void);

/* ---- errors --------------------------------------------------------------- */

typedef enum runstore_code {
  RUNSTORE_OK = 0,
  RUNSTORE_NOT_FOUND = 1,
  RUNSTORE_CORRUPTION = 2,
  RUNSTORE_IO_ERROR = 3,
  RUNSTORE_INVALID_ARGUMENT = 4,
  RUNSTORE_NOT_SUPPORTED = 5,
  RUNSTORE_ALREADY_EXISTS = 6,
  RUNSTORE_FAILED_PRECONDITION = 7,
  /* Out of descriptors, memory or mappings: nothing is wrong with the store,
   * and the same call may succeed with more of the resource. */
  RUNSTORE_RESOURCE_EXHAUSTED = 8,
  /* Not codes: every int is a value of the type (in C++ too), so that the
   * library takes any int given as one without undefined behaviour. */
  RUNSTORE_CODE_MIN_ = INT_MIN,
  RUNSTORE_CODE_MAX_ = INT_MAX
} runstore_code;

/* The calling thread's last failure: its message ("" when the last call
 * succeeded), and the name of a code ("NotFound"). */
const char* runstore_last_error(void);
const char* runstore_code_name(runstore_code code);

/* ---- values --------------------------------------------------------------- */

/* The type of a series' records (the numbers are the format's). */
typedef enum runstore_dtype {
  RUNSTORE_BOOL = 1, /* one byte, 0 or 1 */
  RUNSTORE_INT8 = 2,
  RUNSTORE_INT16 = 3,
  RUNSTORE_INT32 = 4,
  RUNSTORE_INT64 = 5,
  RUNSTORE_UINT8 = 6,
  RUNSTORE_UINT16 = 7,
  RUNSTORE_UINT32 = 8,
  RUNSTORE_UINT64 = 9,
  RUNSTORE_FLOAT32 = 10,
  RUNSTORE_FLOAT64 = 11,
  RUNSTORE_STRING = 12, /* UTF-8 text, one per record */
  RUNSTORE_BYTES = 13,  /* raw bytes, one per record */
  /* Not dtypes: every int is a value of the type (in C++ too), so that a
   * wrong one is refused (INVALID_ARGUMENT), not undefined behaviour. */
  RUNSTORE_DTYPE_MIN_ = INT_MIN,
  RUNSTORE_DTYPE_MAX_ = INT_MAX
} runstore_dtype;

/* Bytes per element (0 for strings and bytes). */
size_t runstore_dtype_size(runstore_dtype dtype);

/* A run id: an integer, or a string of `len` bytes at `str`. */
typedef struct runstore_run {
  int is_string;
  int64_t i;
  const char* str;
  size_t len;
} runstore_run;

static inline runstore_run runstore_run_int(int64_t i) {
  runstore_run r = {0, i, NULL, 0};
  return r;
}
/* `s` must outlive the call it is passed to (runstore copies what it keeps). */
runstore_run runstore_run_string(const char* s);

/* ---- stores --------------------------------------------------------------- */

typedef struct runstore_store runstore_store;
typedef struct runstore_snapshot runstore_snapshot;

/* Flags of runstore_open. */
#define RUNSTORE_OPEN_READ_ONLY 1u    /* never writes: no writers, no catalog */
#define RUNSTORE_OPEN_NO_CREATE 2u    /* NOT_FOUND where no store is */
#define RUNSTORE_OPEN_SKIP_DAMAGED 4u /* leave damaged segments out, listed */

/* Opens (creating, unless told not to) the store at `path`. */
runstore_code runstore_open(const char* path, unsigned flags, runstore_store** out);
/* Closes the store. Snapshots, values and writers made from it stay valid
 * until they are released (writers: closed) themselves. */
void runstore_close(runstore_store* store);

/* Reads what writers committed since the last refresh and returns the
 * store's new snapshot; runstore_snapshot_of returns the current one (as the
 * last refresh left it). Each is released with runstore_snapshot_release. */
runstore_code runstore_refresh(runstore_store* store, runstore_snapshot** out);
runstore_code runstore_snapshot_of(runstore_store* store, runstore_snapshot** out);
void runstore_snapshot_release(runstore_snapshot* snapshot);

/* ---- writing -------------------------------------------------------------- */

typedef struct runstore_writer runstore_writer;

/* A writer of its own segment files. `writer_id` NULL or "": one made from
 * the host, the process and randomness. */
runstore_code runstore_writer_open(runstore_store* store, const char* writer_id,
                                   runstore_writer** out);

/* One record: `data` holds `nbytes` bytes, the element of `dtype` repeated
 * over `shape` (`rank` dimensions; rank 0 and shape NULL: a scalar). Strings
 * and bytes are rank 0, `nbytes` long. The first record of a series fixes its
 * type and shape. Copied (or written) before the call returns. */
runstore_code runstore_append(runstore_writer* writer, runstore_run run, const char* name,
                              int64_t step, runstore_dtype dtype, const int64_t* shape, int rank,
                              const void* data, size_t nbytes);
/* `count` records of series `name` in one call: record i is runs[i] at
 * steps[i], its value the i-th of `values`, which holds `count` values of
 * `dtype` and `shape` (`rank` dimensions; a record's shape, not the batch's)
 * one after another, `nbytes` in all (numbers only: strings and bytes go one
 * by one). Every record is checked before any is appended: on
 * INVALID_ARGUMENT none was. The call a loop of appends costs least through. */
runstore_code runstore_append_batch(runstore_writer* writer, const runstore_run* runs,
                                    const int64_t* steps, size_t count, const char* name,
                                    runstore_dtype dtype, const int64_t* shape, int rank,
                                    const void* values, size_t nbytes);
/* The same with integer run ids, a column of them. */
runstore_code runstore_append_batch_int(runstore_writer* writer, const int64_t* runs,
                                        const int64_t* steps, size_t count, const char* name,
                                        runstore_dtype dtype, const int64_t* shape, int rank,
                                        const void* values, size_t nbytes);
runstore_code runstore_append_f64(runstore_writer* writer, runstore_run run, const char* name,
                                  int64_t step, double value);
runstore_code runstore_append_i64(runstore_writer* writer, runstore_run run, const char* name,
                                  int64_t step, int64_t value);
/* The same two with an integer run id, the loop's call: every argument goes
 * in a register (a runstore_run is 32 bytes, passed through memory). */
runstore_code runstore_append_f64_int(runstore_writer* writer, int64_t run, const char* name,
                                      int64_t step, double value);
runstore_code runstore_append_i64_int(runstore_writer* writer, int64_t run, const char* name,
                                      int64_t step, int64_t value);
/* The writer of one series, its name given once: what a loop that appends a
 * record a call to a series passes instead of the name, so that no call
 * measures it again. Integer runs, float64 or int64 values; the name and
 * each value are checked at each append as runstore_append_f64 checks them.
 * Valid until released, and never past the release of its writer (any
 * number of them per writer, used from any threads). */
typedef struct runstore_series_writer runstore_series_writer;
runstore_code runstore_series_writer_open(runstore_writer* writer, const char* name,
                                          runstore_series_writer** out);
runstore_code runstore_series_writer_append_f64(runstore_series_writer* series, int64_t run,
                                                int64_t step, double value);
runstore_code runstore_series_writer_append_i64(runstore_series_writer* series, int64_t run,
                                                int64_t step, int64_t value);
void runstore_series_writer_release(runstore_series_writer* series);
/* A UTF-8 string (NUL-terminated). */
runstore_code runstore_append_string(runstore_writer* writer, runstore_run run, const char* name,
                                     int64_t step, const char* value);

/* Visible to readers that refresh, safe from a crash of the process, durable
 * at the next commit. */
runstore_code runstore_flush(runstore_writer* writer);
/* Durable and visible when it returns. */
runstore_code runstore_commit(runstore_writer* writer);
/* Commits without waiting for the disk: *ticket is the commit's number, durable once
 * runstore_wait_for_commit(writer, ticket) returns OK or runstore_durable_ticket(writer)
 * reaches it. */
runstore_code runstore_commit_async(runstore_writer* writer, uint64_t* ticket);
runstore_code runstore_wait_for_commit(runstore_writer* writer, uint64_t ticket);
uint64_t runstore_durable_ticket(const runstore_writer* writer);
/* Marks `run` as resumed at `step` (after a preemption): its records at steps
 * >= step committed before this marker are hidden from readers. */
runstore_code runstore_resume(runstore_writer* writer, runstore_run run, int64_t step);
/* Commits what was appended and seals the segment. Every later call on the
 * writer but its release is FAILED_PRECONDITION. */
runstore_code runstore_writer_close(runstore_writer* writer);
/* Frees the writer; one not closed is closed first (its errors then lost:
 * close it to see them). */
void runstore_writer_release(runstore_writer* writer);

/* ---- reading -------------------------------------------------------------- */

/* A series: its name, type, shape of a record (`rank` dimensions at `shape`;
 * variable_shape: each record has its own) and visible records. */
typedef struct runstore_series_info {
  const char* name;
  runstore_dtype dtype;
  int variable_shape;
  int rank;
  const int64_t* shape;
  uint64_t count;
} runstore_series_info;

typedef struct runstore_series_list runstore_series_list;
/* The snapshot's series (not runstore's own '~' series), in name order. */
runstore_code runstore_list_series(const runstore_snapshot* snapshot, runstore_series_list** out);
size_t runstore_series_list_size(const runstore_series_list* list);
/* Entry i; its strings and shape live as long as the list. */
runstore_series_info runstore_series_list_at(const runstore_series_list* list, size_t i);
void runstore_series_list_release(runstore_series_list* list);
/* One series' info (NOT_FOUND when the snapshot has none of that name); its
 * strings live as long as the snapshot. */
runstore_code runstore_series(const runstore_snapshot* snapshot, const char* name,
                              runstore_series_info* out);

typedef struct runstore_run_list runstore_run_list;
/* Every run id with a record in the snapshot: integers first, ascending, then
 * strings in byte order. */
runstore_code runstore_list_runs(const runstore_snapshot* snapshot, runstore_run_list** out);
size_t runstore_run_list_size(const runstore_run_list* list);
/* Run i; a string's bytes live as long as the list. */
runstore_run runstore_run_list_at(const runstore_run_list* list, size_t i);
void runstore_run_list_release(runstore_run_list* list);

/* One record, checked, as a view: of the segment file's mapping where the
 * record is stored uncompressed (runstore_value_zero_copy), else of bytes of
 * its own. Valid until released, whatever else is released or closed. */
typedef struct runstore_value runstore_value;
runstore_code runstore_get(const runstore_snapshot* snapshot, runstore_run run, const char* name,
                           int64_t step, runstore_value** out);
/* The same record without reading it first: its bytes are checked as they
 * are asked for, so that part of a large array is read (and kept resident)
 * without the rest. Before reading bytes [offset, offset + len) of its data,
 * call runstore_value_check for them (the stored chunks they touch are
 * checked, each once; CORRUPTION naming the file where they do not match);
 * bytes no check covered may be damaged. Values that are not large arrays
 * stored uncompressed are checked whole here, and their checks return OK. */
runstore_code runstore_get_lazy(const runstore_snapshot* snapshot, runstore_run run,
                                const char* name, int64_t step, runstore_value** out);
runstore_code runstore_value_check(const runstore_value* value, uint64_t offset, uint64_t len);
runstore_dtype runstore_value_dtype(const runstore_value* value);
int runstore_value_rank(const runstore_value* value);
const int64_t* runstore_value_shape(const runstore_value* value);
const void* runstore_value_data(const runstore_value* value);
size_t runstore_value_nbytes(const runstore_value* value);
int runstore_value_zero_copy(const runstore_value* value);
void runstore_value_release(runstore_value* value);

/* What a scan reads: every record, or those of some runs and a range of
 * steps. Zero-initialised: everything. */
typedef struct runstore_scan_options {
  const runstore_run* runs; /* NULL: every run */
  size_t run_count;
  int has_steps; /* nonzero: only steps in [first_step, last_step] */
  int64_t first_step;
  int64_t last_step;
} runstore_scan_options;

/* A scan of a series of fixed-width records (numbers, bools, fixed shapes),
 * visible records in the store's order, read into the caller's buffers.
 * Series of strings, bytes or variable shapes are read with runstore_get or
 * as an Arrow stream. */
typedef struct runstore_scanner runstore_scanner;
runstore_code runstore_scan(const runstore_snapshot* snapshot, const char* name,
                            const runstore_scan_options* options, runstore_scanner** out);
/* The bytes of one record (the element size times the shape's product). */
size_t runstore_scanner_record_bytes(const runstore_scanner* scanner);
/* Reads up to `capacity` (at least 1) records: their steps into steps[0..*n) and values
 * into values (record after record, `capacity` records' bytes long); either
 * may be NULL. *n is 0 at the end. Run ids of the records read: _run(i). */
runstore_code runstore_scanner_next(runstore_scanner* scanner, size_t capacity, int64_t* steps,
                                    void* values, size_t* n);
/* The run of record i of the last runstore_scanner_next; a string's bytes
 * live until the next call. */
runstore_run runstore_scanner_run(const runstore_scanner* scanner, size_t i);
void runstore_scanner_release(runstore_scanner* scanner);

/* ---- Arrow ---------------------------------------------------------------- */

/* The Arrow C data and stream interfaces' structs: runstore/arrow_c_abi.h. */

/* Series `name` as an Arrow stream of record batches (columns run, step,
 * value; docs/query.md), of at most `batch_rows` rows each (0: the default),
 * read as the consumer pulls; uncompressed fixed-width values are buffers of
 * the mapped segment files. The stream keeps what it reads alive until it is
 * released; the snapshot may be released first. */
runstore_code runstore_arrow_stream(const runstore_snapshot* snapshot, const char* name,
                                    const runstore_scan_options* options, int64_t batch_rows,
                                    struct ArrowArrayStream* out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RUNSTORE_RUNSTORE_H_ */
