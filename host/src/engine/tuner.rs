//! One tuner for work that is not a point loop: QUDA's `Tunable`. The work names its tune key and its
//! candidate launch parameters, says how it launches with each and how long a few calls of it take;
//! [`tune`] times every candidate on the real work, keeps the fastest and stores it in the tune cache,
//! which later runs read instead of tuning. Point loops tune through
//! [`DeviceAutoTuningLoopEngine`](super::DeviceAutoTuningLoopEngine), which stores into the same cache.

use super::tunecache::{TuneCache, TuneEntry, TuneKey};
use crate::Result;

/// Work whose launch parameters can be tuned. Its results must not depend on them: the tuner runs the
/// real work (e.g. a simulation's first steps) with each candidate.
pub trait Tunable {
    /// The kernel (or step) name, the problem size and the precision of the tune-cache key; the
    /// device and the PTX build are the caller's.
    fn tune_key(&self) -> (String, String, String);

    /// The candidates in the order tried, each as named values (e.g. `[("block", 256)]`; names
    /// `[A-Za-z0-9_]+`).
    fn candidates(&self) -> Vec<Vec<(String, u32)>>;

    /// Launches with `params` from now on; `Ok(false)` where this GPU cannot run them (the candidate
    /// is passed over, and the parameters before stay).
    fn set_params(&mut self, params: &[(String, u32)]) -> Result<bool>;

    /// Runs `calls` calls of the work and returns their milliseconds (measured on the GPU's stream).
    fn time_ms(&mut self, calls: u64) -> Result<f64>;

    /// Whether `here` holds on every rank of work split over several (each decision of the tuner is
    /// taken by all of them together, so that they run the same calls); one rank: `here`.
    fn on_all_ranks(&self, here: bool) -> Result<bool> {
        Ok(here)
    }
}

/// How [`tune`] runs each candidate: `rounds` passes over all of them, each candidate in each pass
/// `settle` untimed calls, then `timed` calls timed together; a candidate's time is its fastest pass.
/// Passes, not one longer timing each: a GPU that is still raising its clocks (or warming a cache)
/// slows whichever candidate runs first, and only a second pass over all of them undoes that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trials {
    /// Passes over the candidates (at least one).
    pub rounds: u64,
    /// Calls after a change of parameters before timing (the first launch of a shape loads it).
    pub settle: u64,
    /// Calls timed together.
    pub timed: u64,
}

impl Trials {
    /// Calls of the work each candidate runs.
    pub const fn calls_each(&self) -> u64 {
        self.rounds * (self.settle + self.timed)
    }
}

/// What [`tune`] chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    /// The parameters now in use.
    pub params: Vec<(String, u32)>,
    /// Their milliseconds per call, as timed when they were tuned.
    pub ms_per_call: f64,
    /// Calls of the work the tuning ran now (0 where the cache had the result).
    pub calls: u64,
    /// Whether the result came from the tune cache.
    pub cached: bool,
}

/// The name of the parameter [`blocks`] tries.
pub const BLOCK: &str = "block";

/// The candidates of work tuned over its threads per block alone: one per size of `sizes`, named
/// [`BLOCK`].
pub fn blocks(sizes: &[u32]) -> Vec<Vec<(String, u32)>> {
    sizes
        .iter()
        .map(|&b| vec![(BLOCK.to_string(), b)])
        .collect()
}

/// The value named `name` in `params`, if there is one.
pub fn param(params: &[(String, u32)], name: &str) -> Option<u32> {
    params.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
}

