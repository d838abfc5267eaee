//! The memory a run needs, estimated before it allocates anything, and what it took, measured.
//!
//! A grid too large for the machine must end in a message before the first allocation, not in an
//! abort inside the allocator or in the out-of-memory killer an hour later. So every binary adds up
//! its real peak as a [`Footprint`] (every array alive at the worst moment, host and GPU apart),
//! refuses what does not fit ([`Footprint::check`]), and computes every byte count with overflow
//! checks ([`bytes`]). Estimates drift from the code they describe, so the binaries print estimate and
//! measurement side by side when `LATTICE_GPU_MEMORY_REPORT` is set ([`Footprint::report`]), and the
//! tests hold one against the other.
//!
//! Two things the measurement sees that an array count does not: ranks run as threads (`--gpus N`)
//! each allocate in an arena of glibc's own, which keeps freed arrays for reuse, so a threaded run's
//! resident peak exceeds the sum of its live arrays by up to a few of them; and the GPU side is the
//! peak of the process's first GPU ([`Gpu::peak_held`] of the GPU the report names), to be held
//! against one rank's estimate.

use crate::error::{Error, Result};
use crate::gpu::Gpu;

/// What the process holds before a run's arrays: the executable, its libraries and the thread pool's
/// stacks. Measured as 5 MiB for `diffusion` on Linux; the margin covers allocator slack.
pub const RUNTIME_HOST: u64 = 16 << 20;

/// What each thread of the CPU engine's pool adds: its stack as far as it is touched, and the memory its
/// allocator arena keeps (LBM measured 191 MiB with 16 threads where 2 gave 170).
pub const THREAD_HOST: u64 = 2 << 20;

/// What the CUDA driver adds to the host side of a process that opens a GPU (its library, the
/// context's host allocations).
pub const CUDA_HOST: u64 = 320 << 20;

/// What an MPI library adds to each rank's host memory (its own allocations and the shared-memory
/// transport's segments): 12 to 15 MiB measured with OpenMPI over 1 to 3 ranks, counted as 32.
pub const MPI_HOST: u64 = 32 << 20;

/// `count` values of `elem` bytes each, or an error naming `what` where the product overflows.
pub fn bytes(count: &[usize], elem: usize, what: &str) -> Result<u64> {
    count
        .iter()
        .try_fold(elem as u64, |acc, &n| acc.checked_mul(n as u64))
        .ok_or_else(|| {
            Error::InvalidSize(format!(
                "{what}: {} values of {elem} bytes do not fit in 64 bits; use a smaller grid",
                count
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" x ")
            ))
        })
}

/// A run's peak memory, host and GPU apart, and what it is made of (for the message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of host memory at the peak, [`RUNTIME_HOST`], [`THREAD_HOST`] per pool thread (and
    /// [`CUDA_HOST`] with a GPU) included.
    pub host: u64,
    /// Bytes of GPU memory at the peak.
    pub gpu: u64,
    /// What is held, e.g. "two 256^3 f32 fields and the initial field".
    pub what: String,
}

impl Footprint {
    /// A run of arrays `host` and `gpu` bytes large at their peak (saturating: a sum that overflows
    /// is refused by [`check`](Self::check) as too large), on a GPU when `on_gpu`.
    pub fn new(what: impl Into<String>, host: u64, gpu: u64, on_gpu: bool) -> Self {
        let threads = rayon::current_num_threads() as u64 * THREAD_HOST;
        let runtime = RUNTIME_HOST + threads + if on_gpu { CUDA_HOST } else { 0 };
        Self {
            host: host.saturating_add(runtime),
            gpu,
            what: what.into(),
        }
    }

    /// The same run on one rank of an MPI job: [`MPI_HOST`] more host memory.
    pub fn under_mpi(mut self) -> Self {
        self.host = self.host.saturating_add(MPI_HOST);
        self
    }

    /// Refuses, naming the sizes and the fix, a run whose host part exceeds the host's available
    /// memory or whose GPU part exceeds `gpu`'s free memory; to be called before the first array is
    /// made.
    pub fn check(&self, gpu: Option<&Gpu>) -> Result<()> {
        if let Some(free) = available_host() {
            if self.host > free {
                return Err(Error::OutOfHostMemory {
                    what: self.what.clone(),
                    needed: self.host,
                    free,
                });
            }
        }
        match gpu {
            Some(gpu) if self.gpu > 0 => gpu.check_fits(self.gpu, &self.what),
            _ => Ok(()),
        }
    }

