//! What a call of tuned work does, and the rates that follow from its time: so that every benchmark
//! prints GFLOPS, GB/s and the fraction of the copy bandwidth (the memory roofline) the same way, from
//! the figures the kernel states rather than from a second count in each benchmark.

use std::ops::{Add, Mul};

/// One call's work: the lattice points it updates, its floating-point operations, and the bytes it must
/// move to and from device memory (its kernel's model, stated once: e.g. each value read and written
/// once, neighbours from cache). A figure the work does not state is 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Lattice points (sites, cells) updated.
    pub points: f64,
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written in device memory.
    pub bytes: f64,
}

impl Cost {
    /// Work that states neither (rates print as unknown).
    pub const UNKNOWN: Self = Self {
        points: 0.0,
        flops: 0.0,
        bytes: 0.0,
    };

    /// One lattice point's work of `flops` and `bytes`.
    pub fn point(flops: u32, bytes: u32) -> Self {
        Self {
            points: 1.0,
            flops: flops.into(),
            bytes: bytes.into(),
        }
    }

    /// The rates of this work done in `ms` milliseconds, against a copy bandwidth of `copy_gbs` GB/s
    /// measured in the same run.
    pub fn rate(&self, ms: f64, copy_gbs: f64) -> Rate {
        let per_s = |x: f64| x / (ms * 1e6);
        let gbs = per_s(self.bytes);
        Rate {
            gpoints: per_s(self.points),
            gflops: per_s(self.flops),
            gbs,
            of_copy: gbs / copy_gbs,
        }
    }
}

impl Add for Cost {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            points: self.points + o.points,
            flops: self.flops + o.flops,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// `n` calls' (or points') work.
impl Mul<f64> for Cost {
    type Output = Self;
    fn mul(self, n: f64) -> Self {
        Self {
            points: self.points * n,
            flops: self.flops * n,
            bytes: self.bytes * n,
        }
    }
}

/// Rates of work done in a measured time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// 10^9 lattice points updated per second (GLUPS).
    pub gpoints: f64,
    /// 10^9 floating-point operations per second.
    pub gflops: f64,
    /// 10^9 bytes per second to and from device memory.
    pub gbs: f64,
    /// `gbs` over the copy bandwidth: the fraction of the memory roofline reached.
    pub of_copy: f64,
}

/// `GFLOPS, GB/s, % of copy`, each padded to its column of [`Rate::HEADER`].
impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>8.1} {:>8.1} {:>7.1}%",
            self.gflops,
            self.gbs,
            100.0 * self.of_copy
        )
    }
}

impl Rate {
    /// The column heads of [`Rate`]'s display.
    pub const HEADER: &'static str = "  GFLOPS     GB/s  of copy";
    /// The column heads of a CSV row's rate fields.
    pub const CSV_HEADER: &'static str = "gflops,gb_per_s,of_copy";

    /// The rate fields of a CSV row.
    pub fn csv(&self) -> String {
        format!("{:.3},{:.3},{:.5}", self.gflops, self.gbs, self.of_copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_from_the_work_and_its_time() {
        // 1320 flops and 1440 bytes a site over 2^20 sites in 0.5 ms.
        let site = Cost {
            points: 1.0,
            flops: 1320.0,
            bytes: 1440.0,
        };
        let r = (site * 1048576.0).rate(0.5, 3000.0);
        assert!((r.gflops - 2768.24).abs() < 0.01, "{r:?}");
        assert!((r.gpoints - 2.09715).abs() < 1e-5, "{r:?}");
        assert!((r.gbs - 3019.90).abs() < 0.01, "{r:?}");
        assert!((r.of_copy - 1.00663).abs() < 1e-5, "{r:?}");
        let both = site + site;
        assert_eq!((both.points, both.flops, both.bytes), (2.0, 2640.0, 2880.0));
        assert_eq!(r.to_string().len(), Rate::HEADER.len());
        assert_eq!(Cost::UNKNOWN.rate(1.0, 3000.0).gbs, 0.0);
    }
}