/// Sets the fastest of `work`'s candidates: the tune cache's (under `device` and `ptx_hash`) where it
/// has one for every rank and `retune` is off, else the fastest of timing each as `trials` says,
/// stored in `cache`. `None` where the cache has none and `may_time` is off (the work is too short to
/// tune on), or no candidate runs on every rank. A cache that cannot be written is reported through
/// its warnings ([`TuneCache::take_warnings`]); the result is kept for this run either way.
pub fn tune<T: Tunable + ?Sized>(
    work: &mut T,
    cache: &mut TuneCache,
    (device, ptx_hash): (&str, u64),
    retune: bool,
    may_time: bool,
    trials: Trials,
) -> Result<Option<Tuned>> {
    let (kernel, size, precision) = work.tune_key();
    let key = TuneKey {
        kernel,
        size,
        precision,
        device: device.to_string(),
        ptx_hash,
    };
    let cached = match retune {
        true => None,
        false => cache.get(&key),
    };
    // A rank whose cached parameters it cannot run (another GPU wrote them) tunes with the others.
    let usable = match &cached {
        Some(entry) => work.set_params(&entry.params)?,
        None => false,
    };
    // Asked on every rank (it is collective), whatever this one holds.
    let everywhere = work.on_all_ranks(usable)?;
    if let (true, Some(entry)) = (everywhere, cached) {
        return Ok(Some(Tuned {
            params: entry.params,
            ms_per_call: entry.time_ms,
            calls: 0,
            cached: true,
        }));
    }
    if !may_time {
        return Ok(None);
    }
    let candidates = work.candidates();
    let mut fastest: Vec<Option<f64>> = vec![None; candidates.len()];
    let mut calls = 0;
    for _ in 0..trials.rounds.max(1) {
        for (candidate, fastest) in candidates.iter().zip(&mut fastest) {
            let here = work.set_params(candidate)?;
            if !work.on_all_ranks(here)? {
                continue;
            }
            work.time_ms(trials.settle)?;
            let ms = work.time_ms(trials.timed)? / trials.timed.max(1) as f64;
            calls += trials.settle + trials.timed;
            *fastest = Some(fastest.map_or(ms, |f| f.min(ms)));
        }
    }
    // The first of the fastest, so that equal times keep the candidates' order.
    let best = candidates
        .into_iter()
        .zip(fastest)
        .filter_map(|(c, t)| t.map(|t| (c, t)))
        .reduce(|a, b| if b.1 < a.1 { b } else { a });
    let Some((params, ms)) = best else {
        return Ok(None);
    };
    work.set_params(&params)?;
    let entry = TuneEntry {
        params: params.clone(),
        time_ms: ms,
    };
    // Not saved: the cache keeps the entry in memory and says why in its warnings.
    let _ = cache.insert(key, entry);
    Ok(Some(Tuned {
        params,
        ms_per_call: ms,
        calls,
        cached: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work whose call takes `cost(block)` milliseconds, refusing blocks above `max`.
    struct Fake {
        block: u32,
        max: u32,
        calls: u64,
    }

    impl Fake {
        fn cost(block: u32) -> f64 {
            (f64::from(block) - 300.0).abs() + 1.0
        }
    }

    impl Tunable for Fake {
        fn tune_key(&self) -> (String, String, String) {
            ("fake_step".into(), "8x8x8".into(), "f32".into())
        }
        fn candidates(&self) -> Vec<Vec<(String, u32)>> {
            blocks(&[128, 256, 512, 1024])
        }
        fn set_params(&mut self, params: &[(String, u32)]) -> Result<bool> {
            let b = param(params, BLOCK).unwrap();
            if b > self.max {
                return Ok(false);
            }
            self.block = b;
            Ok(true)
        }
        fn time_ms(&mut self, calls: u64) -> Result<f64> {
            self.calls += calls;
            Ok(calls as f64 * Self::cost(self.block))
        }
    }

    const TRIALS: Trials = Trials {
        rounds: 1,
        settle: 2,
        timed: 4,
    };

    /// [`Fake`] on a GPU still warming up: its first `slow` calls take ten times as long.
    struct Warming {
        fake: Fake,
        slow: u64,
    }

    impl Tunable for Warming {
        fn tune_key(&self) -> (String, String, String) {
            self.fake.tune_key()
        }
        fn candidates(&self) -> Vec<Vec<(String, u32)>> {
            blocks(&[256, 512])
        }
        fn set_params(&mut self, params: &[(String, u32)]) -> Result<bool> {
            self.fake.set_params(params)
        }
        fn time_ms(&mut self, calls: u64) -> Result<f64> {
            let ms: f64 = (0..calls)
                .map(|k| match self.fake.calls + k < self.slow {
                    true => 10.0 * Fake::cost(self.fake.block),
                    false => Fake::cost(self.fake.block),
                })
                .sum();
            self.fake.calls += calls;
            Ok(ms)
        }
    }

    #[test]
    fn a_second_pass_undoes_a_slow_start() {
        let run = |rounds: u64| {
            let mut work = Warming {
                fake: Fake {
                    block: 256,
                    max: 1024,
                    calls: 0,
                },
                slow: 6,
            };
            let trials = Trials { rounds, ..TRIALS };
            let t = tune(
                &mut work,
                &mut TuneCache::in_memory(),
                ("GPU", 3),
                false,
                true,
                trials,
            );
            let t = t.unwrap().unwrap();
            assert_eq!(t.calls, 2 * trials.calls_each());
            param(&t.params, BLOCK).unwrap()
        };
        // 256 (cost 45) beats 512 (213), but one pass times 256 in the warm-up only.
        assert_eq!(run(1), 512);
        assert_eq!(run(2), 256);
    }

    #[test]
    fn tunes_once_then_takes_the_cache() {
        let mut cache = TuneCache::in_memory();
        let mut work = Fake {
            block: 128,
            max: 1024,
            calls: 0,
        };
        let dev = ("GPU", 7);
        let first = tune(&mut work, &mut cache, dev, false, true, TRIALS)
            .unwrap()
            .unwrap();
        assert_eq!(first.params, vec![("block".to_string(), 256)]);
        assert_eq!((first.calls, first.cached, work.calls), (24, false, 24));
        assert_eq!(first.ms_per_call, Fake::cost(256));
        work.block = 128;
        let again = tune(&mut work, &mut cache, dev, false, false, TRIALS)
            .unwrap()
            .unwrap();
        assert_eq!(
            (again.calls, again.cached, work.block, work.calls),
            (0, true, 256, 24)
        );
        // Another PTX build, or --retune: tuned again.
        let rebuilt = tune(&mut work, &mut cache, ("GPU", 8), false, true, TRIALS).unwrap();
        assert!(!rebuilt.unwrap().cached);
        let retuned = tune(&mut work, &mut cache, dev, true, true, TRIALS).unwrap();
        assert_eq!(retuned.unwrap().calls, 24);
    }

    #[test]
    fn passes_over_what_the_gpu_cannot_run_and_does_not_time_short_work() {
        let mut cache = TuneCache::in_memory();
        let mut work = Fake {
            block: 128,
            max: 200,
            calls: 0,
        };
        assert_eq!(
            tune(&mut work, &mut cache, ("GPU", 1), false, false, TRIALS).unwrap(),
            None
        );
        assert_eq!(work.calls, 0);
        let t = tune(&mut work, &mut cache, ("GPU", 1), false, true, TRIALS)
            .unwrap()
            .unwrap();
        assert_eq!((param(&t.params, "block"), t.calls), (Some(128), 6));
        // A cached block this GPU cannot run is tuned again.
        let mut big = Fake {
            block: 128,
            max: 1024,
            calls: 0,
        };
        tune(&mut big, &mut cache, ("GPU", 2), false, true, TRIALS).unwrap();
        work.calls = 0;
        let t = tune(&mut work, &mut cache, ("GPU", 2), false, true, TRIALS)
            .unwrap()
            .unwrap();
        assert_eq!((t.cached, work.block, work.calls), (false, 128, 6));
    }
}
