//! The file parsers on damaged and hostile input (issue 34 C): thousands of files made from valid ones
//! by flipping bits, cutting, splicing and rewriting header numbers, each read by the `.npy`, checkpoint
//! and tune-cache parsers. Properties: never a panic, and never one allocation larger than the file's
//! size justifies (a header that claims 10^18 elements must be refused, not believed). Seeded, so a
//! failure repeats; `scripts/fuzz.sh` runs the same parsers under libFuzzer for longer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use lattice_gpu_formats::checkpoint::Checkpoint;
use lattice_gpu_formats::npy;
use lattice_gpu_host::engine::tunecache::TuneCache;
use rand::{Rng, SeedableRng};

/// Counts the largest single allocation of the thread that asked for it ([`largest_allocation`]).
struct Counting;

thread_local! {
    /// The largest allocation since the thread's last reset; `None`: not counting.
    static LARGEST: Cell<Option<usize>> = const { Cell::new(None) };
}

// SAFETY: forwards to the system allocator; the bookkeeping allocates nothing (a const thread-local).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if let Some(m) = l.get() {
            l.set(Some(m.max(size)));
        }
    });
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest single allocation `f` made on this thread.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(Some(0)));
    f();
    LARGEST.with(|l| l.replace(None)).unwrap_or(0)
}

/// What any parser may allocate at once whatever the file: buffers and headers.
const SLACK: usize = 1 << 17;

/// A scratch directory for this test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lattice-parsers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `n` damaged versions of `good`, seeded by `seed`: bits flipped, cut short, bytes inserted or
/// removed, decimal numbers in the header replaced by huge or odd ones, or random bytes.
fn damaged(good: &[u8], n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut v = good.to_vec();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..v.len().max(1));
            match rng.random_range(0..7) {
                0 if !v.is_empty() => v[at] ^= 1 << rng.random_range(0..8),
                1 => v.truncate(at),
                2 => v.insert(at.min(v.len()), rng.random()),
                3 if !v.is_empty() => {
                    v.remove(at);
                }
                4 | 5 => {
                    // A number replaced: sizes, lengths, counts, versions.
                    let digits: Vec<usize> =
                        (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
                    if let Some(&i) = digits.get(rng.random_range(0..digits.len().max(1))) {
                        let with = [
                            "99999999999999999999",
                            "18446744073709551615",
                            "0",
                            "-1",
                            "4294967296",
                            "1e9",
                        ][rng.random_range(0..6)];
                        v = replace_number(&v, i, with);
                    }
                }
                _ => {
                    v = (0..rng.random_range(0..200))
                        .map(|_| rng.random())
                        .collect()
                }
            }
        }
        out.push(v);
    }
    out
}

/// `bytes` with the run of decimal digits at `at` replaced by `with`.
fn replace_number(bytes: &[u8], at: usize, with: &str) -> Vec<u8> {
    let end = bytes[at..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(bytes.len(), |e| at + e);
    [&bytes[..at], with.as_bytes(), &bytes[end..]].concat()
}

/// Writes every damaged file to `path` in turn and parses it with `parse`, which must neither panic
/// nor allocate more at once than `allowed(file length)`.
fn survives(
    name: &str,
    good: &[u8],
    seed: u64,
    allowed: impl Fn(usize) -> usize,
    parse: impl Fn(&Path),
) {
    let dir = scratch(name);
    let path = dir.join("input");
    for (i, bytes) in damaged(good, 2000, seed).into_iter().enumerate() {
        std::fs::write(&path, &bytes).unwrap();
        let largest = largest_allocation(|| parse(&path));
        assert!(
            largest <= allowed(bytes.len()),
            "{name} case {i}: a file of {} bytes made the parser allocate {largest} bytes at once",
            bytes.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn npy_file() -> Vec<u8> {
    let dir = scratch("npy-source");
    let path = dir.join("a.npy");
    let data: Vec<f32> = (0..240).map(|i| i as f32 * 0.5).collect();
    npy::write_npy(&path, &[4, 6, 10], &data).unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn npy_reading_survives_damaged_files() {
    // Read as f64, a float32 file's values take twice its bytes.
    survives(
        "npy",
        &npy_file(),
        1,
        |len| 2 * len + SLACK,
        |p| {
            let _ = npy::read_npy::<f64>(p);
            let _ = npy::read_npy_shaped::<f32>(p, &[4, 6, 10]);
        },
    );
}

#[test]
fn checkpoint_reading_survives_damaged_files() {
    let dir = scratch("checkpoint-source");
    let path = dir.join("c.ckpt");
    Checkpoint::new("diffusion", 40)
        .param("size", "4x6x10")
        .param("kappa", 0.1)
        .array("field", &(0..240).map(|i| i as f32).collect::<Vec<_>>())
        .array("tags", &[1u8, 2, 3])
        .write(&path)
        .unwrap();
    let good = std::fs::read(&path).unwrap();
    survives(
        "checkpoint",
        &good,
        2,
        |len| len + SLACK,
        |p| {
            if let Ok(mut ck) = Checkpoint::read(p) {
                let _ = ck.take::<f32>("field", p);
            }
        },
    );
}

#[test]
fn tune_cache_reading_survives_damaged_files() {
    let good = b"# lattice-gpu tunecache v1\n\
        diffusion3d_f32\t256x256x256\tf32\tNVIDIA H100 80GB HBM3\t0123456789abcdef\t\
        block_x=128,block_y=1,march=2,variant=0\t0.0512\n\
        lbm_step_f32\t64x64x64\tf32\tNVIDIA H100 80GB HBM3\tfedcba9876543210\t\
        block_x=64,block_y=2,march=1,variant=1\t1.25\n";
    let dir = scratch("tunecache-source");
    std::fs::write(dir.join("good.tsv"), good).unwrap();
    let mut read = TuneCache::load(dir.join("good.tsv"));
    assert_eq!(read.len(), 2, "{:?}", read.take_warnings());
    // The file is read whole, then parsed line by line.
    survives(
        "tunecache",
        good,
        3,
        |len| 2 * len + SLACK,
        |p| {
            let mut c = TuneCache::load(p.to_path_buf());
            let _ = c.take_warnings();
        },
    );
}

#[test]
fn an_absurd_header_is_refused_without_allocating_it() {
    let dir = scratch("absurd");
    let path = dir.join("a.npy");
    let good = npy_file();
    let at = good.windows(10).position(|w| w == b"(4, 6, 10)").unwrap();
    let bytes = replace_number(&good, at + 1, "4000000000");
    std::fs::write(&path, &bytes).unwrap();
    let largest = largest_allocation(|| {
        let e = npy::read_npy::<f32>(&path).unwrap_err().to_string();
        assert!(e.contains("truncated") || e.contains("header"), "{e}");
    });
    assert!(largest <= SLACK, "allocated {largest} bytes");
}

#[test]
fn the_allocation_counter_sees_what_it_must() {
    let big = largest_allocation(|| drop(std::hint::black_box(vec![0u8; 3 << 20])));
    assert!(big >= 3 << 20, "{big}");
    assert!(largest_allocation(|| {}) < SLACK);
}
