//! runstore from Rust: results written to disk as they are produced, by any
//! number of writers at once, crash-safe, and read back zero-copy.
//!
//! Safe wrappers over runstore's C API (`include/runstore/runstore.h`,
//! `docs/c_api.md`), with no dependency outside the standard library:
//!
//! ```no_run
//! use runstore::{Run, Store};
//!
//! let store = Store::open("results/matrices")?;
//! let writer = store.writer()?;
//! let m: Vec<f64> = vec![0.0; 1024 * 1024];
//! writer.append_array(Run::Int(3), "qi", 7, &[1024, 1024], &m)?;
//! writer.commit()?; // durable and visible when it returns
//! writer.close()?;
//!
//! let snapshot = store.refresh()?;
//! let view = snapshot.get::<f64>(Run::Int(3), "qi", 7)?; // a view of the file's mapping
//! assert_eq!(view.shape(), &[1024, 1024]);
//! assert_eq!(view[0], 0.0);
//! # Ok::<(), runstore::Error>(())
//! ```
//!
//! A [`View`] borrows the mapping of the segment file that holds the record:
//! its bytes are read from the page cache as they are touched, so a process
//! that maps many large arrays holds in memory only what it reads. Where a
//! record is stored compressed (or its bytes are not aligned for `T`), the
//! view holds a copy instead, and [`View::is_zero_copy`] says so.

mod ffi;

/// Debug (by type) and Drop (releasing the handle, which the type owns) of a handle's owner.
macro_rules! handle {
    ($owner:ident, $release:ident) => {
        impl fmt::Debug for $owner {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($owner)).finish_non_exhaustive()
            }
        }

        impl Drop for $owner {
            fn drop(&mut self) {
                // SAFETY: owned; released once (a writer left open is closed first).
                unsafe { ffi::$release(self.ptr) }
            }
        }
    };
}

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::mem::transmute_copy;
use std::ops::{Deref, RangeInclusive};
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

/// What went wrong: the kind, as the C API's `runstore_code`, and the library's message,
/// which names what was wrong (a path, a series, a limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
}

/// The kinds of failure (`runstore_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    NotFound,
    /// A file is damaged; the message names it and the offset.
    Corruption,
    IoError,
    InvalidArgument,
    NotSupported,
    AlreadyExists,
    /// A closed writer, a writer used in a child of fork().
    FailedPrecondition,
    /// Out of descriptors, memory or mappings: never damage.
    ResourceExhausted,
    Other(i32),
}

impl ErrorCode {
    fn of(code: c_int) -> ErrorCode {
        match code {
            1 => ErrorCode::NotFound,
            2 => ErrorCode::Corruption,
            3 => ErrorCode::IoError,
            4 => ErrorCode::InvalidArgument,
            5 => ErrorCode::NotSupported,
            6 => ErrorCode::AlreadyExists,
            7 => ErrorCode::FailedPrecondition,
            8 => ErrorCode::ResourceExhausted,
            other => ErrorCode::Other(other),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A call's code as a `Result`: the success test inlined into every call, the failure's
/// message read out of line.
#[inline(always)]
fn check(code: ffi::runstore_code) -> Result<()> {
    if code == ffi::RUNSTORE_OK {
        Ok(())
    } else {
        Err(failure(code))
    }
}

#[cold]
#[inline(never)]
fn failure(code: ffi::runstore_code) -> Error {
    // SAFETY: the library returns a NUL-terminated string of this thread's,
    // valid until its next call.
    let message = unsafe { CStr::from_ptr(ffi::runstore_last_error()) }
        .to_string_lossy()
        .into_owned();
    Error {
        code: ErrorCode::of(code),
        message,
    }
}

fn invalid(message: String) -> Error {
    Error {
        code: ErrorCode::InvalidArgument,
        message,
    }
}

thread_local! {
    /// The last series name this thread passed in, NUL-terminated: a writer logs the same
    /// few names over and over, and a record's write must not allocate or copy its name.
    static LAST_NAME: std::cell::RefCell<(String, CString)> =
        std::cell::RefCell::new((String::new(), CString::default()));
}

/// Calls `f` with `name` as the C API takes it (NUL-terminated).
fn with_name<R>(name: &str, f: impl FnOnce(*const std::os::raw::c_char) -> Result<R>) -> Result<R> {
    LAST_NAME.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != name {
            let c = c_string("series name", name)?;
            *last = (name.to_string(), c);
        }
        f(last.1.as_ptr())
    })
}

/// A series name made ready for the C API once (checked and NUL-terminated), for a loop that
/// appends a record a call: `let loss = Name::new("loss")?; w.append(run, &loss, step, v)?`
/// passes it as it is, where a `&str` is compared with the thread's last name first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name(CString);

impl Name {
    /// Fails (InvalidArgument) when `name` holds a NUL byte.
    pub fn new(name: &str) -> Result<Name> {
        Ok(Name(c_string("series name", name)?))
    }

