//! One tuner for every launch: QUDA's `Tunable`. Work names its tune key, its candidate launch
//! parameters and its cost, and says how it launches with each. A [`Search`] picks the fastest
//! candidate and stores it in the one tune cache, which later runs read instead of tuning. It is fed two
//! ways:
//! - [`tune`] times calls of the work itself (a whole LBM step, a hopping term, a solver's vector
//!   kernels): work that may be run again for a timing;
//! - the point-loop engine ([`DeviceAutoTuningLoopEngine`](super::DeviceAutoTuningLoopEngine)) times
//!   the real steps of a simulation as they run, one candidate a step in turn, for work that must not
//!   run twice (an over-relaxed sweep in place).

use super::cost::Cost;
use super::tunecache::{TuneCache, TuneEntry, TuneKey};
use crate::Result;

/// Named launch parameters, as the tune cache holds them: `[("block", 256)]`.
pub type Params = Vec<(String, u32)>;

/// Work whose launch parameters can be tuned. Its results must not depend on them: the tuner runs the
/// real work (e.g. a simulation's first steps) with each candidate.
pub trait Tunable {
    /// The kernel (or step) name, the problem size and the precision of the tune-cache key; the
    /// device and the PTX build are the caller's.
    fn tune_key(&self) -> (String, String, String);

    /// The candidates in the order tried, each as named values (e.g. `[("block", 256)]`; names
    /// `[A-Za-z0-9_]+`).
    fn candidates(&self) -> Vec<Params>;

    /// Launches with `params` from now on; `Ok(false)` where this GPU cannot run them (the candidate
    /// is passed over, and the parameters before stay).
    fn set_params(&mut self, params: &[(String, u32)]) -> Result<bool>;

    /// Runs `calls` calls of the work and returns their milliseconds (measured on the GPU's stream).
    fn time_ms(&mut self, calls: u64) -> Result<f64>;

    /// One call's floating-point operations and device-memory bytes, for its rates.
    fn cost(&self) -> Cost;

    /// Whether `here` holds on every rank of work split over several (each decision of the tuner is
    /// taken by all of them together, so that they run the same calls); one rank: `here`.
    fn on_all_ranks(&self, here: bool) -> Result<bool> {
        Ok(here)
    }
}

/// How [`tune`] runs each candidate: `rounds` passes over all of them, each candidate in each pass
/// `settle` untimed calls, then `timed` calls timed together.
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
    pub params: Params,
    /// Their milliseconds per call, as timed when they were tuned.
    pub ms_per_call: f64,
    /// Calls of the work the tuning ran now (0 where the cache had the result).
    pub calls: u64,
    /// Whether the result came from the tune cache.
    pub cached: bool,
    /// One call's work, as the work states it.
    pub cost: Cost,
}

/// The name of the parameter [`blocks`] tries.
pub const BLOCK: &str = "block";

/// The candidates of work tuned over its threads per block alone: one per size of `sizes`, named
/// [`BLOCK`].
pub fn blocks(sizes: &[u32]) -> Vec<Params> {
    sizes
        .iter()
        .map(|&b| vec![(BLOCK.to_string(), b)])
        .collect()
}

/// The value named `name` in `params`, if there is one.
pub fn param(params: &[(String, u32)], name: &str) -> Option<u32> {
    params.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
}

/// One tuning under way, however its calls are timed: the candidates and each one's timings so far.
/// Both ways of tuning ([`tune`] and the point-loop engine) look up, pick and store through it, so the
/// rule and the cache are one.
#[derive(Clone, Debug)]
pub struct Search {
    key: TuneKey,
    candidates: Vec<Params>,
    times: Vec<Vec<f64>>,
}

impl Search {
    /// The cache's entry for `key`, unless `retune` (which tunes again, replacing it).
    pub fn cached(cache: &mut TuneCache, key: &TuneKey, retune: bool) -> Option<TuneEntry> {
        match retune {
            true => None,
            false => cache.get(key),
        }
    }

    /// A search over `candidates` for the entry `key`.
    pub fn new(key: TuneKey, candidates: Vec<Params>) -> Self {
        let times = vec![Vec::new(); candidates.len()];
        Self {
            key,
            candidates,
            times,
        }
    }

    /// The candidates, in the order given.
    pub fn candidates(&self) -> &[Params] {
        &self.candidates
    }

