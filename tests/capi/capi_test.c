/* The C API from C11 (include/runstore/runstore.h): a store written and read
 * back through it, every dtype, strings and bytes, run ids of both kinds (a
 * string id with a NUL byte inside), commits with and without waiting, a
 * resumed run, scans into the caller's buffers with runs and steps chosen,
 * a zero-copy value that outlives its snapshot and store, an Arrow stream,
 * a large array read in part with its chunks checked as they are asked for
 * (and a damaged byte found where it lies), writers on threads beside a
 * refreshing reader, a writer after fork(), writes and commits under a
 * storm of signals whose handler does not restart system calls, special
 * files given as a store, and the errors a caller meets (hostile lengths and
 * shapes among them), each with its code and a message naming what was wrong.
 *
 * Usage: capi_test DIR (a directory that is removed and made again). Exits 0
 * when every check holds; prints each failure with its line and the library's
 * last error. Built by CMake against the tree's library and, by
 * tests/capi/install_test.sh, against an install found by pkg-config. */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid, sigaction, mkfifo, pthread_kill */
#include <pthread.h>
#include <runstore/runstore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              runstore_last_error());                                                         \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

#define CHECK_OK(call) CHECK((call) == RUNSTORE_OK)

/* Whether the last error's message holds `part`. */
static int error_says(const char* part) { return strstr(runstore_last_error(), part) != NULL; }

static const int64_t kSteps = 100;

