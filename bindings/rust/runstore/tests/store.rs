//! The crate over a real store: records of every number type, arrays and strings written and
//! read back; a view's bytes inside the segment file's mapping; scans with runs and steps;
//! writers on threads; the errors a caller meets; and a writing process that crashes losing
//! nothing it committed.
use runstore::{DType, ErrorCode, Name, Run, RunId, Store};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// A fresh directory under the target directory (a disk, not a tmpfs).
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_number_type_round_trips() {
    let dir = scratch("types");
    let store = Store::open(dir.join("s")).unwrap();
    let w = store.writer().unwrap();
    w.append(Run::Int(1), "i8", 0, -8i8).unwrap();
    w.append(Run::Int(1), "i16", 0, -16i16).unwrap();
    w.append(Run::Int(1), "i32", 0, -32i32).unwrap();
    w.append(Run::Int(1), "i64", 0, -64i64).unwrap();
    w.append(Run::Int(1), "u8", 0, 8u8).unwrap();
    w.append(Run::Int(1), "u16", 0, 16u16).unwrap();
    w.append(Run::Int(1), "u32", 0, 32u32).unwrap();
    w.append(Run::Int(1), "u64", 0, u64::MAX).unwrap();
    w.append(Run::Int(1), "f32", 0, 1.5f32).unwrap();
    w.append("exp-7", "f64", 3, 2.25f64).unwrap();
    w.append_array(Run::Int(1), "grid", 0, &[2, 3], &[1i32, 2, 3, 4, 5, 6])
        .unwrap();
    w.append_str(Run::Int(1), "note", 0, "ünïcode").unwrap();
    w.close().unwrap();

    let snap = store.refresh().unwrap();
    assert_eq!(snap.get::<i8>(1, "i8", 0).unwrap()[0], -8);
    assert_eq!(snap.get::<i16>(1, "i16", 0).unwrap()[0], -16);
    assert_eq!(snap.get::<i32>(1, "i32", 0).unwrap()[0], -32);
    assert_eq!(snap.get::<i64>(1, "i64", 0).unwrap()[0], -64);
    assert_eq!(snap.get::<u8>(1, "u8", 0).unwrap()[0], 8);
    assert_eq!(snap.get::<u16>(1, "u16", 0).unwrap()[0], 16);
    assert_eq!(snap.get::<u32>(1, "u32", 0).unwrap()[0], 32);
    assert_eq!(snap.get::<u64>(1, "u64", 0).unwrap()[0], u64::MAX);
    assert_eq!(snap.get::<f32>(1, "f32", 0).unwrap()[0], 1.5);
    assert_eq!(snap.get::<f64>("exp-7", "f64", 3).unwrap()[0], 2.25);
    let grid = snap.get::<i32>(1, "grid", 0).unwrap();
    assert_eq!(grid.shape(), &[2, 3]);
    assert_eq!(&grid[..], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(snap.get_string(1, "note", 0).unwrap(), "ünïcode");

    let names: Vec<String> = snap.series().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names.len(), 12);
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "in name order: {:?}",
        names
    );
    let info = snap.series_info("grid").unwrap();
    assert_eq!(
        (info.dtype, info.shape.clone(), info.count),
        (DType::Int32, vec![2, 3], 1)
    );
}

/// The address ranges of this process's mappings of `file` (from /proc/self/maps).
fn mappings_of(file: &str) -> Vec<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| l.ends_with(file))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_view_is_the_segment_files_mapping_not_a_copy() {
    let dir = scratch("zero_copy");
    let store = Store::open(dir.join("s")).unwrap();
    let w = store.writer().unwrap();
    let m: Vec<f64> = (0..512 * 512).map(|k| k as f64).collect();
    w.append_array(Run::Int(0), "m", 0, &[512, 512], &m)
        .unwrap();
    w.close().unwrap();
    let snap = store.refresh().unwrap();
    let view = snap.get::<f64>(0, "m", 0).unwrap();
    assert!(view.is_zero_copy());
    let segments: Vec<String> = std::fs::read_dir(dir.join("s/segments"))
        .unwrap()
        .map(|e| e.unwrap().path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".rss"))
        .collect();
    assert_eq!(segments.len(), 1);
    let start = view.as_ptr() as usize;
    let end = start + view.len() * 8;
    let inside = mappings_of(&segments[0])
        .iter()
        .any(|&(a, b)| a <= start && end <= b);
    assert!(
        inside,
        "the view's bytes {:#x}..{:#x} lie in no mapping of {}",
        start, end, segments[0]
    );
    assert_eq!(view.iter().sum::<f64>(), m.iter().sum::<f64>());
    // The snapshot's and the store's end do not end the view's bytes.
    drop(store);
    assert_eq!(view[512 * 512 - 1], (512 * 512 - 1) as f64);
}

