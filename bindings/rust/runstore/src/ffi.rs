//! The C API's declarations (include/runstore/runstore.h), by hand: the
//! crate depends on nothing outside the standard library. Kept in step with
//! the header by `RUNSTORE_C_ABI_VERSION`, which `Store::open` compares with
//! the library's.
#![allow(non_camel_case_types, dead_code)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

pub const RUNSTORE_C_ABI_VERSION: c_int = 1;

pub type runstore_code = c_int;
pub const RUNSTORE_OK: runstore_code = 0;

pub type runstore_dtype = c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct runstore_run {
    pub is_string: c_int,
    pub i: i64,
    pub str_: *const c_char,
    pub len: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct runstore_series_info {
    pub name: *const c_char,
    pub dtype: runstore_dtype,
    pub variable_shape: c_int,
    pub rank: c_int,
    pub shape: *const i64,
    pub count: u64,
}

#[repr(C)]
pub struct runstore_scan_options {
    pub runs: *const runstore_run,
    pub run_count: usize,
    pub has_steps: c_int,
    pub first_step: i64,
    pub last_step: i64,
}

pub const RUNSTORE_OPEN_READ_ONLY: c_uint = 1;
pub const RUNSTORE_OPEN_NO_CREATE: c_uint = 2;

/// The C API's opaque handles.
macro_rules! opaque {
    ($($name:ident),*) => {
        $(
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}
opaque!(
    runstore_store,
    runstore_snapshot,
    runstore_writer,
    runstore_series_writer,
    runstore_value,
    runstore_scanner,
    runstore_series_list
);

extern "C" {
    pub fn runstore_abi_version() -> c_int;
    pub fn runstore_version() -> *const c_char;
    pub fn runstore_last_error() -> *const c_char;
    pub fn runstore_code_name(code: runstore_code) -> *const c_char;

    pub fn runstore_open(
        path: *const c_char,
        flags: c_uint,
        out: *mut *mut runstore_store,
    ) -> runstore_code;
    pub fn runstore_close(store: *mut runstore_store);
    pub fn runstore_refresh(
        store: *mut runstore_store,
        out: *mut *mut runstore_snapshot,
    ) -> runstore_code;
    pub fn runstore_snapshot_release(snapshot: *mut runstore_snapshot);

    pub fn runstore_writer_open(
        store: *mut runstore_store,
        writer_id: *const c_char,
        out: *mut *mut runstore_writer,
    ) -> runstore_code;
    pub fn runstore_append(
        writer: *mut runstore_writer,
        run: runstore_run,
        name: *const c_char,
        step: i64,
        dtype: runstore_dtype,
        shape: *const i64,
        rank: c_int,
        data: *const c_void,
        nbytes: usize,
    ) -> runstore_code;
    pub fn runstore_append_f64(
        writer: *mut runstore_writer,
        run: runstore_run,
        name: *const c_char,
        step: i64,
        value: f64,
    ) -> runstore_code;
    pub fn runstore_append_i64(
        writer: *mut runstore_writer,
        run: runstore_run,
        name: *const c_char,
        step: i64,
        value: i64,
    ) -> runstore_code;
    pub fn runstore_series_writer_open(
        writer: *mut runstore_writer,
        name: *const c_char,
        out: *mut *mut runstore_series_writer,
    ) -> runstore_code;
    pub fn runstore_series_writer_append_f64(
        series: *mut runstore_series_writer,
        run: i64,
        step: i64,
        value: f64,
    ) -> runstore_code;
    pub fn runstore_series_writer_append_i64(
        series: *mut runstore_series_writer,
        run: i64,
        step: i64,
        value: i64,
    ) -> runstore_code;
    pub fn runstore_series_writer_release(series: *mut runstore_series_writer);
    pub fn runstore_append_f64_int(
        writer: *mut runstore_writer,
        run: i64,
        name: *const c_char,
        step: i64,
        value: f64,
    ) -> runstore_code;
    pub fn runstore_append_i64_int(
        writer: *mut runstore_writer,
        run: i64,
        name: *const c_char,
        step: i64,
        value: i64,
    ) -> runstore_code;
    pub fn runstore_append_batch(
        writer: *mut runstore_writer,
        runs: *const runstore_run,
        steps: *const i64,
        count: usize,
        name: *const c_char,
        dtype: runstore_dtype,
        shape: *const i64,
        rank: c_int,
        values: *const c_void,
        nbytes: usize,
    ) -> runstore_code;
    pub fn runstore_append_batch_int(
        writer: *mut runstore_writer,
        runs: *const i64,
        steps: *const i64,
        count: usize,
        name: *const c_char,
        dtype: runstore_dtype,
        shape: *const i64,
        rank: c_int,
        values: *const c_void,
        nbytes: usize,
    ) -> runstore_code;
    pub fn runstore_flush(writer: *mut runstore_writer) -> runstore_code;
    pub fn runstore_commit(writer: *mut runstore_writer) -> runstore_code;
    pub fn runstore_resume(
        writer: *mut runstore_writer,
        run: runstore_run,
        step: i64,
    ) -> runstore_code;
    pub fn runstore_writer_close(writer: *mut runstore_writer) -> runstore_code;
    pub fn runstore_writer_release(writer: *mut runstore_writer);

    pub fn runstore_series(
        snapshot: *const runstore_snapshot,
        name: *const c_char,
        out: *mut runstore_series_info,
    ) -> runstore_code;
    pub fn runstore_list_series(
        snapshot: *const runstore_snapshot,
        out: *mut *mut runstore_series_list,
    ) -> runstore_code;
    pub fn runstore_series_list_size(list: *const runstore_series_list) -> usize;
    pub fn runstore_series_list_at(
        list: *const runstore_series_list,
        i: usize,
    ) -> runstore_series_info;
    pub fn runstore_series_list_release(list: *mut runstore_series_list);

    pub fn runstore_get(
        snapshot: *const runstore_snapshot,
        run: runstore_run,
        name: *const c_char,
        step: i64,
        out: *mut *mut runstore_value,
    ) -> runstore_code;
    pub fn runstore_get_lazy(
        snapshot: *const runstore_snapshot,
        run: runstore_run,
        name: *const c_char,
        step: i64,
        out: *mut *mut runstore_value,
    ) -> runstore_code;
    pub fn runstore_value_check(
        value: *const runstore_value,
        offset: u64,
        len: u64,
    ) -> runstore_code;
    pub fn runstore_value_dtype(value: *const runstore_value) -> runstore_dtype;
    pub fn runstore_value_rank(value: *const runstore_value) -> c_int;
    pub fn runstore_value_shape(value: *const runstore_value) -> *const i64;
    pub fn runstore_value_data(value: *const runstore_value) -> *const c_void;
    pub fn runstore_value_nbytes(value: *const runstore_value) -> usize;
    pub fn runstore_value_zero_copy(value: *const runstore_value) -> c_int;
    pub fn runstore_value_release(value: *mut runstore_value);

    pub fn runstore_scan(
        snapshot: *const runstore_snapshot,
        name: *const c_char,
        options: *const runstore_scan_options,
        out: *mut *mut runstore_scanner,
    ) -> runstore_code;
    pub fn runstore_scanner_record_bytes(scanner: *const runstore_scanner) -> usize;
    pub fn runstore_scanner_next(
        scanner: *mut runstore_scanner,
        capacity: usize,
        steps: *mut i64,
        values: *mut c_void,
        n: *mut usize,
    ) -> runstore_code;
    pub fn runstore_scanner_run(scanner: *const runstore_scanner, i: usize) -> runstore_run;
    pub fn runstore_scanner_release(scanner: *mut runstore_scanner);
}