static void write_store(runstore_store* store) {
  runstore_writer* w = NULL;
  CHECK_OK(runstore_writer_open(store, "c-writer", &w));
  CHECK(w != NULL);
  runstore_run r1 = runstore_run_int(1);
  runstore_run r7 = runstore_run_string("exp-7");
  /* A string id with a NUL byte inside: ids carry their length. */
  static const char nul_id[] = {'a', '\0', 'b'};
  runstore_run rn = {1, 0, nul_id, sizeof nul_id};
  /* Run 1 through the integer-run calls, a third of its records, and through
   * its series' own writers, another third: the same records as through a
   * runstore_run. */
  runstore_series_writer* loss = NULL;
  runstore_series_writer* tokens = NULL;
  CHECK_OK(runstore_series_writer_open(w, "loss", &loss));
  CHECK_OK(runstore_series_writer_open(w, "tokens", &tokens));
  CHECK(loss != NULL && tokens != NULL);
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step % 3 == 0) {
      CHECK_OK(runstore_append_f64_int(w, 1, "loss", step, 1.0 / (double)(step + 1)));
      CHECK_OK(runstore_append_i64_int(w, 1, "tokens", step, step * 1000));
    } else if (step % 3 == 1) {
      CHECK_OK(runstore_series_writer_append_f64(loss, 1, step, 1.0 / (double)(step + 1)));
      CHECK_OK(runstore_series_writer_append_i64(tokens, 1, step, step * 1000));
    } else {
      CHECK_OK(runstore_append_f64(w, r1, "loss", step, 1.0 / (double)(step + 1)));
      CHECK_OK(runstore_append_i64(w, r1, "tokens", step, step * 1000));
    }
    CHECK_OK(runstore_append_f64(w, r7, "loss", step, 2.0 * (double)step));
  }
  /* A value of the other type, through the series' writer: refused, naming it. */
  CHECK(runstore_series_writer_append_i64(loss, 1, kSteps, 7) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("loss"));
  CHECK(runstore_series_writer_append_f64(tokens, 1, kSteps, 7.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("tokens"));
  runstore_series_writer_release(loss);
  runstore_series_writer_release(tokens);
  CHECK_OK(runstore_append_f64(w, rn, "loss", 0, 42.0));
  /* A scalar of every fixed-width dtype, each its own series. */
  {
    const unsigned char b = 1;
    const int8_t i8 = -8;
    const int16_t i16 = -16;
    const int32_t i32 = -32;
    const int64_t i64 = -64;
    const uint8_t u8 = 8;
    const uint16_t u16 = 16;
    const uint32_t u32 = 32;
    const uint64_t u64 = 64;
    const float f32 = 3.5f;
    const double f64 = 6.25;
    const struct {
      runstore_dtype dtype;
      const void* data;
      const char* name;
    } each[] = {
        {RUNSTORE_BOOL, &b, "d.bool"},         {RUNSTORE_INT8, &i8, "d.int8"},
        {RUNSTORE_INT16, &i16, "d.int16"},     {RUNSTORE_INT32, &i32, "d.int32"},
        {RUNSTORE_INT64, &i64, "d.int64"},     {RUNSTORE_UINT8, &u8, "d.uint8"},
        {RUNSTORE_UINT16, &u16, "d.uint16"},   {RUNSTORE_UINT32, &u32, "d.uint32"},
        {RUNSTORE_UINT64, &u64, "d.uint64"},   {RUNSTORE_FLOAT32, &f32, "d.float32"},
        {RUNSTORE_FLOAT64, &f64, "d.float64"},
    };
    for (size_t k = 0; k < sizeof each / sizeof each[0]; ++k) {
      CHECK_OK(runstore_append(w, r1, each[k].name, 0, each[k].dtype, NULL, 0, each[k].data,
                               runstore_dtype_size(each[k].dtype)));
    }
  }
  CHECK_OK(runstore_append_string(w, r1, "note", 0, "converged after 100 steps"));
  {
    static const unsigned char raw[] = {0, 255, 1, 254};
    CHECK_OK(runstore_append(w, r1, "blob", 0, RUNSTORE_BYTES, NULL, 0, raw, sizeof raw));
  }
  /* An array: 512 x 512 float64 (2 MiB, stored uncompressed on its own). */
  {
    const int64_t shape[2] = {512, 512};
    double* a = malloc(sizeof(double) * 512 * 512);
    CHECK(a != NULL);
    if (a != NULL) {
      for (int k = 0; k < 512 * 512; ++k) a[k] = (double)k;
      CHECK_OK(runstore_append(w, r1, "weights", 0, RUNSTORE_FLOAT64, shape, 2, a,
                               sizeof(double) * 512 * 512));
      free(a);
    }
  }
  /* A fixed shape of int32[3] per step. */
  for (int64_t step = 0; step < 10; ++step) {
    const int64_t shape[1] = {3};
    const int32_t v[3] = {(int32_t)step, (int32_t)(step * 2), (int32_t)(step * 3)};
    CHECK_OK(runstore_append(w, r1, "triple", step, RUNSTORE_INT32, shape, 1, v, sizeof v));
  }
  /* A batch: 1,000 records of float32[2] over 10 runs, in one call. */
  {
    enum { kB = 1000 };
    static runstore_run runs[kB];
    static int64_t steps[kB];
    static float pairs[2 * kB];
    for (int i = 0; i < kB; ++i) {
      runs[i] = runstore_run_int(100 + i % 10);
      steps[i] = i / 10;
      pairs[2 * i] = (float)i;
      pairs[2 * i + 1] = -(float)i;
    }
    const int64_t two[1] = {2};
    CHECK_OK(runstore_append_batch(w, runs, steps, kB, "pairs", RUNSTORE_FLOAT32, two, 1, pairs,
                                   sizeof pairs));
    /* Bytes that do not hold the records: refused whole, nothing appended. */
    CHECK(runstore_append_batch(w, runs, steps, kB, "pairs2", RUNSTORE_FLOAT32, two, 1, pairs,
                                sizeof pairs - 4) == RUNSTORE_INVALID_ARGUMENT);
    CHECK(error_says("pairs2"));
    /* The same keys with integer runs as a column. */
    static int64_t int_runs[kB];
    for (int i = 0; i < kB; ++i) int_runs[i] = 100 + i % 10;
    CHECK_OK(runstore_append_batch_int(w, int_runs, steps, kB, "ipairs", RUNSTORE_FLOAT32, two, 1,
                                       pairs, sizeof pairs));
    CHECK(runstore_append_batch_int(w, NULL, steps, kB, "ipairs", RUNSTORE_FLOAT32, two, 1, pairs,
                                    sizeof pairs) == RUNSTORE_INVALID_ARGUMENT);
    CHECK(runstore_append_batch(w, runs, steps, kB, "names", RUNSTORE_STRING, NULL, 0, pairs,
                                sizeof pairs) == RUNSTORE_INVALID_ARGUMENT);
    CHECK(error_says("not a number type"));
  }
  CHECK_OK(runstore_flush(w));
  CHECK_OK(runstore_commit(w));
  uint64_t ticket = 0;
  CHECK_OK(runstore_append_f64(w, r7, "late", 0, 1.0));
  CHECK_OK(runstore_commit_async(w, &ticket));
  CHECK(ticket > 0);
  CHECK_OK(runstore_wait_for_commit(w, ticket));
  CHECK(runstore_durable_ticket(w) >= ticket);

  /* Run 1 resumed at step 50 (after a preemption): its loss from step 50 on
   * is hidden until written again; step 50 is. */
  CHECK_OK(runstore_resume(w, r1, 50));
  CHECK_OK(runstore_append_f64(w, r1, "loss", 50, -1.0));
  CHECK_OK(runstore_writer_close(w));
  /* A closed writer says so, whatever is asked of it. */
  CHECK(runstore_append_f64(w, r1, "loss", 51, 0.0) == RUNSTORE_FAILED_PRECONDITION);
  CHECK(error_says("closed"));
  CHECK(runstore_append_f64_int(w, 1, "loss", 51, 0.0) == RUNSTORE_FAILED_PRECONDITION);
  CHECK(error_says("closed"));
  /* A series' writer opened before or after the close says so too. */
  runstore_series_writer* after = NULL;
  CHECK_OK(runstore_series_writer_open(w, "loss", &after));
  CHECK(runstore_series_writer_append_f64(after, 1, 51, 0.0) == RUNSTORE_FAILED_PRECONDITION);
  CHECK(error_says("closed"));
  runstore_series_writer_release(after);
  CHECK(runstore_commit(w) == RUNSTORE_FAILED_PRECONDITION && error_says("closed"));
  runstore_writer_release(w);
}

