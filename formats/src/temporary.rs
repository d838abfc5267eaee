//! The temporary files and directories that exist now, so that a run stopped at once (a second
//! SIGINT, in `lattice_gpu_host::interrupt`) removes them before the process exits and leaves no
//! half-written `.name.tmp` behind.
//!
//! The registry lives here, below the signal handling, because the writers that make temporaries
//! ([`write_atomically`](crate::write_atomically), [`OutputDir`](crate::OutputDir)) are here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Temporary paths that exist now, by registration number: (path, is a directory).
static TEMPORARIES: Mutex<BTreeMap<u64, (PathBuf, bool)>> = Mutex::new(BTreeMap::new());

/// A temporary file or directory that [`remove_all`] removes; dropping the guard unregisters it (the
/// owner has renamed or removed it by then).
#[derive(Debug)]
pub struct Temporary(u64);

impl Temporary {
    /// Registers the temporary file `path`, before it is created.
    pub fn file(path: &Path) -> Self {
        Self::new(path, false)
    }

    /// Registers the temporary directory `path` (removed with its contents), before it is created.
    pub fn dir(path: &Path) -> Self {
        Self::new(path, true)
    }

    fn new(path: &Path, dir: bool) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        registry().insert(id, (path.to_path_buf(), dir));
        Temporary(id)
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        registry().remove(&self.0);
    }
}

/// The registry, locked; a panic elsewhere while it was held leaves it usable.
fn registry() -> MutexGuard<'static, BTreeMap<u64, (PathBuf, bool)>> {
    TEMPORARIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Proof that the registered temporaries were removed; while it lives no new one can be registered,
/// so a process that exits holding it leaves none behind.
#[must_use = "hold it until the process exits: a write starting after it is dropped makes a new temporary"]
pub struct Removed(#[allow(dead_code)] MutexGuard<'static, BTreeMap<u64, (PathBuf, bool)>>);

/// Removes every registered temporary (best effort: one already gone is no error) and holds the
/// registry, so that a write starting now waits and never makes its temporary.
pub fn remove_all() -> Removed {
    let mut live = registry();
    for (path, dir) in std::mem::take(&mut *live).into_values() {
        let _ = match dir {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
    }
    Removed(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_leave_the_registry_when_dropped() {
        let p = Path::new("/nonexistent/x.tmp");
        let t = Temporary::file(p);
        let has = || registry().values().any(|(q, _)| q.as_path() == p);
        assert!(has());
        drop(t);
        assert!(!has());
    }
}
