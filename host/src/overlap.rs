//! The step of a decomposed run with its halo exchange hidden behind the work that reads no halo,
//! written once for every application (Shimokawabe et al.'s overlap): an application gives its
//! exchange and its two kinds of work ([`OverlapStep`]), [`step`] orders them.
//!
//! Through host memory the exchange starts (the layers this rank sends are copied out), the interior
//! is queued (on a GPU it runs meanwhile), the exchange completes, then the boundary runs. Where the
//! exchange has a stream of its own (NCCL), the boundary runs first, on that stream, followed there by
//! the exchange of what it wrote, both beside the interior: the step then waits for neither unless they
//! outlast the interior. Where the step's work is one pass whose blocks count the boundary layers
//! they have written ([`OverlapStep::signals`]), that pass is the interior and there is no boundary:
//! the exchange, queued after it on its own stream, waits there for the count and runs beside the
//! rest of the pass. Without overlap the exchange completes before any work: the baseline the overlap is
//! measured against, with the same results.

/// What a decomposed step is made of: its halo exchange and its two kinds of work. `next` names the
/// state an exchange moves: the one the step reads (`false`) or the one it writes (`true`, the
/// exchange that follows the boundary on its own stream).
pub trait OverlapStep {
    /// The error of the application's work.
    type Error;
    /// Whether the exchange runs on a stream of its own beside the GPU's (NCCL), rather than through
    /// host memory in order.
    fn runs_beside(&self) -> bool;
    /// Starts the exchange of the halos of the state `next` says, after the work queued on it (or,
    /// where the step [`signals`](Self::signals), once the interior queued before has counted them).
    fn start(&mut self, next: bool) -> Result<(), Self::Error>;
    /// Completes the exchange [`start`](Self::start) began: the halos are in for the work queued next.
    fn finish(&mut self, next: bool) -> Result<(), Self::Error>;
    /// Queues the work that reads halos (a subdomain's first and last layers); with `beside`, on the
    /// exchange's stream (where [`runs_beside`](Self::runs_beside)), the halos it reads having come
    /// with the step before.
    fn boundary(&mut self, beside: bool) -> Result<(), Self::Error>;
    /// Queues the work that reads no halo.
    fn interior(&mut self) -> Result<(), Self::Error>;
    /// Whether the interior is the whole step, one pass that counts on the GPU the boundary layers it
    /// has written, which the exchange of the next state waits for on its own stream (where the
    /// exchange [`runs_beside`](Self::runs_beside)); [`boundary`](Self::boundary) is then not called.
    fn signals(&self) -> bool {
        false
    }
}

/// One step of `s`: with `overlap`, the exchange hidden behind the interior (the boundary and the
/// exchange of what it writes beside the interior, where the exchange has a stream of its own);
/// without, the exchange completes before any work runs.
pub fn step<S: OverlapStep>(s: &mut S, overlap: bool) -> Result<(), S::Error> {
    if overlap && s.runs_beside() && s.signals() {
        // The pass first: an exchange waiting for a count that no queued pass makes would hang.
        s.interior()?;
        s.start(true)?;
        return s.finish(true);
    }
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
        signals: bool,
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
        fn signals(&self) -> bool {
            self.signals
        }
    }

    fn calls(beside: bool, overlap: bool) -> String {
        calls_of(beside, overlap, false)
    }

    fn calls_of(beside: bool, overlap: bool, signals: bool) -> String {
        let mut log = Log {
            beside,
            signals,
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
        // A pass that counts what it writes, then the exchange waiting for the count.
        assert_eq!(
            calls_of(true, true, true),
            "interior, start true, finish true"
        );
        // Through the host, or without overlap, the count is not waited on.
        assert_eq!(
            calls_of(false, true, true),
            "start false, interior, finish false, boundary false"
        );
        assert_eq!(calls_of(true, false, true), serial);
    }
}
