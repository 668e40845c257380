//! bench/api_bench.cc's workload through this crate (and so the C API), for
//! bench/rust_vs_cpp.py to compare with the C++ API:
//!
//!     cargo run --release --example throughput -- DIR
//!
//! 2,000,000 float64 scalars appended one call each and committed, then in calls of 10,000
//! (`append_batch_int`); 128 arrays of 1 MiB appended and committed; the arrays read back as
//! zero-copy views and summed (warm); 100,000 scalar point lookups. Each phase runs 5 times (the
//! appends to steps of their own) and prints two lines of its best, each line name, figure,
//! unit: its figure over the wall-clock time, then (`NAME.cpu`) over the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`, Linux: the calling thread's and the writer's own threads'),
//! which another process's work does not lengthen. DIR is removed and made again.
use runstore::{Run, Store};
use std::time::Instant;

/// `struct timespec` of 64-bit Linux, for `clock_gettime` (the crate depends on nothing
/// outside the standard library, which does not read a process's CPU time).
#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;

fn process_cpu_seconds() -> f64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is Linux's.
    let rc = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// How many times each phase runs; each figure is its best.
const REPS: i64 = 5;

/// A phase's two clocks: the wall's and the process's CPU time, in seconds.
#[derive(Clone, Copy)]
struct Times {
    wall: f64,
    cpu: f64,
}

impl Times {
    const NONE: Times = Times {
        wall: f64::MAX,
        cpu: f64::MAX,
    };
}

struct Stopwatch {
    wall0: Instant,
    cpu0: f64,
}

impl Stopwatch {
    fn start() -> Self {
        Stopwatch {
            wall0: Instant::now(),
            cpu0: process_cpu_seconds(),
        }
    }
    fn elapsed(&self) -> Times {
        Times {
            wall: self.wall0.elapsed().as_secs_f64(),
            cpu: process_cpu_seconds() - self.cpu0,
        }
    }
}

/// Runs `phase(r)` for r in 0..REPS and returns the shortest time of each clock: what the
/// phase costs when nothing else on the machine interferes.
fn best_of(mut phase: impl FnMut(i64) -> runstore::Result<()>) -> runstore::Result<Times> {
    let mut best = Times::NONE;
    for r in 0..REPS {
        let t0 = Stopwatch::start();
        phase(r)?;
        let t = t0.elapsed();
        best = Times {
            wall: best.wall.min(t.wall),
            cpu: best.cpu.min(t.cpu),
        };
    }
    Ok(best)
}

/// Prints `NAME FIGURE UNIT` and `NAME.cpu FIGURE UNIT`: `amount` over each time.
fn report(name: &str, amount: f64, t: Times, unit: &str) {
    println!("{} {:.3} {}", name, amount / t.wall, unit);
    println!("{}.cpu {:.3} {}", name, amount / t.cpu, unit);
}

fn main() -> runstore::Result<()> {
    let dir = std::env::args().nth(1).expect("usage: throughput DIR");
    let _ = std::fs::remove_dir_all(&dir);
    const SCALARS: i64 = 2_000_000;
    const ARRAYS: i64 = 128;
    const ELEMS: usize = 131_072;
    const GETS: i64 = 100_000;
    let store = Store::open(&dir)?;
    let w = store.writer()?;
    // Rep r of the appends writes steps of its own: the scalars from r * 20,000, the batches
    // from (REPS + r) * 20,000, the arrays from r * ARRAYS.
    // The series named once, as a loop appends to it: its writer (the name given to the C
    // API once, not measured at each call).
    let x = w.series("x")?;
    let best = best_of(|r| {
        let base = r * (SCALARS / 100);
        for i in 0..SCALARS {
            x.append(i % 100, base + i / 100, i as f64)?;
        }
        w.commit()
    })?;
    drop(x);
    report("append_scalars", SCALARS as f64 / 1e6, best, "M/s");

    // The same records again, 10,000 a call.
    let best = best_of(|r| {
        let base = (REPS + r) * (SCALARS / 100);
        for start in (0..SCALARS).step_by(10_000) {
            let runs: Vec<i64> = (start..start + 10_000).map(|i| i % 100).collect();
            let steps: Vec<i64> = (start..start + 10_000).map(|i| base + i / 100).collect();
            let values: Vec<f64> = (start..start + 10_000).map(|i| i as f64).collect();
            w.append_batch_int(&runs, &steps, "x", &[], &values)?;
        }
        w.commit()
    })?;
    report("append_batches", SCALARS as f64 / 1e6, best, "M/s");

    let a: Vec<f64> = (0..ELEMS).map(|k| k as f64).collect();
    let best = best_of(|r| {
        for k in 0..ARRAYS {
            w.append_array(Run::Int(0), "a", r * ARRAYS + k, &[ELEMS as i64], &a)?;
        }
        w.commit()
    })?;
    w.close()?;
    let gb = (ARRAYS as usize * ELEMS * 8) as f64 / 1e9;
    report("append_arrays", gb, best, "GB/s");

    let snap = store.refresh()?;
    let mut sum = 0.0;
    let best = best_of(|_| {
        sum = 0.0;
        for k in 0..ARRAYS {
            let v = snap.get::<f64>(Run::Int(0), "a", k)?;
            sum += v.iter().sum::<f64>();
        }
        Ok(())
    })?;
    let expected = ARRAYS as f64 * (ELEMS as f64 * (ELEMS as f64 - 1.0) / 2.0);
    assert_eq!(sum, expected, "the arrays read back");
    report("read_arrays", gb, best, "GB/s");

    let mut got = 0.0;
    let best = best_of(|_| {
        for i in 0..GETS {
            let at = (i * 7919) % SCALARS;
            got += snap.get::<f64>(Run::Int(at % 100), "x", at / 100)?[0];
        }
        Ok(())
    })?;
    report("point_gets", GETS as f64 / 1e3, best, "k/s");
    assert!(got > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
