//! Checkpoints of an advection run ([`lattice_gpu_formats::checkpoint`]): the field in f32 as the
//! run holds it, of the whole grid whatever the split ([`Advection::state`]), the steps done, and
//! what a resumed run must share with the one that wrote it. The velocities are steady and rebuilt
//! from the run's options, so they are not stored; their checksum is, with the initial field's.
//!
//! [`Advection::state`]: crate::Advection::state

use std::path::Path;

use lattice_gpu_formats::checkpoint::Checkpoint;
use lattice_gpu_formats::IoError;
use lattice_gpu_host::health::first_non_finite;
use rayon::prelude::*;

use crate::{Problem, Result};

/// The application named in the checkpoint's header.
pub const APPLICATION: &str = "advection";

/// The checkpoint's file name in its directory.
pub const FILE: &str = "advection.ckpt";

/// The parameters a resumed run must share with the run that wrote the checkpoint: `named` (the
/// case and the options that make it, as the caller names them), then the grid, `dt / h`, and the
/// checksums of the initial field and the velocities, which cover what options cannot (a file's
/// contents). A value reads back exactly (floats in their shortest round-trip form).
pub fn params(problem: &Problem, named: &[(&str, String)]) -> Vec<(String, String)> {
    let mut p: Vec<(String, String)> = named
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let [nx, ny] = problem.size;
    p.push(("size".into(), format!("{nx}x{ny}")));
    p.push(("dt/h".into(), problem.c.to_string()));
    p.push(("initial-field-checksum".into(), checksum(&[&problem.f0])));
    p.push((
        "velocities-checksum".into(),
        checksum(&[&problem.u, &problem.v]),
    ));
    p
}

/// The checkpoint of a run with parameters `params` ([`params`], and any the caller adds only to
/// inform) after `step` steps, holding `field` ([`Advection::state`](crate::Advection::state)).
pub fn checkpoint(params: &[(String, String)], step: u64, field: &[f32]) -> Checkpoint {
    let mut ck = Checkpoint::new(APPLICATION, step);
    ck.params = params.to_vec();
    ck.array("field", field)
}

/// A checkpoint read back and checked: its step, its field, and every parameter it was written
/// with (those a resume need not match too, e.g. the kernel).
#[derive(Debug)]
pub struct Resumed {
    /// Steps done.
    pub step: u64,
    /// The whole grid's field in f32, x fastest.
    pub field: Vec<f32>,
    /// (name, value) as written.
    pub params: Vec<(String, String)>,
}

/// Reads the checkpoint at `path` for a run with `params` on a `size` grid: refused, naming the
/// file and the problem, where it is not a checkpoint, is damaged, is another application's or
/// another run's (each parameter that differs named), or holds a field of another size or a
/// non-finite value (no healthy run writes one).
pub fn read(path: &Path, params: &[(String, String)], [nx, ny]: [usize; 2]) -> Result<Resumed> {
    let mut ck = Checkpoint::read(path)?;
    ck.check_resume(APPLICATION, params, path)?;
    let field = ck.take::<f32>("field", path)?;
    let bad = |problem: String| IoError::Checkpoint {
        path: path.to_path_buf(),
        problem,
    };
    if field.len() != nx * ny {
        return Err(bad(format!(
            "its field holds {} values, and the {nx} x {ny} grid has {}; resume from a checkpoint \
             of this run",
            field.len(),
            nx * ny
        ))
        .into());
    }
    if let Some(k) = first_non_finite(&field) {
        return Err(bad(format!(
            "its field is {} at node (x, y) = ({}, {}), which no healthy run writes: the file is \
             damaged; resume from another checkpoint or start the run again",
            field[k],
            k % nx,
            k / nx
        ))
        .into());
    }
    Ok(Resumed {
        step: ck.step,
        field,
        params: ck.params,
    })
}

/// The value of parameter `name` in `params`.
pub fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A 64-bit FNV-1a checksum of the bits of `arrays`' values, as 16 hex digits: chunks hashed in
/// parallel, then their hashes in order, so that it does not depend on the threads.
fn checksum(arrays: &[&[f64]]) -> String {
    const CHUNK: usize = 1 << 16;
    fn fnv(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
        bytes.into_iter().fold(h, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
    const START: u64 = 0xcbf2_9ce4_8422_2325;
    let chunks: Vec<u64> = arrays
        .iter()
        .flat_map(|a| {
            a.par_chunks(CHUNK)
                .map(|c| fnv(START, c.iter().flat_map(|x| x.to_bits().to_le_bytes())))
                .collect::<Vec<u64>>()
        })
        .collect();
    format!(
        "{:016x}",
        fnv(START, chunks.iter().flat_map(|h| h.to_le_bytes()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem() -> Problem {
        let n = 16;
        Problem {
            size: [n, n],
            f0: (0..n * n).map(|k| k as f64 * 0.01).collect(),
            u: vec![0.5; n * n],
            v: vec![-0.25; n * n],
            c: 0.5,
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "advection-checkpoint-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_checkpoint_reads_back_only_for_the_run_that_wrote_it() {
        let dir = scratch("read");
        let path = dir.join(FILE);
        let p = problem();
        let named = [("case", "swirl".to_string())];
        let mine = params(&p, &named);
        let field: Vec<f32> = p.f0.iter().map(|&x| x as f32 + 1.0).collect();
        let mut ck = checkpoint(&mine, 40, &field);
        ck.params.push(("kernel".into(), "packed".into()));
        ck.write(&path).unwrap();
        let back = read(&path, &mine, p.size).unwrap();
        assert_eq!((back.step, &back.field), (40, &field));
        assert_eq!(param(&back.params, "kernel"), Some("packed"));
        // Another velocity, initial field or dt: each named.
        type Change<'a> = (&'a dyn Fn(&mut Problem), &'a str);
        let changes: [Change; 3] = [
            (&|q| q.v[37] = 0.0, "velocities-checksum"),
            (&|q| q.f0[0] = -0.0, "initial-field-checksum"),
            (&|q| q.c = 0.25, "dt/h is 0.25 here and 0.5 there"),
        ];
        for (change, name) in changes {
            let mut q = problem();
            change(&mut q);
            let e = read(&path, &params(&q, &named), q.size)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name) && e.contains("cannot resume"), "{e}");
        }
        let e = read(&path, &mine, [16, 8]).unwrap_err().to_string();
        assert!(e.contains("its field holds 256 values"), "{e}");
        let mut nan = field.clone();
        nan[3 + 16 * 5] = f32::NAN;
        checkpoint(&mine, 40, &nan).write(&path).unwrap();
        let e = read(&path, &mine, p.size).unwrap_err().to_string();
        assert!(e.contains("NaN at node (x, y) = (3, 5)"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_checksum_sees_every_bit_and_not_the_threads() {
        let a: Vec<f64> = (0..200_000).map(|k| (k as f64).sin()).collect();
        let base = checksum(&[&a]);
        assert_eq!(base.len(), 16);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| checksum(&[&a])), base);
        let mut b = a.clone();
        b[150_000] = f64::from_bits(b[150_000].to_bits() ^ 1);
        assert_ne!(checksum(&[&b]), base);
        // Where one array ends and the next begins counts.
        assert_ne!(checksum(&[&a[..10], &a[10..]]), base);
    }
}