    pub fn as_str(&self) -> &str {
        // A Name is made from a &str: its bytes are UTF-8.
        self.0.to_str().unwrap_or_default()
    }
}

/// What the append functions take as a series name: a `&str` (or `&String`) or a `&Name`.
pub trait SeriesName {
    /// Calls `f` with the name as the C API takes it (NUL-terminated).
    fn with_c<R>(&self, f: impl FnOnce(*const std::os::raw::c_char) -> Result<R>) -> Result<R>;
}

impl SeriesName for &str {
    fn with_c<R>(&self, f: impl FnOnce(*const std::os::raw::c_char) -> Result<R>) -> Result<R> {
        with_name(self, f)
    }
}

impl SeriesName for &String {
    fn with_c<R>(&self, f: impl FnOnce(*const std::os::raw::c_char) -> Result<R>) -> Result<R> {
        with_name(self.as_str(), f)
    }
}

impl SeriesName for &Name {
    fn with_c<R>(&self, f: impl FnOnce(*const std::os::raw::c_char) -> Result<R>) -> Result<R> {
        f(self.0.as_ptr())
    }
}

fn c_string(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| invalid(format!("{} {:?} holds a NUL byte", what, s)))
}

/// The library's version ("MAJOR.MINOR.PATCH").
pub fn version() -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::runstore_version()) }
        .to_string_lossy()
        .into_owned()
}

/// A run id as it is passed in: an integer, or a string (any bytes but a NUL-free name is
/// the common case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run<'a> {
    Int(i64),
    Str(&'a str),
}

impl From<i64> for Run<'static> {
    fn from(i: i64) -> Self {
        Run::Int(i)
    }
}

impl<'a> From<&'a str> for Run<'a> {
    fn from(s: &'a str) -> Self {
        Run::Str(s)
    }
}

impl<'a> From<&'a RunId> for Run<'a> {
    fn from(r: &'a RunId) -> Self {
        match r {
            RunId::Int(i) => Run::Int(*i),
            RunId::Str(s) => Run::Str(s),
        }
    }
}

impl<'a> Run<'a> {
    fn to_c(self) -> ffi::runstore_run {
        match self {
            Run::Int(i) => ffi::runstore_run {
                is_string: 0,
                i,
                str_: ptr::null(),
                len: 0,
            },
            Run::Str(s) => ffi::runstore_run {
                is_string: 1,
                i: 0,
                str_: s.as_ptr() as *const _,
                len: s.len(),
            },
        }
    }
}

/// A run id as it is read back, owned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunId {
    Int(i64),
    Str(String),
}

impl RunId {
    /// # Safety
    /// `r`'s string, if any, must be valid for `r.len` bytes.
    unsafe fn from_c(r: ffi::runstore_run) -> RunId {
        if r.is_string != 0 {
            let bytes = if r.len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(r.str_ as *const u8, r.len)
            };
            RunId::Str(String::from_utf8_lossy(bytes).into_owned())
        } else {
            RunId::Int(r.i)
        }
    }
}

/// The type of a series' records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    String,
    Bytes,
}

impl DType {
    fn code(self) -> c_int {
        self as c_int + 1
    }
    fn of(code: c_int) -> Option<DType> {
        const ALL: [DType; 13] = [
            DType::Bool,
            DType::Int8,
            DType::Int16,
            DType::Int32,
            DType::Int64,
            DType::UInt8,
            DType::UInt16,
            DType::UInt32,
            DType::UInt64,
            DType::Float32,
            DType::Float64,
            DType::String,
            DType::Bytes,
        ];
        if (1..=13).contains(&code) {
            Some(ALL[(code - 1) as usize])
        } else {
            None
        }
    }
}

/// A number type whose records a [`View`] can show in place: every bit pattern of its size
/// is a valid value.
///
/// # Safety
/// Implemented only for the plain number types, whose `DTYPE` is theirs.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {
        $(unsafe impl Element for $t { const DTYPE: DType = DType::$d; })*
    };
}
element!(i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64, u8 => UInt8, u16 => UInt16,
         u32 => UInt32, u64 => UInt64, f32 => Float32, f64 => Float64);

