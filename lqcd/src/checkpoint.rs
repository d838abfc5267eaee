//! Checkpoints of a point-source propagator ([`lattice_gpu_formats::checkpoint`]): one is written
//! after every finished source, so that a stopped run loses at most the source it was solving.
//!
//! The sources are solved in a fixed order (spin, then colour: [`source`]), so the finished ones are
//! the first [`Progress::done`]. What the remaining sources and the final outputs read is the state:
//! the partial sums of the pion correlator `C(t)` over the finished sources (in the order the
//! straight run adds them, so a resumed run continues them bit for bit), and each finished source's
//! iterations, true residual and solve time (printed again, and summed, at the end). The solutions
//! themselves are not kept: each is added to `C(t)` and dropped.
//!
//! What decides the solutions' bits is a parameter a resume must match ([`Checkpoint::check_resume`]):
//! the caller's list, which includes the gauge field's [`gauge_checksum`] (a file, a seed and
//! `--reunitarize` all reduce to the links the solver reads).

use std::path::Path;

use lattice_gpu_formats::checkpoint::Checkpoint;
use lattice_gpu_formats::IoError;
use num_complex::Complex64;
use rayon::prelude::*;

use crate::gauge::GaugeField;
use crate::geometry::Lattice;
use crate::ildg::ScidacChecksum;
use crate::spinor::SpinorField;
use crate::Result;

/// The application named in the checkpoint's header.
pub const APPLICATION: &str = "lqcd-propagator";

/// The checkpoint's file name in its directory.
pub const FILE: &str = "propagator.ckpt";

/// Sources of a point-source propagator: every spin and colour.
pub const SOURCES: usize = 12;

/// The `k`-th source solved, `(spin, colour)`: spin first, then colour.
pub fn source(k: usize) -> (usize, usize) {
    (k / 3, k % 3)
}

/// The SciDAC checksum of `u` as an f64 ILDG file holds it (big-endian, the links of a site after
/// one another): the checksum `--write-gauge` writes for this field. Sites are summed in parallel
/// (the sum is an XOR, so the order does not matter).
pub fn gauge_checksum(u: &GaugeField) -> ScidacChecksum {
    const CHUNK: usize = 1 << 12;
    const SITE: usize = 4 * 9 * 16;
    let volume = u.links.len() / 4;
    (0..volume.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut sum = ScidacChecksum::default();
            let mut bytes = [0u8; SITE];
            for n in c * CHUNK..((c + 1) * CHUNK).min(volume) {
                for mu in 0..4 {
                    let link = &u.links[4 * n + mu];
                    for k in 0..9 {
                        let z: Complex64 = link[(k / 3, k % 3)];
                        let at = 16 * (9 * mu + k);
                        bytes[at..at + 8].copy_from_slice(&z.re.to_be_bytes());
                        bytes[at + 8..at + 16].copy_from_slice(&z.im.to_be_bytes());
                    }
                }
                sum.accumulate(n as u64, &bytes);
            }
            sum
        })
        .reduce(ScidacChecksum::default, |a, b| ScidacChecksum {
            suma: a.suma ^ b.suma,
            sumb: a.sumb ^ b.sumb,
        })
}

/// A propagator's finished sources: the first [`done`](Self::done) of [`source`]'s order.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// `C(t)` summed over the finished sources.
    pub correlator: Vec<f64>,
    /// Each finished source's BiCGStab iterations.
    pub iterations: Vec<u32>,
    /// Each finished source's true residual `|b - D x| / |b|`.
    pub residuals: Vec<f64>,
    /// Each finished source's solve time in seconds.
    pub seconds: Vec<f64>,
}

impl Progress {
    /// No source finished, on a lattice of `nt` time slices.
    pub fn new(nt: usize) -> Self {
        Self {
            correlator: vec![0.0; nt],
            iterations: Vec::new(),
            residuals: Vec::new(),
            seconds: Vec::new(),
        }
    }

    /// Sources finished.
    pub fn done(&self) -> usize {
        self.iterations.len()
    }

    /// Adds the next source's solution `x` to `C(t)` ([`crate::pion::add_solution`]) with its
    /// solve's record.
    pub fn add(
        &mut self,
        lat: &Lattice,
        x: &SpinorField,
        iterations: u32,
        residual: f64,
        seconds: f64,
    ) {
        crate::pion::add_solution(lat, x, &mut self.correlator);
        self.iterations.push(iterations);
        self.residuals.push(residual);
        self.seconds.push(seconds);
    }

    /// The checkpoint of these sources, with `params` (every one a resume must match, then any
    /// that only inform).
    pub fn checkpoint(&self, params: &[(String, String)]) -> Checkpoint {
        let mut ck = Checkpoint::new(APPLICATION, self.done() as u64);
        ck.params = params.to_vec();
        ck.array("correlator", &self.correlator)
            .array("iterations", &self.iterations)
            .array("residuals", &self.residuals)
            .array("seconds", &self.seconds)
    }

