//! A run's health: finding the NaN or infinity that a diverged run leaves, and stopping every rank of a
//! decomposed run together when one rank finds one or a signal asks them to stop.
//!
//! An unstable run turns its state into NaN within a few steps and then runs on as if nothing were
//! wrong, so a run checks its state at its progress checks and before it writes anything
//! ([`LoopEngine::first_non_finite`](crate::LoopEngine::first_non_finite) on the engine's fields,
//! [`first_non_finite`] on host data). The ranks of a split run must decide together, or one would stop
//! while the others wait for it in the next halo exchange: [`Verdict::agree`] is that collective
//! decision.

use rayon::prelude::*;

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::interrupt::{self, Signal};
use lattice_gpu_kernels::device::math::Real;

/// The index of the first NaN or infinite value in `values`, `None` where all are finite.
pub fn first_non_finite<T: Real>(values: &[T]) -> Option<usize> {
    let bad = |v: &T| !v.to_f64().is_finite();
    // Whole chunks without an early exit, a loop the compiler vectorises: rayon's search point by
    // point took more than half of `diffusion --engine host --size 256` (a check every 16 steps).
    const CHUNK: usize = 1 << 14;
    let chunk = values
        .par_chunks(CHUNK)
        .position_first(|c| c.iter().fold(false, |found, v| found | bad(v)))?;
    let at = chunk * CHUNK;
    values[at..].iter().position(bad).map(|i| at + i)
}

/// A non-finite value found: where (an index the caller maps to a cell) and what it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFinite {
    /// The rank that holds it.
    pub rank: usize,
    /// Its index in the data that rank checked (in the order the caller gave it).
    pub index: u64,
    /// The value: NaN, inf or -inf.
    pub value: f64,
}

/// What the ranks decided at a check: go on, stop for a signal, or stop for a non-finite value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Every rank's state is finite and no stop was asked for.
    Healthy,
    /// A signal asked the run to stop ([`interrupt`]): every rank ends after this step.
    Stop(Signal),
    /// A rank found a non-finite value: the one of the lowest rank, first in its data.
    Diverged(NonFinite),
}

impl Verdict {
    /// The collective decision of all ranks of `comm` (every rank must call it at the same step):
    /// `found` is this rank's first non-finite value (index, value), if it has one. A non-finite value
    /// outranks a signal: the state is lost, and saving it would only keep NaN.
    pub fn agree<C: Communicator>(comm: &C, found: Option<(u64, f64)>) -> Result<Verdict> {
        let signal = interrupt::requested().map_or(0.0, |s| s.0 as f64);
        // One message per rank: [found?, index, value, signal]. The index is exact in f64 below 2^53.
        let mine = match found {
            Some((i, v)) => [1.0, i as f64, v, signal],
            None => [0.0, 0.0, 0.0, signal],
        };
        let all = comm.gather(&mine)?;
        // Rank 0 decides; [kind, rank, index, value, signal] goes to every rank.
        let mut decided = [0.0f64; 5];
        if comm.rank() == 0 {
            let mut first_signal = 0.0;
            for (rank, m) in all.chunks(4).enumerate() {
                if m[0] == 1.0 && decided[0] == 0.0 {
                    decided = [2.0, rank as f64, m[1], m[2], 0.0];
                }
                if m[3] != 0.0 && first_signal == 0.0 {
                    first_signal = m[3];
                }
            }
            if decided[0] == 0.0 && first_signal != 0.0 {
                decided = [1.0, 0.0, 0.0, 0.0, first_signal];
            }
        }
        comm.broadcast(&mut decided)?;
        Ok(match decided[0] as u8 {
            2 => Verdict::Diverged(NonFinite {
                rank: decided[1] as usize,
                index: decided[2] as u64,
                value: decided[3],
            }),
            1 => Verdict::Stop(Signal(decided[4] as i32)),
            _ => Verdict::Healthy,
        })
    }