/// A store, opened. Any number of stores, writers and snapshots may be open at once, in
/// one process or many, on one thread or several.
pub struct Store {
    ptr: *mut ffi::runstore_store,
    path: std::path::PathBuf,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

// SAFETY: every C API function may be called from several threads at once.
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

impl Store {
    fn open_with(path: &Path, flags: u32) -> Result<Store> {
        // SAFETY: the library's ABI is the one these declarations describe.
        let abi = unsafe { ffi::runstore_abi_version() };
        if abi != ffi::RUNSTORE_C_ABI_VERSION {
            return Err(Error {
                code: ErrorCode::NotSupported,
                message: format!(
                    "librunstore_c has ABI version {}, this crate was written for {}",
                    abi,
                    ffi::RUNSTORE_C_ABI_VERSION
                ),
            });
        }
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| invalid(format!("path {:?} holds a NUL byte", path)))?;
        let mut out = ptr::null_mut();
        // SAFETY: a valid C string and out-pointer.
        check(unsafe { ffi::runstore_open(c.as_ptr(), flags, &mut out) })?;
        Ok(Store {
            ptr: out,
            path: path.to_path_buf(),
        })
    }

    /// Opens the store at `path`, creating it if there is none.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(path.as_ref(), 0)
    }

    /// Opens the store at `path` to read only (no writers; NotFound where there is none).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(path.as_ref(), ffi::RUNSTORE_OPEN_READ_ONLY)
    }

    /// A writer of its own segment files: one per thread or process that writes.
    pub fn writer(&self) -> Result<Writer> {
        let mut out = ptr::null_mut();
        // SAFETY: a live store; a null id makes one.
        check(unsafe { ffi::runstore_writer_open(self.ptr, ptr::null(), &mut out) })?;
        Ok(Writer { ptr: out })
    }

    /// What writers committed, as a new snapshot.
    pub fn refresh(&self) -> Result<Snapshot> {
        let mut out = ptr::null_mut();
        // SAFETY: a live store.
        check(unsafe { ffi::runstore_refresh(self.ptr, &mut out) })?;
        Ok(Snapshot { ptr: out })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: owned; snapshots, views and writers made from it stay valid.
        unsafe { ffi::runstore_close(self.ptr) }
    }
}

/// Appends records to a store. Records are visible to readers that refresh after a
/// [`flush`](Writer::flush) or a [`commit`](Writer::commit), durable after a commit; a
/// writer dropped without [`close`](Writer::close) is closed (committing what it holds) and
/// its errors are lost.
pub struct Writer {
    ptr: *mut ffi::runstore_writer,
}

// SAFETY: a writer may be used from several threads at once.
unsafe impl Send for Writer {}
unsafe impl Sync for Writer {}

impl Writer {
    #[allow(clippy::too_many_arguments)]
    fn append_raw(
        &self,
        run: Run<'_>,
        name: &str,
        step: i64,
        dtype: DType,
        shape: &[i64],
        data: *const u8,
        nbytes: usize,
    ) -> Result<()> {
        // SAFETY: `data` holds `nbytes` bytes and `shape` its dimensions, both read before
        // the call returns.
        with_name(name, |name| {
            check(unsafe {
                ffi::runstore_append(
                    self.ptr,
                    run.to_c(),
                    name,
                    step,
                    dtype.code(),
                    if shape.is_empty() {
                        ptr::null()
                    } else {
                        shape.as_ptr()
                    },
                    shape.len() as c_int,
                    data as *const _,
                    nbytes,
                )
            })
        })
    }