    /// The finished sources of checkpoint `ck` (read from `path`, for the messages), checked to be
    /// of a propagator run with `params` on `nt` time slices: every parameter that differs is named,
    /// and a file whose values no run writes (a count above 12, arrays of other lengths, a
    /// non-finite or negative `C(t)`) is refused as damaged.
    pub fn resume(
        mut ck: Checkpoint,
        params: &[(String, String)],
        path: &Path,
        nt: usize,
    ) -> Result<Self> {
        ck.check_resume(APPLICATION, params, path)?;
        let bad = |problem: String| IoError::Checkpoint {
            path: path.to_path_buf(),
            problem: format!(
                "{problem}, which no propagator writes: the file is damaged; resume from another \
                 checkpoint or start the run again"
            ),
        };
        let done = ck.step;
        if done > SOURCES as u64 {
            return Err(bad(format!("it holds {done} finished sources of {SOURCES}")).into());
        }
        let done = done as usize;
        let correlator = ck.take::<f64>("correlator", path)?;
        let iterations = ck.take::<u32>("iterations", path)?;
        let residuals = ck.take::<f64>("residuals", path)?;
        let seconds = ck.take::<f64>("seconds", path)?;
        if correlator.len() != nt {
            return Err(bad(format!(
                "its C(t) has {} time slices on a lattice of {nt}",
                correlator.len()
            ))
            .into());
        }
        for (name, len) in [
            ("iterations", iterations.len()),
            ("residuals", residuals.len()),
            ("seconds", seconds.len()),
        ] {
            if len != done {
                return Err(bad(format!(
                    "its array `{name}` holds {len} values for {done} finished sources"
                ))
                .into());
            }
        }
        // C(t) is a sum of squares; the records are a solve's.
        let negative = |v: &f64| !(v.is_finite() && *v >= 0.0);
        if let Some(t) = correlator.iter().position(negative) {
            return Err(bad(format!("its C(t) is {} at t = {t}", correlator[t])).into());
        }
        for (name, values) in [("residuals", &residuals), ("seconds", &seconds)] {
            if let Some(k) = values.iter().position(negative) {
                return Err(bad(format!("its `{name}` is {} at source {k}", values[k])).into());
            }
        }
        Ok(Self {
            correlator,
            iterations,
            residuals,
            seconds,
        })
    }
}

/// The value of parameter `name` in checkpoint `ck`.
pub fn param<'a>(ck: &'a Checkpoint, name: &str) -> Option<&'a str> {
    ck.params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("lqcd-checkpoint-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn params(kappa: &str) -> Vec<(String, String)> {
        vec![
            ("lattice".into(), "2x2x2x4".into()),
            ("kappa".into(), kappa.into()),
        ]
    }

    #[test]
    fn the_gauge_checksum_is_the_one_an_f64_file_of_the_field_holds() {
        let dir = scratch("gauge");
        let path = dir.join("u.lime");
        // More sites than one parallel chunk, so that chunks are combined.
        let u = GaugeField::random([8, 8, 8, 16], 5);
        crate::config::save_gauge(&path, &u, crate::ildg::Precision::F64).unwrap();
        let stored = crate::ildg::IldgReader::open(&path)
            .unwrap()
            .stored_checksum()
            .unwrap();
        assert_eq!(gauge_checksum(&u), stored);
        let mut v = u.clone();
        let z = &mut v.links[4 * 4000 + 2][(1, 2)];
        z.im = f64::from_bits(z.im.to_bits() ^ 1);
        assert_ne!(gauge_checksum(&v), stored);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn progress_reads_back_bit_for_bit_only_for_its_own_run() {
        let dir = scratch("progress");
        let path = dir.join(FILE);
        let lat = Lattice::new([2, 2, 2, 4], false).unwrap();
        let mut p = Progress::new(4);
        for k in 0..3 {
            let (s, c) = source(k);
            let mut x = SpinorField::point_source(lat.dims, s, c);
            x.data
                .iter_mut()
                .enumerate()
                .for_each(|(i, z)| *z += Complex64::new((i as f64).sin() / 3.0, 1e-300 * i as f64));
            p.add(&lat, &x, 9 + k as u32, 1e-11 / 3.0, 0.1);
        }
        p.checkpoint(&params("0.12")).write(&path).unwrap();
        let back =
            Progress::resume(Checkpoint::read(&path).unwrap(), &params("0.12"), &path, 4).unwrap();
        assert_eq!(back.done(), 3);
        assert_eq!(
            back.correlator
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            p.correlator.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(back, p);
        let e = Progress::resume(Checkpoint::read(&path).unwrap(), &params("0.13"), &path, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kappa is 0.13 here and 0.12 there"), "{e}");
        let e = Progress::resume(Checkpoint::read(&path).unwrap(), &params("0.12"), &path, 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("C(t) has 4 time slices on a lattice of 8"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn values_no_run_writes_are_refused_as_damage() {
        let dir = scratch("damaged");
        let path = dir.join(FILE);
        let mut p = Progress::new(4);
        p.iterations = vec![9; 2];
        p.residuals = vec![1e-11; 2];
        p.seconds = vec![0.5; 2];
        type Damage<'a> = (&'a dyn Fn(&mut Progress), &'a str);
        let cases: [Damage; 5] = [
            (&|p| p.correlator[2] = f64::NAN, "its C(t) is NaN at t = 2"),
            (&|p| p.correlator[1] = -1.0, "its C(t) is -1 at t = 1"),
            (&|p| p.residuals[1] = f64::INFINITY, "`residuals` is inf"),
            (
                &|p| p.seconds.push(1.0),
                "`seconds` holds 3 values for 2 finished sources",
            ),
            (
                &|p| {
                    p.iterations = vec![9; 13];
                    p.residuals = vec![0.0; 13];
                    p.seconds = vec![0.0; 13];
                },
                "13 finished sources of 12",
            ),
        ];
        for (change, want) in cases {
            let mut q = p.clone();
            change(&mut q);
            q.checkpoint(&params("0.12")).write(&path).unwrap();
            let e = Progress::resume(Checkpoint::read(&path).unwrap(), &params("0.12"), &path, 4)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("damaged"), "{want}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