    /// With `LATTICE_GPU_MEMORY_REPORT` set, prints to stderr one line with this estimate beside the
    /// measured peaks: the process's peak resident memory (`VmHWM`) and the most the crate's GPU
    /// arrays held at once ([`Gpu::peak_held`]). For the tests that keep the estimates honest.
    pub fn report(&self, gpu: Option<&Gpu>) {
        if std::env::var_os("LATTICE_GPU_MEMORY_REPORT").is_none() {
            return;
        }
        eprintln!(
            "memory: estimated host {} gpu {}; measured host {} gpu {}",
            self.host,
            self.gpu,
            peak_resident().unwrap_or(0),
            gpu.map_or(0, Gpu::peak_held)
        );
    }
}

/// `MemAvailable` of /proc/meminfo in bytes (Linux); `None` where it cannot be read.
pub fn available_host() -> Option<u64> {
    proc_bytes("/proc/meminfo", "MemAvailable:")
}

/// The process's peak resident memory so far (`VmHWM` of /proc/self/status), in bytes; `None` where
/// it cannot be read.
pub fn peak_resident() -> Option<u64> {
    proc_bytes("/proc/self/status", "VmHWM:")
}

/// Bytes of the largest data cache of the CPU the process runs on (its last level, shared by its
/// cores), from Linux's sysfs; `None` where it cannot be read. No crate reads it on every platform
/// (`sysinfo` does not); the CPU engine only weighs it against a field's size.
pub fn last_level_cache() -> Option<u64> {
    // Read once: the CPU engine asks at every pass it weighs.
    static BYTES: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        dir.filter_map(|e| {
            let path = e.ok()?.path();
            let kind = std::fs::read_to_string(path.join("type")).ok()?;
            if kind.trim() == "Instruction" {
                return None;
            }
            cache_bytes(std::fs::read_to_string(path.join("size")).ok()?.trim())
        })
        .max()
    })
}

/// A sysfs cache size ("32K", "1024K", "300M") in bytes.
fn cache_bytes(size: &str) -> Option<u64> {
    let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
    let shift = match unit {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    Some(digits.parse::<u64>().ok()? << shift)
}

/// A `key: N kB` line of a /proc file, in bytes.
fn proc_bytes(file: &str, key: &str) -> Option<u64> {
    let info = std::fs::read_to_string(file).ok()?;
    let line = info.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_bytes("32K"), Some(32 << 10));
        assert_eq!(cache_bytes("300M"), Some(300 << 20));
        assert_eq!(cache_bytes("2G"), Some(2 << 30));
        assert_eq!(cache_bytes("512"), None);
        assert_eq!(cache_bytes("12X"), None);
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache").exists() {
            assert!(last_level_cache().is_some_and(|b| b >= 1 << 20));
        }
    }

    #[test]
    fn byte_counts_that_overflow_are_refused_by_name() {
        assert_eq!(bytes(&[256, 256, 256], 4, "a field").unwrap(), 1 << 26);
        let e = bytes(&[1 << 20, 1 << 20, 1 << 20], 16, "a 2^20 cube")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a 2^20 cube") && e.contains("64 bits"), "{e}");
    }

    #[test]
    fn a_footprint_beyond_the_host_is_refused_before_allocating() {
        if available_host().is_none() {
            return;
        }
        let e = Footprint::new("a test grid", u64::MAX, 0, false)
            .check(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a test grid") && e.contains("GiB"), "{e}");
        Footprint::new("a small grid", 1 << 20, 0, false)
            .check(None)
            .unwrap();
    }

    #[test]
    fn the_peak_resident_memory_grows_with_what_is_touched() {
        let Some(before) = peak_resident() else {
            return;
        };
        // Kept from the optimiser, which would drop an array nothing reads.
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = peak_resident().unwrap();
        assert!(after >= before.max(64 << 20), "{before} {after}");
        drop(std::hint::black_box(v));
    }
}
