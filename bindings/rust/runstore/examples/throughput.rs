//! bench/api_bench.cc's workload through this crate (and so the C API), for
//! bench/rust_vs_cpp.sh to compare with the C++ API:
//!
//!     cargo run --release --example throughput -- DIR
//!
//! 2,000,000 float64 scalars appended one call each and committed, then in calls of 10,000
//! (`append_batch_int`); 128 arrays of 1 MiB
//! appended and committed; the arrays read back as zero-copy views and summed (best of 3);
//! 100,000 scalar point lookups. Each line: name, figure, unit. DIR is removed and made again.
use runstore::{Run, Store};
use std::time::Instant;

fn main() -> runstore::Result<()> {
    let dir = std::env::args().nth(1).expect("usage: throughput DIR");
    let _ = std::fs::remove_dir_all(&dir);
    const SCALARS: i64 = 2_000_000;
    const ARRAYS: i64 = 128;
    const ELEMS: usize = 131_072;
    const GETS: i64 = 100_000;
    let store = Store::open(&dir)?;
    let w = store.writer()?;
    // The series named once, as a loop appends to it: its writer (the name given to the C
    // API once, not measured at each call).
    let x = w.series("x")?;
    let t0 = Instant::now();
    for i in 0..SCALARS {
        x.append(i % 100, i / 100, i as f64)?;
    }
    drop(x);
    w.commit()?;
    println!(
        "append_scalars {:.3} M/s",
        SCALARS as f64 / t0.elapsed().as_secs_f64() / 1e6
    );

    // The same records again, 10,000 a call.
    let t0 = Instant::now();
    for start in (0..SCALARS).step_by(10_000) {
        let runs: Vec<i64> = (start..start + 10_000).map(|i| i % 100).collect();
        let steps: Vec<i64> = (start..start + 10_000).map(|i| 100_000 + i / 100).collect();
        let values: Vec<f64> = (start..start + 10_000).map(|i| i as f64).collect();
        w.append_batch_int(&runs, &steps, "x", &[], &values)?;
    }
    w.commit()?;
    println!(
        "append_batches {:.3} M/s",
        SCALARS as f64 / t0.elapsed().as_secs_f64() / 1e6
    );

    let a: Vec<f64> = (0..ELEMS).map(|k| k as f64).collect();
    let t0 = Instant::now();
    for k in 0..ARRAYS {
        w.append_array(Run::Int(0), "a", k, &[ELEMS as i64], &a)?;
    }
    w.commit()?;
    w.close()?;
    let bytes = (ARRAYS as usize * ELEMS * 8) as f64;
    println!(
        "append_arrays {:.3} GB/s",
        bytes / t0.elapsed().as_secs_f64() / 1e9
    );

    let snap = store.refresh()?;
    let mut best = f64::MAX;
    let mut sum = 0.0;
    for _ in 0..3 {
        let t0 = Instant::now();
        sum = 0.0;
        for k in 0..ARRAYS {
            let v = snap.get::<f64>(Run::Int(0), "a", k)?;
            sum += v.iter().sum::<f64>();
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let expected = ARRAYS as f64 * (ELEMS as f64 * (ELEMS as f64 - 1.0) / 2.0);
    assert_eq!(sum, expected, "the arrays read back");
    println!("read_arrays {:.3} GB/s", bytes / best / 1e9);

    let t0 = Instant::now();
    let mut got = 0.0;
    for i in 0..GETS {
        let at = (i * 7919) % SCALARS;
        got += snap.get::<f64>(Run::Int(at % 100), "x", at / 100)?[0];
    }
    println!(
        "point_gets {:.3} k/s",
        GETS as f64 / t0.elapsed().as_secs_f64() / 1e3
    );
    assert!(got > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