    /// One number: the record of `run` at `step` in series `name` (a `&str`, or a `&Name`
    /// made once for a loop).
    pub fn append<'r, T: Element>(
        &self,
        run: impl Into<Run<'r>>,
        name: impl SeriesName,
        step: i64,
        value: T,
    ) -> Result<()> {
        let run = run.into();
        name.with_c(|name| {
            // SAFETY (all): T is the type its DTYPE names (Element's contract), and `value` is
            // read before the call returns. f64 and i64 go by value through the C API's
            // functions of them, which check less, an integer run in a register (a
            // runstore_run made for the call and copied into it stalls the processor); the
            // other types through the generic append.
            check(unsafe {
                match (T::DTYPE, run) {
                    (DType::Float64, Run::Int(i)) => ffi::runstore_append_f64_int(
                        self.ptr,
                        i,
                        name,
                        step,
                        transmute_copy(&value),
                    ),
                    (DType::Int64, Run::Int(i)) => ffi::runstore_append_i64_int(
                        self.ptr,
                        i,
                        name,
                        step,
                        transmute_copy(&value),
                    ),
                    (DType::Float64, run) => ffi::runstore_append_f64(
                        self.ptr,
                        run.to_c(),
                        name,
                        step,
                        transmute_copy(&value),
                    ),
                    (DType::Int64, run) => ffi::runstore_append_i64(
                        self.ptr,
                        run.to_c(),
                        name,
                        step,
                        transmute_copy(&value),
                    ),
                    (_, run) => ffi::runstore_append(
                        self.ptr,
                        run.to_c(),
                        name,
                        step,
                        T::DTYPE.code(),
                        ptr::null(),
                        0,
                        &value as *const T as *const _,
                        std::mem::size_of::<T>(),
                    ),
                }
            })
        })
    }

    /// An array of `shape` (row-major), `data` holding its elements.
    pub fn append_array<'r, T: Element>(
        &self,
        run: impl Into<Run<'r>>,
        name: &str,
        step: i64,
        shape: &[i64],
        data: &[T],
    ) -> Result<()> {
        let elements = shape
            .iter()
            .try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
        if elements != Some(data.len() as i64) {
            return Err(invalid(format!(
                "append_array of series {:?}: shape {:?} does not hold the {} elements given",
                name,
                shape,
                data.len()
            )));
        }
        self.append_raw(
            run.into(),
            name,
            step,
            T::DTYPE,
            shape,
            data.as_ptr() as *const u8,
            std::mem::size_of_val(data),
        )
    }

    /// `steps.len()` records of series `name` in one call: record i is `runs[i]` at
    /// `steps[i]`, its value the i-th of `values`, which holds them one after another, each
    /// of `record_shape` (empty for scalars). Every record is checked before any is
    /// appended. The way to append many records at the C++ API's speed: one call through
    /// the C boundary a batch, not a record.
    pub fn append_batch<T: Element>(
        &self,
        runs: &[Run<'_>],
        steps: &[i64],
        name: &str,
        record_shape: &[i64],
        values: &[T],
    ) -> Result<()> {
        let c_runs: Vec<ffi::runstore_run> = runs.iter().map(|r| r.to_c()).collect();
        // SAFETY: the runs (whose strings `runs` borrows) live through the call.
        self.batch(
            runs.len(),
            steps,
            name,
            record_shape,
            values,
            |call| unsafe { call.run(ffi::runstore_append_batch, c_runs.as_ptr()) },
        )
    }

    /// [`append_batch`](Writer::append_batch) with integer runs, a column of them: no run is
    /// converted on this side of the C boundary.
    pub fn append_batch_int<T: Element>(
        &self,
        runs: &[i64],
        steps: &[i64],
        name: &str,
        record_shape: &[i64],
        values: &[T],
    ) -> Result<()> {
        // SAFETY: the runs live through the call.
        self.batch(
            runs.len(),
            steps,
            name,
            record_shape,
            values,
            |call| unsafe { call.run(ffi::runstore_append_batch_int, runs.as_ptr()) },
        )
    }

    fn batch<T: Element>(
        &self,
        run_count: usize,
        steps: &[i64],
        name: &str,
        record_shape: &[i64],
        values: &[T],
        f: impl FnOnce(BatchCall) -> ffi::runstore_code,
    ) -> Result<()> {
        if run_count != steps.len() {
            return Err(invalid(format!(
                "append_batch of series {:?}: {} runs for {} steps",
                name,
                run_count,
                steps.len()
            )));
        }
        with_name(name, |name| {
            check(f(BatchCall {
                writer: self.ptr,
                steps,
                name,
                dtype: T::DTYPE.code(),
                shape: record_shape,
                values: values.as_ptr() as *const _,
                nbytes: std::mem::size_of_val(values),
            }))
        })
    }

    /// A UTF-8 string.
    pub fn append_str<'r>(
        &self,
        run: impl Into<Run<'r>>,
        name: &str,
        step: i64,
        value: &str,
    ) -> Result<()> {
        self.append_raw(
            run.into(),
            name,
            step,
            DType::String,
            &[],
            value.as_ptr(),
            value.len(),
        )
    }

    /// Visible to readers that refresh, safe from a crash of this process; durable at the
    /// next commit.
    pub fn flush(&self) -> Result<()> {
        // SAFETY: a live writer.
        check(unsafe { ffi::runstore_flush(self.ptr) })
    }

    /// Everything appended so far, durable and visible when it returns.
    pub fn commit(&self) -> Result<()> {
        // SAFETY: a live writer.
        check(unsafe { ffi::runstore_commit(self.ptr) })
    }

    /// Marks `run` as resumed at `step` after a preemption: its records at steps >= `step`
    /// committed before are hidden from readers.
    pub fn resume<'r>(&self, run: impl Into<Run<'r>>, step: i64) -> Result<()> {
        // SAFETY: a live writer.
        check(unsafe { ffi::runstore_resume(self.ptr, run.into().to_c(), step) })
    }

    /// The writer of series `name` of this writer, for a loop that appends a record a call to
    /// it: integer runs, `f64` or `i64` values, the name passed to the C API once rather than
    /// at each call. It borrows the writer, which cannot be closed while it lives.
    pub fn series(&self, name: &str) -> Result<SeriesWriter<'_>> {
        let name = c_string("series name", name)?;
        let mut out = ptr::null_mut();
        // SAFETY: a live writer; the name is copied by the call.
        check(unsafe { ffi::runstore_series_writer_open(self.ptr, name.as_ptr(), &mut out) })?;
        Ok(SeriesWriter {
            ptr: out,
            _writer: PhantomData,
        })
    }

    /// Commits what was appended and seals the writer's segment.
    pub fn close(self) -> Result<()> {
        // SAFETY: a live writer; released by Drop.
        check(unsafe { ffi::runstore_writer_close(self.ptr) })
    }
}

