//! Stopping a run on SIGINT, SIGTERM, SIGHUP or SIGUSR1 without losing or corrupting work.
//!
//! A binary calls [`watch`] once. The first signal only raises a flag, which the run's loop reads at
//! its checks through [`requested`] (a decomposed run agrees on it collectively, so every rank stops
//! after the same step): the run then writes what it must (a checkpoint) and ends with
//! [`Error::Interrupted`](crate::Error::Interrupted), and the binary exits with the shell's status for
//! the signal, 128 + its number ([`Signal::exit_code`]). A second signal stops at once: the temporary
//! files and directories registered with [`Temporary`] are removed first, so no half-written
//! `.name.tmp` is left behind.
//!
//! SIGUSR1 is the one to send a decomposed run: `mpirun` (OpenMPI) forwards it to every rank and
//! waits, where it turns Ctrl-C into SIGTERM and kills the ranks a second later (its
//! `odls_base_sigkill_timeout`), often before their next check; batch systems send it ahead of a time
//! limit (SLURM's `--signal=USR1@120`).
//!
//! Signals are taken by a thread of signal-hook's iterator rather than in a handler, so the cleanup
//! runs as ordinary code (file removal is not async-signal-safe). Without [`watch`], nothing changes:
//! the signals keep their default action.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

pub use crate::signal::Signal;
pub use lattice_gpu_formats::temporary::Temporary;

/// The first signal received, 0 before one.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The signal that asked the run to stop, if one did ([`watch`] must have been called).
pub fn requested() -> Option<Signal> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        n => Some(Signal(n)),
    }
}

/// Takes SIGINT, SIGTERM, SIGHUP and SIGUSR1 from now on (once per process; later calls do nothing): the first
/// raises [`requested`], the second removes the registered temporaries and exits. Fails only where the
/// signals cannot be taken, and says so.
pub fn watch() -> crate::Result<()> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED
        .get_or_init(start)
        .clone()
        .map_err(crate::Error::Internal)
}

#[cfg(unix)]
fn start() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])
        .map_err(|e| format!("cannot take SIGINT/SIGTERM/SIGHUP/SIGUSR1: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for n in signals.forever() {
                on_signal(Signal(n));
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

#[cfg(not(unix))]
fn start() -> Result<(), String> {
    Ok(())
}

fn on_signal(s: Signal) {
    if RECEIVED
        .compare_exchange(0, s.0, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        eprintln!("\n{s}: stopping at the run's next check; send it again to stop at once");
        return;
    }
    // Held until exit: a write starting now waits on the registry and never makes its temporary.
    let _removed = lattice_gpu_formats::temporary::remove_all();
    eprintln!("{s} again: stopped at once; temporary files removed, the run's output not written");
    std::process::exit(i32::from(s.exit_code()));
}
