//! How a binary's run starts (stopped by signals at its checks) and ends (its exit code, never a panic).

/// Starts an application's run: SIGINT, SIGTERM, SIGHUP and SIGUSR1 from now on stop it at its next check
/// ([`interrupt`](lattice_gpu_host::interrupt)) instead of killing it mid-write; where they cannot be
/// taken, a notice says so and the run goes on without.
pub fn start() {
    if let Err(e) = lattice_gpu_host::interrupt::watch() {
        eprintln!("notice: {e}; a signal will end the run at once");
    }
}

/// How an application ends: success; or the error's message on stderr and exit code 1, or 128 + the
/// signal's number where a signal stopped the run (130 for SIGINT, as a shell reports it). Never a
/// panic. Usage errors exit with 2 before this (clap's convention).
pub fn exit<E: std::fmt::Display>(result: std::result::Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match lattice_gpu_host::interrupt::requested() {
                Some(signal) => std::process::ExitCode::from(signal.exit_code()),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}
