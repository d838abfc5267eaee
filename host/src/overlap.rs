//! The step of a decomposed run with its halo exchange hidden behind the work that reads no halo,
//! written once for every application (Shimokawabe et al.'s overlap): an application gives its
//! exchange and its two kinds of work ([`OverlapStep`]), [`step`] orders them.
//!
//! Through host memory the exchange starts (the layers this rank sends are copied out), the interior
//! is queued (on a GPU it runs meanwhile), the exchange completes, then the boundary runs. Where the
//! exchange has a stream of its own (NCCL), the boundary runs first, on that stream, followed there by
//! the exchange of what it wrote, both beside the interior: the step then waits for neither unless they
//! outlast the interior. Without overlap the exchange completes before any work: the baseline the
//! overlap is measured against, with the same results.

/// What a decomposed step is made of: its halo exchange and its two kinds of work. `next` names the
/// state an exchange moves: the one the step reads (`false`) or the one it writes (`true`, the
/// exchange that follows the boundary on its own stream).
pub trait OverlapStep {
    /// The error of the application's work.
    type Error;
    /// Whether the exchange runs on a stream of its own beside the GPU's (NCCL), rather than through
    /// host memory in order.
    fn runs_beside(&self) -> bool;
    /// Starts the exchange of the halos of the state `next` says, after the work queued on it.
    fn start(&mut self, next: bool) -> Result<(), Self::Error>;
    /// Completes the exchange [`start`](Self::start) began: the halos are in for the work queued next.
    fn finish(&mut self, next: bool) -> Result<(), Self::Error>;
    /// Queues the work that reads halos (a subdomain's first and last layers); with `beside`, on the
    /// exchange's stream (where [`runs_beside`](Self::runs_beside)), the halos it reads having come
    /// with the step before.
    fn boundary(&mut self, beside: bool) -> Result<(), Self::Error>;
    /// Queues the work that reads no halo.
    fn interior(&mut self) -> Result<(), Self::Error>;
}

/// One step of `s`: with `overlap`, the exchange hidden behind the interior (the boundary and the
/// exchange of what it writes beside the interior, where the exchange has a stream of its own);
/// without, the exchange completes before any work runs.
pub fn step<S: OverlapStep>(s: &mut S, overlap: bool) -> Result<(), S::Error> {
    if overlap && s.runs_beside() {
        s.boundary(true)?;
        s.start(true)?;
        s.interior()?;
        return s.finish(true);
    }
    s.start(false)?;
    if !overlap {
        s.finish(false)?;
    }
    s.interior()?;
    if overlap {
        s.finish(false)?;
    }
    s.boundary(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the calls, to check the order of each form.
    struct Log {
        beside: bool,
        calls: Vec<String>,
    }

    impl OverlapStep for Log {
        type Error = ();
        fn runs_beside(&self) -> bool {
            self.beside
        }
        fn start(&mut self, next: bool) -> Result<(), ()> {
            self.calls.push(format!("start {next}"));
            Ok(())
        }
        fn finish(&mut self, next: bool) -> Result<(), ()> {
            self.calls.push(format!("finish {next}"));
            Ok(())
        }
        fn boundary(&mut self, beside: bool) -> Result<(), ()> {
            self.calls.push(format!("boundary {beside}"));
            Ok(())
        }
        fn interior(&mut self) -> Result<(), ()> {
            self.calls.push("interior".into());
            Ok(())
        }
    }

    fn calls(beside: bool, overlap: bool) -> String {
        let mut log = Log {
            beside,
            calls: vec![],
        };
        step(&mut log, overlap).unwrap();
        log.calls.join(", ")
    }

    #[test]
    fn each_form_orders_the_exchange_and_the_work() {
        // Through the host, overlapped: the halos go out, the interior runs meanwhile, then the edges.
        assert_eq!(
            calls(false, true),
            "start false, interior, finish false, boundary false"
        );
        // The baseline: the exchange first, whatever the transport.
        let serial = "start false, finish false, interior, boundary false";
        assert_eq!(calls(false, false), serial);
        assert_eq!(calls(true, false), serial);
        // NCCL, overlapped: the edges and the exchange of what they write beside the interior.
        assert_eq!(
            calls(true, true),
            "boundary true, start true, interior, finish true"
        );
    }
}