static void check_series(runstore_snapshot* snap) {
  runstore_series_list* list = NULL;
  CHECK_OK(runstore_list_series(snap, &list));
  const size_t n = runstore_series_list_size(list);
  CHECK(n == 20);
  const char* previous = "";
  int saw_weights = 0;
  for (size_t i = 0; i < n; ++i) {
    const runstore_series_info s = runstore_series_list_at(list, i);
    CHECK(s.name != NULL && strcmp(previous, s.name) < 0); /* in name order */
    CHECK(s.name[0] != '~');                               /* runstore's own are not listed */
    previous = s.name;
    if (strcmp(s.name, "weights") == 0) {
      saw_weights = 1;
      CHECK(s.dtype == RUNSTORE_FLOAT64 && s.rank == 2 && s.shape[0] == 512 && s.shape[1] == 512 &&
            s.count == 1 && !s.variable_shape);
    }
  }
  CHECK(saw_weights);
  runstore_series_list_release(list);

  runstore_series_info loss;
  CHECK_OK(runstore_series(snap, "loss", &loss));
  /* 100 of run 1 but the 49 past the marker, 100 of exp-7, 1 of the NUL id. */
  CHECK(loss.count == 51 + 100 + 1);
  CHECK(loss.dtype == RUNSTORE_FLOAT64 && loss.rank == 0);
  runstore_series_info pairs;
  CHECK_OK(runstore_series(snap, "pairs", &pairs));
  CHECK(pairs.count == 1000 && pairs.rank == 1 && pairs.shape[0] == 2);
  CHECK(runstore_series(snap, "pairs2", &pairs) == RUNSTORE_NOT_FOUND);
  runstore_value* ip = NULL;
  CHECK_OK(runstore_get(snap, runstore_run_int(107), "ipairs", 12, &ip)); /* record 127 */
  CHECK(ip != NULL && ((const float*)runstore_value_data(ip))[0] == 127.0f);
  runstore_value_release(ip);
  CHECK(runstore_series(snap, "no-such-series", &loss) == RUNSTORE_NOT_FOUND);
  CHECK(error_says("no-such-series"));

  runstore_run_list* runs = NULL;
  CHECK_OK(runstore_list_runs(snap, &runs));
  /* Runs 1 and 100..109 (the batch's), ascending, then the two strings. */
  CHECK(runstore_run_list_size(runs) == 13);
  for (size_t i = 0; i < 11 && runstore_run_list_size(runs) == 13; ++i) {
    const runstore_run r = runstore_run_list_at(runs, i);
    CHECK(!r.is_string && r.i == (i == 0 ? 1 : 99 + (int64_t)i));
  }
  int saw_nul = 0, saw_exp7 = 0;
  for (size_t i = 11; i < runstore_run_list_size(runs); ++i) {
    const runstore_run r = runstore_run_list_at(runs, i);
    CHECK(r.is_string);
    saw_nul |= r.len == 3 && memcmp(r.str, "a\0b", 3) == 0;
    saw_exp7 |= r.len == 5 && memcmp(r.str, "exp-7", 5) == 0;
  }
  CHECK(saw_nul && saw_exp7);
  runstore_run_list_release(runs);
}

static void check_values(runstore_snapshot* snap) {
  runstore_value* v = NULL;
  CHECK_OK(runstore_get(snap, runstore_run_string("exp-7"), "loss", 3, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_FLOAT64 && runstore_value_rank(v) == 0);
  CHECK(runstore_value_nbytes(v) == 8 && *(const double*)runstore_value_data(v) == 6.0);
  runstore_value_release(v);

  /* Hidden by the resume marker, then written again. */
  CHECK(runstore_get(snap, runstore_run_int(1), "loss", 60, &v) == RUNSTORE_NOT_FOUND);
  CHECK(v == NULL && error_says("loss"));
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "loss", 50, &v));
  CHECK(*(const double*)runstore_value_data(v) == -1.0);
  runstore_value_release(v);
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "loss", 49, &v));
  CHECK(*(const double*)runstore_value_data(v) == 1.0 / 50.0);
  runstore_value_release(v);

  static const char nul_id[] = {'a', '\0', 'b'};
  const runstore_run rn = {1, 0, nul_id, sizeof nul_id};
  CHECK_OK(runstore_get(snap, rn, "loss", 0, &v));
  CHECK(*(const double*)runstore_value_data(v) == 42.0);
  runstore_value_release(v);

  CHECK_OK(runstore_get(snap, runstore_run_int(1), "note", 0, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_STRING);
  CHECK(runstore_value_nbytes(v) == strlen("converged after 100 steps") &&
        memcmp(runstore_value_data(v), "converged after 100 steps", runstore_value_nbytes(v)) == 0);
  runstore_value_release(v);
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "blob", 0, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_BYTES && runstore_value_nbytes(v) == 4 &&
        memcmp(runstore_value_data(v), "\0\377\001\376", 4) == 0);
  runstore_value_release(v);

  CHECK_OK(runstore_get(snap, runstore_run_int(1), "d.uint64", 0, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_UINT64 &&
        *(const uint64_t*)runstore_value_data(v) == 64);
  runstore_value_release(v);
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "d.float32", 0, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_FLOAT32 &&
        *(const float*)runstore_value_data(v) == 3.5f);
  runstore_value_release(v);
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "d.int8", 0, &v));
  CHECK(*(const int8_t*)runstore_value_data(v) == -8);
  runstore_value_release(v);
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "d.bool", 0, &v));
  CHECK(runstore_value_dtype(v) == RUNSTORE_BOOL &&
        *(const unsigned char*)runstore_value_data(v) == 1);
  runstore_value_release(v);
}