#[test]
fn scans_choose_runs_and_steps() {
    let dir = scratch("scan");
    let store = Store::open(dir.join("s")).unwrap();
    let w = store.writer().unwrap();
    for step in 0..100i64 {
        w.append(Run::Int(1), "loss", step, step as f64).unwrap();
        w.append("b", "loss", step, -(step as f64)).unwrap();
        w.append_array(Run::Int(1), "pair", step, &[2], &[step, 2 * step])
            .unwrap();
    }
    w.commit().unwrap();
    let snap = store.refresh().unwrap();
    let all = snap.scan::<f64>("loss", None, None).unwrap();
    assert_eq!(all.len(), 200);
    let some = snap
        .scan::<f64>("loss", Some(&[Run::Str("b")]), Some(10..=19))
        .unwrap();
    assert_eq!(some.len(), 10);
    for i in 0..some.len() {
        assert_eq!(some.runs[i], RunId::Str("b".into()));
        assert_eq!(some.values[i], -(some.steps[i] as f64));
    }
    let runs: Vec<Run> = (0..1000).map(|i| Run::Int(10 + i % 5)).collect();
    let steps: Vec<i64> = (0..1000).map(|i| i / 5).collect();
    let values: Vec<f32> = (0..2000).map(|k| k as f32).collect();
    w.append_batch(&runs, &steps, "batch", &[2], &values)
        .unwrap();
    let int_runs: Vec<i64> = (0..1000).map(|i| 10 + i % 5).collect();
    w.append_batch_int(&int_runs, &steps, "ibatch", &[2], &values)
        .unwrap();
    let e = w
        .append_batch_int(&int_runs[1..], &steps, "ibatch", &[2], &values)
        .unwrap_err();
    assert!(e.message.contains("999 runs for 1000 steps"), "{}", e);
    let e = w
        .append_batch(&runs, &steps, "batch2", &[2], &values[1..])
        .unwrap_err();
    assert!(e.message.contains("batch2"), "{}", e);
    w.commit().unwrap();
    let snap = store.refresh().unwrap();
    let batch = snap
        .scan::<f32>("batch", Some(&[Run::Int(12)]), None)
        .unwrap();
    assert_eq!((batch.len(), batch.per_record), (200, 2));
    assert!((0..200).all(|i| batch.record(i)[0] == (5 * batch.steps[i] + 2) as f32 * 2.0));
    assert!(
        snap.series_info("batch2").is_err(),
        "a refused batch appends nothing"
    );
    let ibatch = snap.scan::<f32>("ibatch", None, None).unwrap();
    let batch_all = snap.scan::<f32>("batch", None, None).unwrap();
    assert_eq!(ibatch, batch_all, "the two forms write the same records");
    let pairs = snap.scan::<i64>("pair", None, None).unwrap();
    assert_eq!((pairs.len(), pairs.per_record), (100, 2));
    assert!((0..100).all(|i| pairs.record(i)[1] == 2 * pairs.steps[i]));
}

#[test]
fn writers_on_threads_and_a_reader_beside_them() {
    let dir = scratch("threads");
    let store = Arc::new(Store::open(dir.join("s")).unwrap());
    let writers: Vec<_> = (0..4i64)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let w = store.writer().unwrap();
                for step in 0..1000 {
                    w.append(Run::Int(t), "x", step, step as f64).unwrap();
                    if step % 100 == 99 {
                        w.commit().unwrap();
                    }
                }
                w.close().unwrap();
            })
        })
        .collect();
    let reader = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            for _ in 0..50 {
                let snap = store.refresh().unwrap();
                if let Ok(info) = snap.series_info("x") {
                    assert_eq!(info.count % 100, 0, "a reader sees whole commits only");
                }
            }
        })
    };
    for t in writers {
        t.join().unwrap();
    }
    reader.join().unwrap();
    assert_eq!(
        store.refresh().unwrap().series_info("x").unwrap().count,
        4000
    );
}

#[test]
fn errors_name_what_was_wrong() {
    let dir = scratch("errors");
    let store = Store::open(dir.join("s")).unwrap();
    let w = store.writer().unwrap();
    w.append(Run::Int(1), "loss", 0, 1.0f64).unwrap();
    let e = w.append(Run::Int(1), "loss", 1, 1i64).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("loss"), "{}", e);
    let e = w
        .append_array(Run::Int(1), "m", 0, &[2, 2], &[1.0f64, 2.0, 3.0])
        .unwrap_err();
    assert!(e.message.contains("shape [2, 2]"), "{}", e);
    let e = w.append(Run::Int(1), "bad\0name", 0, 1.0f64).unwrap_err();
    assert!(e.message.contains("NUL"), "{}", e);
    w.close().unwrap();
    let snap = store.refresh().unwrap();
    let e = snap.get::<f64>(1, "loss", 5).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    let e = snap.get::<f32>(1, "loss", 0).unwrap_err();
    assert!(e.message.contains("Float64"), "{}", e);
    let e = Store::open_read_only(dir.join("nothing")).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.contains("nothing"), "{}", e);
    let ro = Store::open_read_only(dir.join("s")).unwrap();
    assert!(ro.writer().is_err());
}