handle!(Writer, runstore_writer_release);

/// One series of a [`Writer`], named once ([`Writer::series`]): the fastest way to append a
/// record a call. Checks what [`Writer::append`] checks, at each call.
///
/// It borrows its writer, so the writer cannot be closed (or dropped) while it lives:
///
/// ```compile_fail,E0505
/// let store = runstore::Store::open("/tmp/never-made")?;
/// let w = store.writer()?;
/// let loss = w.series("loss")?;
/// w.close()?; // error: `w` is borrowed by `loss`
/// loss.append(1, 0, 0.5)?;
/// # Ok::<(), runstore::Error>(())
/// ```
pub struct SeriesWriter<'w> {
    ptr: *mut ffi::runstore_series_writer,
    _writer: PhantomData<&'w Writer>,
}

// SAFETY: the C API's series writer holds its name and its writer's pointer, and appends
// through the writer, which may be used from several threads at once.
unsafe impl Send for SeriesWriter<'_> {}
unsafe impl Sync for SeriesWriter<'_> {}

impl SeriesWriter<'_> {
    /// One record of run `run` (an integer id) at `step`.
    #[inline]
    pub fn append<T: SeriesValue>(&self, run: i64, step: i64, value: T) -> Result<()> {
        // SAFETY: a live series writer of a live writer (it borrows the writer).
        check(unsafe { (T::APPEND)(self.ptr, run, step, value) })
    }
}

impl fmt::Debug for SeriesWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeriesWriter").finish_non_exhaustive()
    }
}

impl Drop for SeriesWriter<'_> {
    fn drop(&mut self) {
        // SAFETY: owned, released once, before its writer (which it borrows).
        unsafe { ffi::runstore_series_writer_release(self.ptr) }
    }
}

/// What [`SeriesWriter::append`] takes: `f64` and `i64` (sealed).
pub trait SeriesValue: series_value::Sealed + Copy {}
impl SeriesValue for f64 {}
impl SeriesValue for i64 {}

mod series_value {
    use crate::ffi;

    /// The C API's append of a value of type `T` through a series writer.
    pub type Append<T> =
        unsafe extern "C" fn(*mut ffi::runstore_series_writer, i64, i64, T) -> ffi::runstore_code;

    pub trait Sealed: Copy {
        const APPEND: Append<Self>;
    }

    impl Sealed for f64 {
        const APPEND: Append<f64> = ffi::runstore_series_writer_append_f64;
    }

    impl Sealed for i64 {
        const APPEND: Append<i64> = ffi::runstore_series_writer_append_i64;
    }
}

/// The arguments of a batch append but its runs, for either form of the C call.
struct BatchCall<'a> {
    writer: *mut ffi::runstore_writer,
    steps: &'a [i64],
    name: *const std::os::raw::c_char,
    dtype: c_int,
    shape: &'a [i64],
    values: *const std::os::raw::c_void,
    nbytes: usize,
}

/// A batch append of the C API, its runs of type R.
type BatchFn<R> = unsafe extern "C" fn(
    *mut ffi::runstore_writer,
    *const R,
    *const i64,
    usize,
    *const std::os::raw::c_char,
    c_int,
    *const i64,
    c_int,
    *const std::os::raw::c_void,
    usize,
) -> ffi::runstore_code;

