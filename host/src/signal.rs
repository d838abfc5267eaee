//! The signals that ask a run to stop, as the shell names them and reports them in exit codes.
//!
//! Below the error type ([`Error::Interrupted`](crate::Error::Interrupted) names the signal) and the
//! signal handling ([`crate::interrupt`], which returns errors).

/// A signal that asks a run to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal(pub i32);

impl Signal {
    /// Its conventional name (`SIGINT`), or its number.
    pub fn name(self) -> String {
        #[cfg(unix)]
        {
            use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
            for (n, name) in [
                (SIGHUP, "SIGHUP"),
                (SIGINT, "SIGINT"),
                (SIGTERM, "SIGTERM"),
                (SIGUSR1, "SIGUSR1"),
            ] {
                if self.0 == n {
                    return name.into();
                }
            }
        }
        format!("signal {}", self.0)
    }

    /// The status a shell reports for a process ended by this signal: 128 + its number.
    pub fn exit_code(self) -> u8 {
        (128 + self.0).clamp(0, 255) as u8
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_names_are_the_shells() {
        assert_eq!(Signal(2).exit_code(), 130);
        assert_eq!(Signal(15).exit_code(), 143);
        assert_eq!(Signal(1).exit_code(), 129);
        assert_eq!(Signal(15).to_string(), "SIGTERM");
        assert_eq!(Signal(10).to_string(), "SIGUSR1");
        assert_eq!(Signal(10).exit_code(), 138);
    }
}
