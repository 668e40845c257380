/* Reads, through the C API, the store that python/tests/test_bindings.py
 * writes with the Python package: run "py-1"'s "loss" at steps 0..99 (step /
 * 2), its "img" at step 0 (float32 4 x 5: 0, 1, ..., 19) and "label" (the
 * string "cat"). Exits 0 when every record is as written, and prints what
 * differs otherwise. Usage: capi_interop_read STORE */
#include <runstore/runstore.h>
#include <stdio.h>
#include <string.h>

static int fail(const char* what) {
  fprintf(stderr, "capi_interop_read: %s: %s\n", what, runstore_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  runstore_store* store = NULL;
  runstore_snapshot* snap = NULL;
  if (runstore_open(argv[1], RUNSTORE_OPEN_READ_ONLY, &store) != RUNSTORE_OK) return fail("open");
  if (runstore_refresh(store, &snap) != RUNSTORE_OK) return fail("refresh");
  const runstore_run run = runstore_run_string("py-1");
  runstore_scanner* scan = NULL;
  runstore_scan_options o;
  memset(&o, 0, sizeof o);
  o.runs = &run;
  o.run_count = 1;
  if (runstore_scan(snap, "loss", &o, &scan) != RUNSTORE_OK) return fail("scan loss");
  int64_t steps[256];
  double values[256];
  size_t n = 0, total = 0;
  do {
    if (runstore_scanner_next(scan, 256, steps, values, &n) != RUNSTORE_OK) return fail("next");
    for (size_t i = 0; i < n; ++i) {
      if (values[i] != (double)steps[i] / 2) return fail("a loss value differs");
    }
    total += n;
  } while (n > 0);
  runstore_scanner_release(scan);
  if (total != 100) return fail("not 100 records of loss");
  runstore_value* v = NULL;
  if (runstore_get(snap, run, "img", 0, &v) != RUNSTORE_OK) return fail("get img");
  const float* img = runstore_value_data(v);
  if (runstore_value_dtype(v) != RUNSTORE_FLOAT32 || runstore_value_rank(v) != 2 ||
      runstore_value_shape(v)[0] != 4 || runstore_value_shape(v)[1] != 5) {
    return fail("img is not float32 4 x 5");
  }
  for (int k = 0; k < 20; ++k) {
    if (img[k] != (float)k) return fail("an img value differs");
  }
  runstore_value_release(v);
  if (runstore_get(snap, run, "label", 0, &v) != RUNSTORE_OK) return fail("get label");
  if (runstore_value_dtype(v) != RUNSTORE_STRING || runstore_value_nbytes(v) != 3 ||
      memcmp(runstore_value_data(v), "cat", 3) != 0) {
    return fail("label is not \"cat\"");
  }
  runstore_value_release(v);
  runstore_snapshot_release(snap);
  runstore_close(store);
  printf("capi_interop_read: every record as Python wrote it\n");
  return 0;
}