#[test]
fn a_name_made_once_appends_what_a_str_does() {
    let dir = scratch("names");
    let store = Store::open(dir.join("s")).unwrap();
    let w = store.writer().unwrap();
    let loss = Name::new("loss").unwrap();
    let count = Name::new("count").unwrap();
    let owned = String::from("loss");
    for step in 0..100i64 {
        // The three spellings of one series, the typed paths (f64, i64) and the generic one.
        match step % 3 {
            0 => w.append(Run::Int(1), &loss, step, step as f64).unwrap(),
            1 => w.append(Run::Int(1), "loss", step, step as f64).unwrap(),
            _ => w.append(Run::Int(1), &owned, step, step as f64).unwrap(),
        }
        w.append(Run::Int(1), &count, step, step).unwrap();
        w.append(Run::Int(1), "small", step, step as f32).unwrap();
        // A string run through the same calls (its run passed as a runstore_run, an
        // integer's in a register).
        w.append(Run::Str("exp-a"), &loss, step, -(step as f64))
            .unwrap();
        w.append("exp-a", &count, step, -step).unwrap();
        w.append("exp-a", "small", step, -(step as f32)).unwrap();
    }
    // The series' own writers: the same records of run 2, f64 and i64.
    {
        let loss2 = w.series("loss").unwrap();
        let count2 = w.series("count").unwrap();
        for step in 0..100i64 {
            loss2.append(2, step, 2.0 * step as f64).unwrap();
            count2.append(2, step, 2 * step).unwrap();
        }
        let e = count2.append(2, 100, 1.5f64).unwrap_err();
        assert!(e.message.contains("count"), "{}", e);
        let e = w.series("").unwrap().append(2, 0, 1.0).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(
            w.series("a\0b").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
    let e = w.append(Run::Int(1), &count, 100, 1.5f64).unwrap_err();
    assert!(e.message.contains("count"), "{}", e);
    assert_eq!(
        Name::new("a\0b").unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(loss.as_str(), "loss");
    w.close().unwrap();
    let snap = store.refresh().unwrap();
    for (run, sign) in [(Run::Int(1), 1i64), (Run::Str("exp-a"), -1)] {
        if sign == 1 {
            // Run 2, by the series' writers: twice run 1's.
            let runs = [Run::Int(2)];
            let l = snap.scan::<f64>("loss", Some(&runs[..]), None).unwrap();
            assert_eq!(
                l.values,
                (0..100).map(|s| 2.0 * s as f64).collect::<Vec<_>>()
            );
            let c = snap.scan::<i64>("count", Some(&runs[..]), None).unwrap();
            assert_eq!(c.values, (0..100).map(|s| 2 * s).collect::<Vec<_>>());
        }
        let runs = [run];
        let only = Some(&runs[..]);
        let l = snap.scan::<f64>("loss", only, None).unwrap();
        assert_eq!(
            l.values,
            (0..100).map(|s| (sign * s) as f64).collect::<Vec<_>>()
        );
        let c = snap.scan::<i64>("count", only, None).unwrap();
        assert_eq!(c.values, (0..100).map(|s| sign * s).collect::<Vec<_>>());
        let small = snap.scan::<f32>("small", only, None).unwrap();
        assert_eq!(
            small.values,
            (0..100).map(|s| (sign * s) as f32).collect::<Vec<_>>()
        );
    }
}

/// The child side of the crash test: commits `RUNSTORE_CRASH_COMMITTED` records, appends
/// more without committing, and aborts.
#[test]
fn crash_child() {
    let (dir, n) = match (
        std::env::var("RUNSTORE_CRASH_DIR"),
        std::env::var("RUNSTORE_CRASH_COMMITTED"),
    ) {
        (Ok(d), Ok(n)) => (d, n.parse::<i64>().unwrap()),
        _ => return, // run as a test of its own: nothing to do
    };
    let store = Store::open(&dir).unwrap();
    let w = store.writer().unwrap();
    for step in 0..n {
        w.append(Run::Int(7), "x", step, step as f64).unwrap();
        if step % 1000 == 999 {
            w.commit().unwrap();
        }
    }
    w.commit().unwrap();
    for step in n..n + 500 {
        w.append(Run::Int(7), "x", step, step as f64).unwrap();
    }
    std::process::abort();
}

#[test]
fn a_crash_of_the_writing_process_loses_nothing_committed() {
    let dir = scratch("crash");
    let store_dir = dir.join("s");
    let committed = 5_500i64;
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture"])
        .env("RUNSTORE_CRASH_DIR", &store_dir)
        .env("RUNSTORE_CRASH_COMMITTED", committed.to_string())
        .status()
        .unwrap();
    assert!(!status.success(), "the child aborts");
    let store = Store::open(&store_dir).unwrap();
    let snap = store.refresh().unwrap();
    let records = snap.scan::<f64>("x", None, None).unwrap();
    // Every committed record, each once; what was not committed may or may not be there.
    assert!(
        records.len() as i64 >= committed,
        "{} of {} committed records",
        records.len(),
        committed
    );
    let mut steps = records.steps.clone();
    steps.sort_unstable();
    steps.dedup();
    assert_eq!(steps.len(), records.len());
    assert!((0..committed).all(|s| steps.binary_search(&s).is_ok()));
    assert!(records
        .steps
        .iter()
        .zip(&records.values)
        .all(|(s, v)| *v == *s as f64));
}