static void check_scans(runstore_snapshot* snap) {
  runstore_scanner* sc = NULL;
  CHECK_OK(runstore_scan(snap, "tokens", NULL, &sc));
  CHECK(runstore_scanner_record_bytes(sc) == 8);
  int64_t steps[64];
  int64_t values[7];
  size_t n = 0, total = 0;
  int64_t sum = 0;
  /* A buffer of 7: the records come in pieces that do not divide the blocks. */
  while (runstore_scanner_next(sc, 7, steps, values, &n) == RUNSTORE_OK && n > 0) {
    for (size_t i = 0; i < n; ++i) {
      const runstore_run r = runstore_scanner_run(sc, i);
      CHECK(!r.is_string && r.i == 1);
      CHECK(values[i] == steps[i] * 1000);
      sum += values[i];
    }
    total += n;
  }
  /* The resume marker of run 1 at step 50 hides every series' records of the
   * run from step 50 on, "tokens" among them. */
  CHECK(total == 50);
  CHECK(sum == 1000 * (49 * 50 / 2));
  runstore_scanner_release(sc);

  /* Only exp-7, steps 10..19. */
  const runstore_run want[1] = {runstore_run_string("exp-7")};
  runstore_scan_options o;
  memset(&o, 0, sizeof o);
  o.runs = want;
  o.run_count = 1;
  o.has_steps = 1;
  o.first_step = 10;
  o.last_step = 19;
  CHECK_OK(runstore_scan(snap, "loss", &o, &sc));
  double loss[64];
  total = 0;
  while (runstore_scanner_next(sc, 64, steps, loss, &n) == RUNSTORE_OK && n > 0) {
    for (size_t i = 0; i < n; ++i) {
      const runstore_run r = runstore_scanner_run(sc, i);
      CHECK(r.is_string && r.len == 5 && memcmp(r.str, "exp-7", 5) == 0);
      CHECK(steps[i] >= 10 && steps[i] <= 19 && loss[i] == 2.0 * (double)steps[i]);
    }
    total += n;
  }
  CHECK(total == 10);
  runstore_scanner_release(sc);

  /* Arrays of a fixed shape: a record is 3 int32. */
  CHECK_OK(runstore_scan(snap, "triple", NULL, &sc));
  CHECK(runstore_scanner_record_bytes(sc) == 12);
  int32_t triples[3 * 16];
  CHECK_OK(runstore_scanner_next(sc, 16, steps, triples, &n));
  CHECK(n == 10);
  for (size_t i = 0; i < n; ++i) {
    CHECK(triples[3 * i] == steps[i] && triples[3 * i + 2] == 3 * steps[i]);
  }
  CHECK_OK(runstore_scanner_next(sc, 16, steps, triples, &n));
  CHECK(n == 0);
  CHECK(runstore_scanner_next(sc, 0, steps, triples, &n) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("capacity 0"));
  runstore_scanner_release(sc);

  /* Strings are not read into fixed-size buffers: a clear refusal. */
  CHECK(runstore_scan(snap, "note", NULL, &sc) == RUNSTORE_NOT_SUPPORTED);
  CHECK(sc == NULL && error_says("note") && error_says("runstore_arrow_stream"));
  o.first_step = 5;
  o.last_step = 4;
  CHECK(runstore_scan(snap, "loss", &o, &sc) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("first_step"));
}

static void check_arrow(runstore_snapshot* snap) {
  struct ArrowArrayStream stream;
  CHECK_OK(runstore_arrow_stream(snap, "loss", NULL, 16, &stream));
  struct ArrowSchema schema;
  CHECK(stream.get_schema(&stream, &schema) == 0);
  CHECK(strcmp(schema.format, "+s") == 0 && schema.n_children == 3);
  if (schema.n_children == 3) {
    CHECK(strcmp(schema.children[1]->name, "step") == 0);
    CHECK(strcmp(schema.children[2]->name, "value") == 0 &&
          strcmp(schema.children[2]->format, "g") == 0);
  }
  schema.release(&schema);
  int64_t rows = 0, batches = 0;
  for (;;) {
    struct ArrowArray batch;
    CHECK(stream.get_next(&stream, &batch) == 0);
    if (batch.release == NULL) break; /* the end */
    CHECK(batch.length <= 16);
    rows += batch.length;
    ++batches;
    batch.release(&batch);
  }
  CHECK(rows == 152 && batches >= 10);
  stream.release(&stream);
  CHECK(runstore_arrow_stream(snap, "nothing", NULL, 0, &stream) == RUNSTORE_NOT_FOUND);
  CHECK(stream.release == NULL);
}