    /// Records a timing of candidate `i`: milliseconds per call.
    pub fn record(&mut self, i: usize, ms: f64) {
        self.times[i].push(ms);
    }

    /// The fastest candidate timed and its milliseconds per call. A candidate's time is the lower
    /// median of its timings: the median of an odd count (one slow step in a stream does not count),
    /// the faster of two passes (the slower one ran while the GPU warmed up). The first of equal times
    /// wins, so that the candidates' order decides ties.
    pub fn fastest(&self) -> Option<(usize, f64)> {
        self.times
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty())
            .map(|(i, t)| {
                let mut t = t.clone();
                t.sort_by(f64::total_cmp);
                (i, t[(t.len() - 1) / 2])
            })
            .reduce(|a, b| if b.1 < a.1 { b } else { a })
    }

    /// Ends the search: the fastest candidate's index and time ([`fastest`](Self::fastest)), stored in
    /// `cache` (a file that cannot take it is one of the cache's warnings; the result counts for this
    /// run either way). `None` where no candidate was timed.
    pub fn finish(&self, cache: &mut TuneCache) -> Option<(usize, f64)> {
        let (i, ms) = self.fastest()?;
        let entry = TuneEntry {
            params: self.candidates[i].clone(),
            time_ms: ms,
        };
        cache.store(self.key.clone(), entry);
        Some((i, ms))
    }
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
    let cost = work.cost();
    let cached = Search::cached(cache, &key, retune);
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
            cost,
        }));
    }
    if !may_time {
        return Ok(None);
    }
    let mut search = Search::new(key, work.candidates());
    let mut calls = 0;
    for _ in 0..trials.rounds.max(1) {
        for i in 0..search.candidates().len() {
            let here = work.set_params(&search.candidates()[i])?;
            if !work.on_all_ranks(here)? {
                continue;
            }
            work.time_ms(trials.settle)?;
            let ms = work.time_ms(trials.timed)? / trials.timed.max(1) as f64;
            calls += trials.settle + trials.timed;
            search.record(i, ms);
        }
    }
    let Some((i, ms)) = search.finish(cache) else {
        return Ok(None);
    };
    let params = search.candidates()[i].clone();
    work.set_params(&params)?;
    Ok(Some(Tuned {
        params,
        ms_per_call: ms,
        calls,
        cached: false,
        cost,
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
        fn cost(&self) -> Cost {
            Cost::UNKNOWN
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
        fn cost(&self) -> Cost {
            Cost::UNKNOWN
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

    fn key() -> TuneKey {
        TuneKey {
            kernel: "fake_step".into(),
            size: "8x8x8".into(),
            precision: "f32".into(),
            device: "GPU".into(),
            ptx_hash: 5,
        }
    }

    #[test]
    fn a_candidate_counts_its_lower_median_and_ties_keep_the_order() {
        let mut s = Search::new(key(), blocks(&[64, 128, 256]));
        for ms in [5.0, 1.0, 9.0] {
            s.record(0, ms);
        }
        for ms in [8.0, 4.0] {
            s.record(1, ms);
        }
        assert_eq!(s.fastest(), Some((1, 4.0)));
        s.record(2, 4.0);
        assert_eq!(s.fastest(), Some((1, 4.0)));
        let mut cache = TuneCache::in_memory();
        assert_eq!(s.finish(&mut cache), Some((1, 4.0)));
        assert_eq!(cache.get(&key()).unwrap().time_ms, 4.0);
        assert_eq!(Search::cached(&mut cache, &key(), true), None);
        assert_eq!(Search::new(key(), blocks(&[64])).finish(&mut cache), None);
    }

    #[test]
    fn a_result_the_file_cannot_take_is_kept_and_said() {
        let dir = std::env::temp_dir().join(format!("tuner-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tunecache.tsv");
        std::fs::write(&path, "not a cache\n").unwrap();
        let mut cache = TuneCache::load(path.clone());
        cache.take_warnings();
        let mut s = Search::new(key(), blocks(&[64]));
        s.record(0, 2.0);
        assert!(s.finish(&mut cache).is_some());
        assert_eq!(cache.get(&key()).unwrap().time_ms, 2.0);
        let w = cache.take_warnings().join("\n");
        assert!(w.contains("not a lattice-gpu tune cache"), "{w}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a cache\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