impl<'a> BatchCall<'a> {
    /// # Safety
    /// `runs` points to `steps.len()` runs, valid through the call.
    unsafe fn run<R>(self, f: BatchFn<R>, runs: *const R) -> ffi::runstore_code {
        // The steps, shape and values are read before the call returns; the library checks
        // the values' length against them.
        f(
            self.writer,
            runs,
            self.steps.as_ptr(),
            self.steps.len(),
            self.name,
            self.dtype,
            if self.shape.is_empty() {
                ptr::null()
            } else {
                self.shape.as_ptr()
            },
            self.shape.len() as c_int,
            self.values,
            self.nbytes,
        )
    }
}

/// A series: its name, type, shape of a record and visible records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesInfo {
    pub name: String,
    pub dtype: DType,
    /// Of a record; empty for scalars and for series of variable shape.
    pub shape: Vec<i64>,
    pub variable_shape: bool,
    pub count: u64,
}

impl SeriesInfo {
    /// # Safety
    /// `i`'s pointers must be valid.
    unsafe fn from_c(i: &ffi::runstore_series_info) -> SeriesInfo {
        let shape = if i.rank > 0 {
            std::slice::from_raw_parts(i.shape, i.rank as usize).to_vec()
        } else {
            Vec::new()
        };
        SeriesInfo {
            name: CStr::from_ptr(i.name).to_string_lossy().into_owned(),
            dtype: DType::of(i.dtype).unwrap_or(DType::Bytes),
            shape,
            variable_shape: i.variable_shape != 0,
            count: i.count,
        }
    }
}

/// What a store held at one refresh. Views read from it stay valid while it lives (and the
/// bytes behind them while the view does, whatever else is released or compacted).
pub struct Snapshot {
    ptr: *mut ffi::runstore_snapshot,
}

// SAFETY: snapshots are immutable and read from several threads at once.
unsafe impl Send for Snapshot {}
unsafe impl Sync for Snapshot {}

impl Snapshot {
    /// Its series (not runstore's own '~' series), in name order.
    pub fn series(&self) -> Result<Vec<SeriesInfo>> {
        let mut list = ptr::null_mut();
        // SAFETY: a live snapshot; the list is read, then released.
        unsafe {
            check(ffi::runstore_list_series(self.ptr, &mut list))?;
            let n = ffi::runstore_series_list_size(list);
            let out = (0..n)
                .map(|i| SeriesInfo::from_c(&ffi::runstore_series_list_at(list, i)))
                .collect();
            ffi::runstore_series_list_release(list);
            Ok(out)
        }
    }

    /// Series `name` (NotFound if there is none).
    pub fn series_info(&self, name: &str) -> Result<SeriesInfo> {
        let name = c_string("series name", name)?;
        let mut info = ffi::runstore_series_info {
            name: ptr::null(),
            dtype: 0,
            variable_shape: 0,
            rank: 0,
            shape: ptr::null(),
            count: 0,
        };
        // SAFETY: a live snapshot; the info's strings live as long as it.
        unsafe {
            check(ffi::runstore_series(self.ptr, name.as_ptr(), &mut info))?;
            Ok(SeriesInfo::from_c(&info))
        }
    }

    fn get_raw(
        &self,
        run: Run<'_>,
        name: &str,
        step: i64,
        lazy: bool,
    ) -> Result<*mut ffi::runstore_value> {
        let mut out = ptr::null_mut();
        // SAFETY: a live snapshot.
        with_name(name, |c| {
            check(unsafe {
                if lazy {
                    ffi::runstore_get_lazy(self.ptr, run.to_c(), c, step, &mut out)
                } else {
                    ffi::runstore_get(self.ptr, run.to_c(), c, step, &mut out)
                }
            })
        })?;
        Ok(out)
    }