    /// `Ok` for a healthy run, else the error that ends it: [`Error::Interrupted`] after `step`, or
    /// [`Error::Diverged`] with `what` diverged, `at` naming the cell of a value found, and `fix`.
    pub fn into_result(
        self,
        step: u64,
        what: &str,
        at: impl FnOnce(&NonFinite) -> String,
        fix: &str,
    ) -> Result<()> {
        match self {
            Verdict::Healthy => Ok(()),
            Verdict::Stop(signal) => Err(Error::Interrupted { signal, step }),
            Verdict::Diverged(found) => Err(Error::Diverged {
                step,
                what: what.to_string(),
                value: found.value,
                at: at(&found),
                fix: fix.to_string(),
            }),
        }
    }
}

/// How often a run of `points` grid points (all ranks together) checks its health and the signals:
/// every `budget / points` steps, at least 1 and at most `steps`. A check reads the state once (half
/// the traffic of a step that reads and writes it) and the ranks agree once, the GPU idle meanwhile.
/// The budget is 2^33 points on a GPU: a check's traffic is then under 1% of the steps' between
/// checks (every 64 steps at 512^3). At 2^31, with the check's loads one at a time, the checks took
/// an eighth of the application's rate in passes of three steps at 512^3 on an H200 (619 against 706
/// GLUPS, docs/benchmarks/history.md). On the CPU it is 2^28 (about every second, so that Ctrl-C
/// answers soon).
pub fn check_interval(points: u64, steps: u64, on_gpu: bool) -> u64 {
    let budget: u64 = if on_gpu { 1 << 33 } else { 1 << 28 };
    (budget / points.max(1)).clamp(1, steps.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Solo;

    #[test]
    fn finds_the_first_nan_or_infinity() {
        let mut v = vec![1.0f32; 100_000];
        assert_eq!(first_non_finite(&v), None);
        v[70_001] = f32::INFINITY;
        v[99_999] = f32::NAN;
        assert_eq!(first_non_finite(&v), Some(70_001));
        // f32::MAX is finite: large is not diverged.
        assert_eq!(first_non_finite(&[f64::MAX, -f64::MAX]), None);
        assert_eq!(first_non_finite(&[0.0, f64::NEG_INFINITY]), Some(1));
        // Either side of a chunk's edge, and alone in the last, short chunk.
        let mut w = vec![0.5f32; 3 * (1 << 14) + 5];
        w[1 << 14] = f32::NAN;
        assert_eq!(first_non_finite(&w), Some(1 << 14));
        w[(1 << 14) - 1] = f32::NAN;
        assert_eq!(first_non_finite(&w), Some((1 << 14) - 1));
        let mut w = vec![0.5f64; 3 * (1 << 14) + 5];
        *w.last_mut().unwrap() = f64::INFINITY;
        assert_eq!(first_non_finite(&w), Some(w.len() - 1));
    }

    #[test]
    fn a_rank_with_a_nan_ends_the_run_with_its_cell() {
        assert_eq!(Verdict::agree(&Solo, None).unwrap(), Verdict::Healthy);
        let v = Verdict::agree(&Solo, Some((12, f64::NAN))).unwrap();
        let Verdict::Diverged(found) = v else {
            panic!("{v:?}")
        };
        assert_eq!((found.rank, found.index), (0, 12));
        let e = v
            .into_result(
                40,
                "the velocity",
                |f| format!("cell {}", f.index),
                "lower --re",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("step 40") && e.contains("cell 12") && e.contains("NaN"),
            "{e}"
        );
    }

    #[test]
    fn threads_agree_on_the_lowest_rank_that_found_one() {
        let found = crate::threads::run(4, |comm| {
            use crate::comm::Communicator;
            let mine = (comm.rank() >= 2).then(|| (comm.rank() as u64 * 10, f64::INFINITY));
            Verdict::agree(comm, mine)
        })
        .unwrap();
        for v in found {
            assert_eq!(
                v,
                Verdict::Diverged(NonFinite {
                    rank: 2,
                    index: 20,
                    value: f64::INFINITY
                })
            );
        }
    }

    #[test]
    fn the_interval_keeps_to_its_budget() {
        assert_eq!(check_interval(256 * 256 * 256, 10_000, true), 512);
        assert_eq!(check_interval(256 * 256 * 256, 10_000, false), 16);
        assert_eq!(check_interval(1 << 40, 10, true), 1);
        assert_eq!(check_interval(10, 50, false), 50);
    }
}