static void check_errors(const char* dir) {
  runstore_store* s = NULL;
  char path[4096];
  /* A path that is a regular file, not a store. */
  snprintf(path, sizeof path, "%s/not-a-store", dir);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs("hello\n", f);
    fclose(f);
  }
  CHECK(runstore_open(path, 0, &s) != RUNSTORE_OK);
  CHECK(s == NULL && error_says("not-a-store"));
  snprintf(path, sizeof path, "%s/missing", dir);
  CHECK(runstore_open(path, RUNSTORE_OPEN_NO_CREATE, &s) == RUNSTORE_NOT_FOUND);
  CHECK(error_says("missing"));
  CHECK(runstore_open(path, 1u << 20, &s) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("flags"));
  CHECK(runstore_open(NULL, 0, &s) == RUNSTORE_INVALID_ARGUMENT && error_says("path"));

  snprintf(path, sizeof path, "%s/store", dir);
  CHECK_OK(runstore_open(path, 0, &s));
  runstore_writer* w = NULL;
  CHECK(runstore_writer_open(s, "bad id/with slash", &w) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(w == NULL && error_says("bad id/with slash"));
  CHECK_OK(runstore_writer_open(s, NULL, &w));
  const double x = 1.0;
  CHECK(runstore_append(w, runstore_run_int(1), "x", 0, (runstore_dtype)99, NULL, 0, &x, 8) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("dtype 99"));
  CHECK(runstore_append(w, runstore_run_int(1), "x", 0, (runstore_dtype)-1, NULL, 0, &x, 8) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(runstore_dtype_size((runstore_dtype)1000) == 0);
  /* 257 is not 1 (RUNSTORE_BOOL) in a byte. */
  CHECK(runstore_append(w, runstore_run_int(1), "x", 0, (runstore_dtype)257, NULL, 0, &x, 1) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("dtype 257") && runstore_dtype_size((runstore_dtype)(256 + 11)) == 0);
  CHECK(strcmp(runstore_code_name((runstore_code)12345), "Unknown") == 0);
  CHECK(runstore_append(w, runstore_run_int(1), "x", 0, RUNSTORE_FLOAT64, NULL, 2, &x, 8) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("NULL shape"));
  /* A type that disagrees with the series' first record. */
  CHECK_OK(runstore_append_i64(w, runstore_run_int(1), "tokens", 1000, 5));
  CHECK(runstore_append_string(w, runstore_run_int(1), "tokens", 1001, "five") ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("tokens"));
  CHECK(runstore_append_f64_int(w, 1, "tokens", 1001, 5.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("tokens"));
  CHECK(runstore_append_i64_int(w, 1, "loss", 1001, 5) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("loss"));
  CHECK(runstore_append_f64_int(w, 1, NULL, 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("name is NULL"));
  runstore_series_writer* unnamed = NULL;
  CHECK(runstore_series_writer_open(w, NULL, &unnamed) == RUNSTORE_INVALID_ARGUMENT &&
        unnamed == NULL && error_says("name is NULL"));
  /* A name the store cannot hold is refused at the append, as runstore_append's is. */
  CHECK_OK(runstore_series_writer_open(w, "~reserved", &unnamed));
  CHECK(runstore_series_writer_append_f64(unnamed, 1, 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("~reserved"));
  runstore_series_writer_release(unnamed);
  CHECK(runstore_append_i64_int(w, 1, "", 0, 1) == RUNSTORE_INVALID_ARGUMENT);
  /* Lengths and shapes that lie. */
  char long_id[300];
  memset(long_id, 'x', sizeof long_id);
  const runstore_run too_long = {1, 0, long_id, sizeof long_id};
  CHECK(runstore_append_f64(w, too_long, "x", 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("255"));
  const int64_t three[1] = {3};
  CHECK(runstore_append(w, runstore_run_int(1), "vec", 0, RUNSTORE_FLOAT64, three, 1, &x, 8) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("vec"));
  const int64_t negative[1] = {-1};
  CHECK(runstore_append(w, runstore_run_int(1), "neg", 0, RUNSTORE_FLOAT64, negative, 1, &x, 8) ==
        RUNSTORE_INVALID_ARGUMENT);
  static const char bad_utf8[] = {'o', 'k', (char)0xff, 0};
  CHECK(runstore_append_string(w, runstore_run_int(1), "text", 0, bad_utf8) ==
        RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("UTF-8"));
  CHECK_OK(runstore_writer_close(w));
  runstore_writer_release(w);
  /* A read-only store takes no writer. */
  runstore_store* ro = NULL;
  CHECK_OK(runstore_open(path, RUNSTORE_OPEN_READ_ONLY, &ro));
  CHECK(runstore_writer_open(ro, NULL, &w) != RUNSTORE_OK && w == NULL);
  runstore_close(ro);
  runstore_close(s);
  /* A writer outlives the store it came from. */
  CHECK_OK(runstore_open(path, 0, &s));
  CHECK_OK(runstore_writer_open(s, NULL, &w));
  runstore_close(s);
  CHECK_OK(runstore_append_f64(w, runstore_run_int(9), "after-close", 0, 9.0));
  CHECK_OK(runstore_writer_close(w));
  runstore_writer_release(w);
  CHECK_OK(runstore_open(path, RUNSTORE_OPEN_READ_ONLY, &s));
  runstore_snapshot* snap = NULL;
  runstore_value* v = NULL;
  CHECK_OK(runstore_snapshot_of(s, &snap));
  CHECK_OK(runstore_get(snap, runstore_run_int(9), "after-close", 0, &v));
  CHECK(v != NULL && *(const double*)runstore_value_data(v) == 9.0);
  runstore_value_release(v);
  runstore_snapshot_release(snap);
  runstore_close(s);
  CHECK(strcmp(runstore_code_name(RUNSTORE_RESOURCE_EXHAUSTED), "ResourceExhausted") == 0);
  /* A writer released without a close is closed: what it appended is committed. */
  CHECK_OK(runstore_open(path, 0, &s));
  CHECK_OK(runstore_writer_open(s, NULL, &w));
  CHECK_OK(runstore_append_f64(w, runstore_run_int(9), "released", 0, 3.0));
  runstore_writer_release(w);
  CHECK_OK(runstore_refresh(s, &snap));
  CHECK_OK(runstore_get(snap, runstore_run_int(9), "released", 0, &v));
  runstore_value_release(v);
  runstore_snapshot_release(snap);
  runstore_close(s);
  /* Null handles: a code and a message naming the argument, never a crash. */
  CHECK(runstore_append_f64(NULL, runstore_run_int(1), "x", 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("writer is NULL"));
  CHECK(runstore_append_f64_int(NULL, 1, "x", 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("writer is NULL"));
  CHECK(runstore_append_i64_int(NULL, 1, "x", 0, 1) == RUNSTORE_INVALID_ARGUMENT);
  runstore_series_writer* series = (runstore_series_writer*)&series;
  CHECK(runstore_series_writer_open(NULL, "x", &series) == RUNSTORE_INVALID_ARGUMENT &&
        series == NULL && error_says("writer is NULL"));
  CHECK(runstore_series_writer_open(NULL, "x", NULL) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("out is NULL"));
  CHECK(runstore_series_writer_append_f64(NULL, 1, 0, 1.0) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("series is NULL"));
  CHECK(runstore_series_writer_append_i64(NULL, 1, 0, 1) == RUNSTORE_INVALID_ARGUMENT);
  runstore_series_writer_release(NULL);
  CHECK(runstore_commit(NULL) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(runstore_writer_close(NULL) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(runstore_refresh(NULL, &snap) == RUNSTORE_INVALID_ARGUMENT && snap == NULL);
  CHECK(error_says("store is NULL"));
  CHECK(runstore_get(NULL, runstore_run_int(1), "x", 0, &v) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(error_says("snapshot is NULL"));
  CHECK(runstore_list_series(NULL, NULL) == RUNSTORE_INVALID_ARGUMENT && error_says("out"));
  CHECK(runstore_scan(NULL, "x", NULL, NULL) == RUNSTORE_INVALID_ARGUMENT);
  CHECK(runstore_writer_open(NULL, NULL, &w) == RUNSTORE_INVALID_ARGUMENT && w == NULL);
  CHECK(runstore_value_data(NULL) == NULL && runstore_series_list_size(NULL) == 0);
  /* Releasing NULL is nothing. */
  runstore_close(NULL);
  runstore_snapshot_release(NULL);
  runstore_value_release(NULL);
  runstore_writer_release(NULL);
  runstore_scanner_release(NULL);
  runstore_series_list_release(NULL);
  runstore_run_list_release(NULL);
}

/* A large array read in part: its chunks are checked as they are asked for,
 * and a damaged byte is found where it lies, naming the file, while the rest
 * of the array still reads. */
static void check_lazy(const char* dir) {
  enum { kN = 1 << 19 }; /* 4 MiB of float64: 0, 1, 2, ... */
  char path[4096];
  snprintf(path, sizeof path, "%s/lazy", dir);
  runstore_store* s = NULL;
  runstore_writer* w = NULL;
  CHECK_OK(runstore_open(path, 0, &s));
  CHECK_OK(runstore_writer_open(s, "lazy-writer", &w));
  double* a = malloc(sizeof(double) * kN);
  if (a == NULL) return;
  for (int k = 0; k < kN; ++k) a[k] = (double)k;
  const int64_t shape[1] = {kN};
  CHECK_OK(runstore_append(w, runstore_run_int(1), "big", 0, RUNSTORE_FLOAT64, shape, 1, a,
                           sizeof(double) * kN));
  CHECK_OK(runstore_writer_close(w));
  runstore_writer_release(w);
  runstore_close(s);

  /* One byte of element 300,000 damaged in the segment file. */
  char seg[4200];
  snprintf(seg, sizeof seg, "%s/segments/lazy-writer-00000001.rss", path);
  FILE* f = fopen(seg, "r+b");
  CHECK(f != NULL);
  if (f == NULL) {
    free(a);
    return;
  }
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  unsigned char* bytes = malloc((size_t)size);
  fseek(f, 0, SEEK_SET);
  CHECK(bytes != NULL && fread(bytes, 1, (size_t)size, f) == (size_t)size);
  long at = -1;
  for (long i = 0; bytes != NULL && i + 16 <= size; i += 8) {
    if (memcmp(bytes + i, &a[300000], 8) == 0 && memcmp(bytes + i + 8, &a[300001], 8) == 0) {
      at = i;
      break;
    }
  }
  CHECK(at >= 0);
  fseek(f, at, SEEK_SET);
  fputc(bytes[at] ^ 0x40, f);
  fclose(f);
  free(bytes);

  CHECK_OK(runstore_open(path, RUNSTORE_OPEN_READ_ONLY, &s));
  runstore_snapshot* snap = NULL;
  CHECK_OK(runstore_refresh(s, &snap));
  runstore_value* v = NULL;
  CHECK_OK(runstore_get_lazy(snap, runstore_run_int(1), "big", 0, &v));
  CHECK(runstore_value_zero_copy(v) && runstore_value_nbytes(v) == sizeof(double) * kN);
  /* The first thousand elements: checked, read. */
  CHECK_OK(runstore_value_check(v, 0, 8 * 1000));
  const double* d = runstore_value_data(v);
  CHECK(d != NULL && d[999] == 999.0);
  /* The damaged element's chunk. */
  CHECK(runstore_value_check(v, 8 * 300000, 8) == RUNSTORE_CORRUPTION);
  CHECK(error_says("lazy-writer-00000001.rss"));
  /* The last elements, past the damage, still read. */
  CHECK_OK(runstore_value_check(v, 8 * (kN - 10), 80));
  CHECK(d != NULL && d[kN - 1] == (double)(kN - 1));
  CHECK(runstore_value_check(v, 8 * kN, 1) == RUNSTORE_INVALID_ARGUMENT && error_says("past"));
  runstore_value_release(v);
  /* Read whole, it is damaged. */
  CHECK(runstore_get(snap, runstore_run_int(1), "big", 0, &v) == RUNSTORE_CORRUPTION);
  CHECK(v == NULL && error_says("lazy-writer-00000001.rss"));
  runstore_snapshot_release(snap);
  runstore_close(s);
  free(a);
}

/* Writers on threads, one each, beside a thread that refreshes and reads. */
enum { kThreads = 4, kPerThread = 500 };
static runstore_store* shared_store;

static int write_thread(void* arg) {
  const int64_t run = (int64_t)(intptr_t)arg;
  runstore_writer* w = NULL;
  if (runstore_writer_open(shared_store, NULL, &w) != RUNSTORE_OK) return 1;
  int bad = 0;
  for (int64_t step = 0; step < kPerThread; ++step) {
    bad |= runstore_append_f64(w, runstore_run_int(run), "threaded", step, (double)step) !=
           RUNSTORE_OK;
    if (step % 100 == 99) bad |= runstore_commit(w) != RUNSTORE_OK;
  }
  bad |= runstore_writer_close(w) != RUNSTORE_OK;
  runstore_writer_release(w);
  return bad;
}

static int read_thread(void* arg) {
  (void)arg;
  int bad = 0;
  for (int k = 0; k < 50; ++k) {
    runstore_snapshot* snap = NULL;
    if (runstore_refresh(shared_store, &snap) != RUNSTORE_OK) return 1;
    runstore_series_info info;
    const runstore_code c = runstore_series(snap, "threaded", &info);
    /* Commits of 100 records: a reader sees whole commits only. */
    bad |= c != RUNSTORE_OK && c != RUNSTORE_NOT_FOUND;
    bad |= c == RUNSTORE_OK && info.count % 100 != 0;
    runstore_snapshot_release(snap);
  }
  return bad;
}

static void check_threads(const char* dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/threads", dir);
  CHECK_OK(runstore_open(path, 0, &shared_store));
  thrd_t t[kThreads + 1];
  for (int i = 0; i < kThreads; ++i) {
    CHECK(thrd_create(&t[i], write_thread, (void*)(intptr_t)i) == thrd_success);
  }
  CHECK(thrd_create(&t[kThreads], read_thread, NULL) == thrd_success);
  for (int i = 0; i <= kThreads; ++i) {
    int bad = 1;
    CHECK(thrd_join(t[i], &bad) == thrd_success);
    CHECK(bad == 0);
  }
  runstore_snapshot* snap = NULL;
  CHECK_OK(runstore_refresh(shared_store, &snap));
  runstore_series_info info;
  CHECK_OK(runstore_series(snap, "threaded", &info));
  CHECK(info.count == kThreads * kPerThread);
  runstore_snapshot_release(snap);
  runstore_close(shared_store);
}

/* A new store DIR/NAME (its path in path[size]) and a writer of it. */
static runstore_writer* open_writer(const char* dir, const char* name, char* path, size_t size,
                                    runstore_store** s) {
  snprintf(path, size, "%s/%s", dir, name);
  *s = NULL;
  CHECK_OK(runstore_open(path, 0, s));
  runstore_writer* w = NULL;
  CHECK_OK(runstore_writer_open(*s, NULL, &w));
  return w;
}

/* A writer open when the process forks: the child cannot write with it (the
 * parent's segment is the parent's), and the parent's goes on unharmed. */
static void check_fork(const char* dir) {
  char path[4096];
  runstore_store* s = NULL;
  runstore_writer* w = open_writer(dir, "fork", path, sizeof path, &s);
  CHECK_OK(runstore_append_f64(w, runstore_run_int(1), "x", 0, 1.0));
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    const int refused =
        runstore_append_f64(w, runstore_run_int(1), "x", 1, 2.0) == RUNSTORE_FAILED_PRECONDITION &&
        error_says("fork");
    /* A store and writer of the child's own work. */
    runstore_store* cs = NULL;
    runstore_writer* cw = NULL;
    const int own = runstore_open(path, 0, &cs) == RUNSTORE_OK &&
                    runstore_writer_open(cs, NULL, &cw) == RUNSTORE_OK &&
                    runstore_append_f64(cw, runstore_run_int(2), "x", 0, 3.0) == RUNSTORE_OK &&
                    runstore_writer_close(cw) == RUNSTORE_OK;
    runstore_writer_release(cw);
    runstore_close(cs);
    _exit(refused && own ? 0 : 1);
  }
  CHECK(pid > 0);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(runstore_append_f64(w, runstore_run_int(1), "x", 1, 2.0));
  CHECK_OK(runstore_writer_close(w));
  runstore_writer_release(w);
  runstore_snapshot* snap = NULL;
  CHECK_OK(runstore_refresh(s, &snap));
  runstore_series_info info;
  CHECK_OK(runstore_series(snap, "x", &info));
  CHECK(info.count == 3); /* the parent's two and the child's one */
  runstore_snapshot_release(snap);
  runstore_close(s);
}

/* Special files where a store's directory should be: each refused with an
 * error that names it, never a hang (a FIFO opened for reading would block)
 * or a crash. */
static void check_special_files(const char* dir) {
  char fifo[4096];
  snprintf(fifo, sizeof fifo, "%s/a-fifo", dir);
  CHECK(mkfifo(fifo, 0600) == 0);
  const char* paths[] = {"/dev/null", "/dev/zero", fifo};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; ++i) {
    for (unsigned flags = 0; flags <= RUNSTORE_OPEN_READ_ONLY; ++flags) {
      runstore_store* s = NULL;
      const runstore_code code = runstore_open(paths[i], flags, &s);
      CHECK(code != RUNSTORE_OK && s == NULL);
      CHECK(error_says(paths[i]));
      runstore_close(s);
    }
  }
  struct stat st;
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)); /* left as it was */
}

/* Signals whose handler does not restart interrupted system calls (no
 * SA_RESTART), sent to the writing thread and to the process (so that the
 * library's own threads get them too) all through appends, arrays, flushes
 * and commits: every call still succeeds and every record is there. */
static atomic_int signals_stop;
static atomic_long signals_sent;
static pthread_t signalled_thread;
static void on_signal(int sig) { (void)sig; }
static void* signal_storm(void* arg) {
  (void)arg;
  while (!atomic_load(&signals_stop)) {
    pthread_kill(signalled_thread, SIGUSR1);
    kill(getpid(), SIGUSR1);
    atomic_fetch_add(&signals_sent, 2);
    struct timespec pause = {0, 200000}; /* 0.2 ms */
    nanosleep(&pause, NULL);
  }
  return NULL;
}

static void check_signals(const char* dir) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; /* no SA_RESTART: blocking calls return EINTR */
  CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
  char path[4096];
  runstore_store* s = NULL;
  runstore_writer* w = open_writer(dir, "signals", path, sizeof path, &s);
  signalled_thread = pthread_self();
  atomic_store(&signals_stop, 0);
  pthread_t storm;
  CHECK(pthread_create(&storm, NULL, signal_storm, NULL) == 0);
  enum { kRounds = 200, kEach = 50 };
  static double block[64 * 1024]; /* 512 KiB: written by the caller's thread */
  int bad = 0;
  for (int r = 0; r < kRounds && !bad; ++r) {
    for (int k = 0; k < kEach; ++k) {
      bad |= runstore_append_f64(w, runstore_run_int(r), "x", k, r * 1000.0 + k) != RUNSTORE_OK;
    }
    block[0] = r;
    const int64_t shape[1] = {64 * 1024};
    bad |= runstore_append(w, runstore_run_int(r), "block", 0, RUNSTORE_FLOAT64, shape, 1, block,
                           sizeof block) != RUNSTORE_OK;
    bad |= (r % 2 ? runstore_flush(w) : runstore_commit(w)) != RUNSTORE_OK;
  }
  bad |= runstore_writer_close(w) != RUNSTORE_OK;
  atomic_store(&signals_stop, 1);
  pthread_join(storm, NULL);
  CHECK(!bad);
  runstore_writer_release(w);
  runstore_snapshot* snap = NULL;
  CHECK_OK(runstore_refresh(s, &snap));
  runstore_series_info info;
  CHECK_OK(runstore_series(snap, "x", &info));
  CHECK(info.count == kRounds * kEach);
  CHECK_OK(runstore_series(snap, "block", &info));
  CHECK(info.count == kRounds);
  runstore_value* v = NULL;
  CHECK_OK(runstore_get(snap, runstore_run_int(kRounds - 1), "block", 0, &v));
  CHECK(v != NULL && ((const double*)runstore_value_data(v))[0] == kRounds - 1);
  runstore_value_release(v);
  runstore_snapshot_release(snap);
  runstore_close(s);
  CHECK(sigaction(SIGUSR1, &old, NULL) == 0);
  printf("capi_test: %ld signals sent through %d commits and flushes, none failed a call\n",
         (long)atomic_load(&signals_sent), kRounds);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capi_test DIR\n");
    return 2;
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", argv[1], argv[1]);
  if (system(cmd) != 0) return 2;
  CHECK(runstore_abi_version() == RUNSTORE_C_ABI_VERSION);
  CHECK(strlen(runstore_version()) >= 5);

  char path[4096];
  snprintf(path, sizeof path, "%s/store", argv[1]);
  runstore_store* store = NULL;
  CHECK_OK(runstore_open(path, 0, &store));
  if (store == NULL) return 1;
  write_store(store);
  runstore_snapshot* snap = NULL;
  CHECK_OK(runstore_refresh(store, &snap));
  check_series(snap);
  check_values(snap);
  check_scans(snap);
  check_arrow(snap);

  /* The 2 MiB array as a view of the segment file, alive after its snapshot
   * and its store are gone. */
  runstore_value* weights = NULL;
  CHECK_OK(runstore_get(snap, runstore_run_int(1), "weights", 0, &weights));
  runstore_snapshot_release(snap);
  runstore_close(store);
  CHECK(runstore_value_zero_copy(weights) == 1);
  CHECK(runstore_value_nbytes(weights) == sizeof(double) * 512 * 512);
  const double* a = runstore_value_data(weights);
  double sum = 0;
  for (int k = 0; k < 512 * 512; ++k) sum += a[k];
  CHECK(sum == (double)(512 * 512) * (512 * 512 - 1) / 2);
  CHECK(runstore_value_shape(weights)[0] == 512 && runstore_value_rank(weights) == 2);
  runstore_value_release(weights);

  /* Read again by a store opened afresh, read-only. */
  CHECK_OK(runstore_open(path, RUNSTORE_OPEN_READ_ONLY, &store));
  CHECK_OK(runstore_snapshot_of(store, &snap));
  runstore_series_info info;
  CHECK_OK(runstore_series(snap, "late", &info));
  CHECK(info.count == 1 && strcmp(info.name, "late") == 0);
  runstore_snapshot_release(snap);
  runstore_close(store);

  check_errors(argv[1]);
  check_lazy(argv[1]);
  check_threads(argv[1]);
  check_fork(argv[1]);
  check_special_files(argv[1]);
  check_signals(argv[1]);
  if (failures == 0) printf("capi_test: every check held\n");
  return failures == 0 ? 0 : 1;
}