    fn typed<T: Element>(
        &self,
        run: Run<'_>,
        name: &str,
        step: i64,
        lazy: bool,
    ) -> Result<View<'_, T>> {
        let value = self.get_raw(run, name, step, lazy)?;
        // SAFETY: a live value, released by the View or here.
        unsafe {
            let dtype = DType::of(ffi::runstore_value_dtype(value));
            if dtype != Some(T::DTYPE) {
                ffi::runstore_value_release(value);
                return Err(invalid(format!(
                    "series {:?} holds {:?}, not {:?}",
                    name,
                    dtype,
                    T::DTYPE
                )));
            }
            Ok(View::new(value))
        }
    }

    /// The record of `run` at `step` in series `name`, checked whole, as a view of numbers of
    /// type `T` (InvalidArgument if the series holds another type).
    pub fn get<'r, T: Element>(
        &self,
        run: impl Into<Run<'r>>,
        name: &str,
        step: i64,
    ) -> Result<View<'_, T>> {
        self.typed(run.into(), name, step, false)
    }

    /// The same record, not read until asked for: each slice taken from it is checked (the
    /// stored chunks it touches, each once) and only its pages are read, so that a process
    /// holds in memory the parts of large arrays it uses and no more.
    pub fn get_lazy<'r, T: Element>(
        &self,
        run: impl Into<Run<'r>>,
        name: &str,
        step: i64,
    ) -> Result<LazyView<'_, T>> {
        Ok(LazyView {
            inner: self.typed(run.into(), name, step, true)?,
        })
    }

    /// A string record, copied.
    pub fn get_string<'r>(&self, run: impl Into<Run<'r>>, name: &str, step: i64) -> Result<String> {
        let value = self.get_raw(run.into(), name, step, false)?;
        // SAFETY: a live value, read and released here.
        unsafe {
            let n = ffi::runstore_value_nbytes(value);
            let data = ffi::runstore_value_data(value) as *const u8;
            let s = if n == 0 {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(data, n)).into_owned()
            };
            ffi::runstore_value_release(value);
            Ok(s)
        }
    }

    /// The records of series `name` of type `T`, in the store's order: of `runs` only, and of
    /// steps in `steps` only, where given.
    pub fn scan<T: Element>(
        &self,
        name: &str,
        runs: Option<&[Run<'_>]>,
        steps: Option<RangeInclusive<i64>>,
    ) -> Result<Records<T>> {
        let info = self.series_info(name)?;
        if info.dtype != T::DTYPE {
            return Err(invalid(format!(
                "series {:?} holds {:?}, not {:?}",
                name,
                info.dtype,
                T::DTYPE
            )));
        }
        let c_runs: Vec<ffi::runstore_run> = runs.unwrap_or(&[]).iter().map(|r| r.to_c()).collect();
        let (has_steps, first, last) = match &steps {
            Some(r) => (1, *r.start(), *r.end()),
            None => (0, 0, 0),
        };
        let options = ffi::runstore_scan_options {
            runs: if runs.is_some() {
                c_runs.as_ptr()
            } else {
                ptr::null()
            },
            run_count: c_runs.len(),
            has_steps,
            first_step: first,
            last_step: last,
        };
        let c = c_string("series name", name)?;
        let mut scanner = ptr::null_mut();
        // SAFETY: a live snapshot; `options` and its runs outlive the call; the scanner is
        // read into buffers of the size it states, then released.
        unsafe {
            check(ffi::runstore_scan(
                self.ptr,
                c.as_ptr(),
                &options,
                &mut scanner,
            ))?;
            let record = ffi::runstore_scanner_record_bytes(scanner);
            let per = record / std::mem::size_of::<T>();
            let mut out = Records {
                runs: Vec::new(),
                steps: Vec::new(),
                values: Vec::new(),
                per_record: per,
            };
            const BATCH: usize = 4096;
            let mut steps_buf = vec![0i64; BATCH];
            let mut values_buf: Vec<T> = Vec::with_capacity(BATCH * per);
            loop {
                let mut n = 0usize;
                let code = ffi::runstore_scanner_next(
                    scanner,
                    BATCH,
                    steps_buf.as_mut_ptr(),
                    values_buf.as_mut_ptr() as *mut _,
                    &mut n,
                );
                if let Err(e) = check(code) {
                    ffi::runstore_scanner_release(scanner);
                    return Err(e);
                }
                if n == 0 {
                    break;
                }
                values_buf.set_len(n * per);
                out.values.extend_from_slice(&values_buf);
                values_buf.set_len(0);
                out.steps.extend_from_slice(&steps_buf[..n]);
                for i in 0..n {
                    out.runs
                        .push(RunId::from_c(ffi::runstore_scanner_run(scanner, i)));
                }
            }
            ffi::runstore_scanner_release(scanner);
            Ok(out)
        }
    }
}

handle!(Snapshot, runstore_snapshot_release);

/// The records a scan read: record i is `runs[i]`, `steps[i]`, and `record(i)` (its
/// elements, `per_record` of them).
#[derive(Debug, Clone, PartialEq)]
pub struct Records<T> {
    pub runs: Vec<RunId>,
    pub steps: Vec<i64>,
    pub values: Vec<T>,
    pub per_record: usize,
}

