//! Large matrices keyed by (s, t), written by one process and mapped back on demand by
//! another, without copying: what a spectral-sequence computation (sseq) needs for its
//! quasi-inverses, tens of GiB that must be on disk and loaded only where used.
//!
//!     cargo run --release --example sseq_matrices -- write DIR [S T DIM]
//!     cargo run --release --example sseq_matrices -- read DIR
//!
//! `write` stores an S x T grid of DIM x DIM u32 matrices (run = s, series "qi", step = t;
//! default 8 x 8 of 1024 x 1024, 4 MiB each), committing each row of the grid. `read` maps
//! every matrix of the store (`Snapshot::get_lazy`: nothing read yet), reads one row of each
//! and two matrices whole (each slice's stored chunks checked as it is taken), checks every
//! value it reads, and prints how far its resident memory grew against what the store holds:
//! the growth follows what it touched, not what it mapped. A row is read with the 4 KiB
//! chunks of the stored array that hold it (each checked), the array's table of chunk
//! checksums and the pages the kernel maps around what is touched, so the program exits 1 if
//! the growth is more than what it touched whole plus 1 MiB a matrix, or if any view is a
//! copy.
use runstore::{Run, Store};
use std::process::exit;

fn value(s: i64, t: i64, k: usize) -> u32 {
    (s as u32).wrapping_mul(1_000_003) ^ (t as u32).wrapping_mul(7919) ^ k as u32
}

/// This process's resident set, in bytes (VmRSS of /proc/self/status).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn write(dir: &str, s_count: i64, t_count: i64, dim: usize) -> runstore::Result<()> {
    let store = Store::open(dir)?;
    let w = store.writer()?;
    let mut m = vec![0u32; dim * dim];
    for s in 0..s_count {
        for t in 0..t_count {
            for (k, x) in m.iter_mut().enumerate() {
                *x = value(s, t, k);
            }
            w.append_array(Run::Int(s), "qi", t, &[dim as i64, dim as i64], &m)?;
        }
        w.commit()?;
    }
    w.close()?;
    println!(
        "wrote {} matrices of {} x {} u32 ({} MiB) to {}",
        s_count * t_count,
        dim,
        dim,
        ((s_count * t_count) as usize * dim * dim * 4) >> 20,
        dir
    );
    Ok(())
}

fn read(dir: &str) -> runstore::Result<bool> {
    let store = Store::open_read_only(dir)?;
    let snap = store.refresh()?;
    let info = snap.series_info("qi")?;
    let dim = info.shape[0] as usize;
    let before = rss();
    // Every matrix of the grid, mapped: found by asking for (s, t) until a row of the grid
    // ends. Nothing is read yet.
    let mut views = Vec::new();
    let mut runs = 0;
    for s in 0.. {
        let mut t = 0;
        while let Ok(v) = snap.get_lazy::<u32>(Run::Int(s), "qi", t) {
            views.push(((s, t), v));
            t += 1;
        }
        if t == 0 {
            break;
        }
        runs += 1;
    }
    let mapped = (views.len() * dim * dim * 4) as u64;
    let mut ok = views.iter().all(|(_, v)| v.is_zero_copy());
    // One row of each matrix, checked and read.
    for ((s, t), v) in &views {
        let row = (*s as usize * 31 + *t as usize * 17) % dim;
        let cells = v.get(row * dim..(row + 1) * dim)?;
        ok &= cells
            .iter()
            .enumerate()
            .all(|(c, x)| *x == value(*s, *t, row * dim + c));
    }
    // Two matrices whole.
    for ((s, t), v) in views.iter().take(2) {
        ok &= v
            .all()?
            .iter()
            .enumerate()
            .all(|(k, x)| *x == value(*s, *t, k));
    }
    let grown = rss().saturating_sub(before);
    let touched = 2 * (dim * dim * 4) as u64;
    let bound = touched + views.len() as u64 * (1 << 20);
    println!(
        "mapped {} matrices ({} MiB) of {} runs; touched a row of each and 2 whole ({} MiB); \
         resident memory grew {:.1} MiB (bound {} MiB); every view zero-copy: {}",
        views.len(),
        mapped >> 20,
        runs,
        touched >> 20,
        grown as f64 / 1048576.0,
        bound >> 20,
        views.iter().all(|(_, v)| v.is_zero_copy())
    );
    Ok(ok && grown <= bound && !views.is_empty())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: i64| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let result = match (args.first().map(String::as_str), args.get(1)) {
        (Some("write"), Some(dir)) => {
            write(dir, arg(2, 8), arg(3, 8), arg(4, 1024) as usize).map(|_| true)
        }
        (Some("read"), Some(dir)) => read(dir),
        _ => {
            eprintln!("usage: sseq_matrices write DIR [S T DIM] | read DIR");
            exit(2);
        }
    };
    match result {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("sseq_matrices: a value, a view or the memory bound was wrong");
            exit(1);
        }
        Err(e) => {
            eprintln!("sseq_matrices: {}", e);
            exit(1);
        }
    }
}