impl<T> Records<T> {
    pub fn len(&self) -> usize {
        self.steps.len()
    }
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
    pub fn record(&self, i: usize) -> &[T] {
        &self.values[i * self.per_record..(i + 1) * self.per_record]
    }
}

/// One record's numbers, read in place: a slice of the segment file's mapping where the
/// record is stored uncompressed, else of a copy. Borrows the snapshot it came from.
pub struct View<'s, T: Element> {
    value: *mut ffi::runstore_value,
    data: *const T,
    len: usize,
    shape: Vec<i64>,
    copy: Option<Vec<T>>,
    _snapshot: PhantomData<&'s Snapshot>,
}

// SAFETY: the bytes are immutable and the value's release is thread-safe.
unsafe impl<'s, T: Element> Send for View<'s, T> {}
unsafe impl<'s, T: Element> Sync for View<'s, T> {}

impl<'s, T: Element> View<'s, T> {
    /// # Safety
    /// `value` is a live value of dtype `T::DTYPE`, owned by the view from here on.
    unsafe fn new(value: *mut ffi::runstore_value) -> View<'s, T> {
        let nbytes = ffi::runstore_value_nbytes(value);
        let data = ffi::runstore_value_data(value) as *const T;
        let rank = ffi::runstore_value_rank(value);
        let shape = if rank > 0 {
            std::slice::from_raw_parts(ffi::runstore_value_shape(value), rank as usize).to_vec()
        } else {
            Vec::new()
        };
        let len = nbytes / std::mem::size_of::<T>();
        // A record whose bytes are not aligned for T is copied (a slice must be aligned).
        let copy = if len > 0 && (data as usize) % std::mem::align_of::<T>() != 0 {
            let mut v: Vec<T> = Vec::with_capacity(len);
            ptr::copy_nonoverlapping(
                data as *const u8,
                v.as_mut_ptr() as *mut u8,
                len * std::mem::size_of::<T>(),
            );
            v.set_len(len);
            Some(v)
        } else {
            None
        };
        View {
            value,
            data,
            len,
            shape,
            copy,
            _snapshot: PhantomData,
        }
    }

    /// The record's dimensions (empty for a scalar).
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Whether the slice lies in the segment file's mapping (no byte of it copied).
    pub fn is_zero_copy(&self) -> bool {
        // SAFETY: a live value.
        self.copy.is_none() && unsafe { ffi::runstore_value_zero_copy(self.value) } != 0
    }
}

impl<'s, T: Element> Deref for View<'s, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.copy {
            Some(v) => v,
            None if self.len == 0 => &[],
            // SAFETY: `len` aligned elements, valid while the value lives.
            None => unsafe { std::slice::from_raw_parts(self.data, self.len) },
        }
    }
}

impl<'s, T: Element> fmt::Debug for View<'s, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape)
            .field("zero_copy", &self.is_zero_copy())
            .finish()
    }
}

impl<'s, T: Element> Drop for View<'s, T> {
    fn drop(&mut self) {
        // SAFETY: owned.
        unsafe { ffi::runstore_value_release(self.value) }
    }
}

/// A record whose bytes are checked as they are taken ([`Snapshot::get_lazy`]): a slice of it
/// is a view of the segment file's mapping once the chunks under it are checked.
pub struct LazyView<'s, T: Element> {
    inner: View<'s, T>,
}

impl<'s, T: Element> LazyView<'s, T> {
    /// The record's dimensions (empty for a scalar).
    pub fn shape(&self) -> &[i64] {
        self.inner.shape()
    }

    /// Its number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Whether its slices lie in the segment file's mapping.
    pub fn is_zero_copy(&self) -> bool {
        self.inner.is_zero_copy()
    }

    /// Elements `range`, their stored chunks checked first (Corruption naming the file where
    /// they do not match; the rest of the record still reads).
    pub fn get(&self, range: std::ops::Range<usize>) -> Result<&[T]> {
        if range.start > range.end || range.end > self.inner.len {
            return Err(invalid(format!(
                "elements {:?} of a record of {}",
                range, self.inner.len
            )));
        }
        let size = std::mem::size_of::<T>() as u64;
        // SAFETY: a live value; the range lies within it.
        check(unsafe {
            ffi::runstore_value_check(
                self.inner.value,
                range.start as u64 * size,
                (range.end - range.start) as u64 * size,
            )
        })?;
        Ok(&self.inner[range])
    }

    /// Every element, checked.
    pub fn all(&self) -> Result<&[T]> {
        self.get(0..self.inner.len)
    }
}

impl<'s, T: Element> fmt::Debug for LazyView<'s, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyView")
            .field("view", &self.inner)
            .finish()
    }
}
