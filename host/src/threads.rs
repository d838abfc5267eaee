//! The ranks of a decomposed run as threads of one process (`--gpus N`: one thread per GPU): a
//! [`Communicator`] whose messages are shared in memory, and [`run`], which starts the threads. NCCL
//! between the GPUs bootstraps through it as through MPI (rank 0's unique id broadcast), so one process
//! drives several GPUs without `mpirun`.

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::comm::{on_axis, Communicator, Wire};
use crate::decomp::{Face, Side};
use crate::error::{Error, Result};

type Post = Arc<dyn Any + Send + Sync>;

/// What the threads of one run share: the current round of posts, and which rank stopped first.
struct Board {
    size: usize,
    round: Mutex<Round>,
    turn: Condvar,
}

#[derive(Default)]
struct Round {
    posts: Vec<Option<Post>>,
    posted: usize,
    read: usize,
    number: u64,
    /// The first rank that failed: the others' collective calls fail instead of waiting for it.
    stopped: Option<usize>,
    /// The first rank that finished well: a collective call still waiting for it can never complete.
    finished: Option<usize>,
}

/// One rank of a run's threads. Collective: every rank must make the same calls in the same order.
#[derive(Clone)]
pub struct Threads {
    rank: usize,
    board: Arc<Board>,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("rank", &self.rank)
            .field("size", &self.board.size)
            .finish()
    }
}

impl Threads {
    fn lock(&self) -> MutexGuard<'_, Round> {
        // A rank that panicked while holding the lock left the round as it was: still consistent.
        self.board
            .round
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits on the board until `done`, failing if a rank stopped meanwhile.
    fn wait_until<'a>(
        &self,
        mut round: MutexGuard<'a, Round>,
        done: impl Fn(&Round) -> bool,
    ) -> Result<MutexGuard<'a, Round>> {
        while !done(&round) {
            if let Some(r) = round.stopped {
                return Err(Error::Comm(format!(
                    "rank {r} of this process's {} stopped (its error says why)",
                    self.board.size
                )));
            }
            if let Some(r) = round.finished {
                return Err(mismatch(format!(
                    "rank {r} finished while rank {} still made a collective call",
                    self.rank
                )));
            }
            round = self
                .board
                .turn
                .wait(round)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(round)
    }

    /// Every rank's post, in rank order, once all have posted.
    fn all_gather(&self, mine: Post) -> Result<Vec<Post>> {
        let size = self.board.size;
        let mut round = self.lock();
        round.posts[self.rank] = Some(mine);
        round.posted += 1;
        if round.posted == size {
            self.board.turn.notify_all();
        }
        let number = round.number;
        // A round is reset only once every rank has read it: this one is still whole.
        let mut round = self.wait_until(round, |r| r.posted == size)?;
        let all: Vec<Post> = round.posts.iter().flatten().cloned().collect();
        round.read += 1;
        if round.read == size {
            // The last reader opens the next round.
            round.posts.iter_mut().for_each(|p| *p = None);
            (round.posted, round.read) = (0, 0);
            round.number += 1;
            self.board.turn.notify_all();
        } else {
            drop(self.wait_until(round, |r| r.number != number)?);
        }
        Ok(all)
    }

    /// Marks this rank failed (`ok` false) or finished well, waking the ranks waiting for it.
    fn leave(&self, ok: bool) {
        let mut round = self.lock();
        if ok {
            round.finished.get_or_insert(self.rank);
        } else {
            round.stopped.get_or_insert(self.rank);
        }
        self.board.turn.notify_all();
    }
}

/// The error of ranks whose collective calls differ (a bug in the caller), with what showed it.
fn mismatch(what: String) -> Error {
    Error::Comm(format!(
        "{what}: the ranks made different collective calls, which every rank must make alike"
    ))
}

/// Rank `from`'s post as the `T` this rank posted in the same call.
fn post_as<T: 'static>(post: &Post, from: usize) -> Result<&T> {
    post.downcast_ref::<T>().ok_or_else(|| {
        mismatch(format!(
            "rank {from} posted something else than {} in the same round",
            std::any::type_name::<T>()
        ))
    })
}

/// One message of an exchange: to `peer`, arriving on its side `side`.
struct Message<T> {
    peer: usize,
    side: Side,
    values: Vec<T>,
}

impl Communicator for Threads {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.board.size
    }

    fn ranks_here(&self) -> usize {
        self.board.size
    }

    fn exchange<T: Wire, const D: usize, I: Fn([usize; D]) -> usize + ?Sized>(
        &self,
        faces: &[Face<D>],
        data: &mut [T],
        index: &I,
    ) -> Result<()> {
        for axis in 0..D {
            let out: Vec<Message<T>> = on_axis(faces, axis)
                .map(|f| Message {
                    peer: f.peer,
                    side: f.side.opposite(),
                    values: crate::comm::pack(data, &f.send, index),
                })
                .collect();
            let all = self.all_gather(Arc::new(out))?;
            for f in on_axis(faces, axis) {
                let from = post_as::<Vec<Message<T>>>(&all[f.peer], f.peer)?;
                if let Some(m) = from
                    .iter()
                    .find(|m| m.peer == self.rank && m.side == f.side)
                {
                    crate::comm::unpack(data, &f.recv, &m.values, index);
                }
            }
        }
        Ok(())
    }

    fn sum(&self, v: f64) -> Result<f64> {
        // In rank order on every rank: the same bits everywhere.
        let all = self.all_gather(Arc::new(v))?;
        let mut total = 0.0;
        for (rank, p) in all.iter().enumerate() {
            total += *post_as::<f64>(p, rank)?;
        }
        Ok(total)
    }

    fn broadcast<T: Wire>(&self, v: &mut [T]) -> Result<()> {
        let all = self.all_gather(Arc::new(v.to_vec()))?;
        let first = post_as::<Vec<T>>(&all[0], 0)?;
        if first.len() != v.len() {
            return Err(Error::Comm(format!(
                "a broadcast of {} values from rank 0 to a buffer of {} on rank {}",
                first.len(),
                v.len(),
                self.rank
            )));
        }
        v.copy_from_slice(first);
        Ok(())
    }

    fn gather<T: Wire>(&self, part: &[T]) -> Result<Vec<T>> {
        let all = self.all_gather(Arc::new(part.to_vec()))?;
        if self.rank != 0 {
            return Ok(Vec::new());
        }
        let mut whole = Vec::new();
        for (rank, p) in all.iter().enumerate() {
            whole.extend_from_slice(post_as::<Vec<T>>(p, rank)?);
        }
        Ok(whole)
    }
}

/// Runs `body` on `ranks` threads, rank `r` on the `r`-th, each with its [`Threads`] rank, and returns
/// their results in rank order; or the error of the first rank that failed (the others' collective
/// calls then fail instead of waiting for it). A panic on a rank is resumed here.
pub fn run<R: Send, E: Send>(
    ranks: usize,
    body: impl Fn(&Threads) -> std::result::Result<R, E> + Sync,
) -> std::result::Result<Vec<R>, E> {
    let board = Arc::new(Board {
        size: ranks,
        round: Mutex::new(Round {
            posts: vec![None; ranks],
            ..Round::default()
        }),
        turn: Condvar::new(),
    });
    /// Marks its rank finished well or stopped (also while a panic unwinds).
    struct Guard<'a>(&'a Threads, bool);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            self.0.leave(self.1);
        }
    }
    let results: Vec<std::thread::Result<std::result::Result<R, E>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let comm = Threads {
                    rank,
                    board: board.clone(),
                };
                let body = &body;
                s.spawn(move || {
                    let mut guard = Guard(&comm, false);
                    let result = body(&comm);
                    guard.1 = result.is_ok();
                    result
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let first = board
        .round
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stopped;
    let mut out = Vec::with_capacity(ranks);
    let mut errors: Vec<Option<E>> = Vec::new();
    for r in results {
        match r {
            Ok(Ok(v)) => {
                out.push(v);
                errors.push(None);
            }
            Ok(Err(e)) => errors.push(Some(e)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    match first.and_then(|r| errors.get_mut(r)?.take()) {
        Some(e) => Err(e),
        None => match errors.into_iter().flatten().next() {
            Some(e) => Err(e),
            None => Ok(out),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Solo;
    use crate::decomp::Decomposition;

    #[test]
    fn sums_broadcasts_and_gathers_in_rank_order() {
        let got = run(4, |c| -> Result<_> {
            let s = c.sum(c.rank() as f64 + 0.5)?;
            let mut id = [c.rank() as u8 + 7; 3];
            c.broadcast(&mut id)?;
            let all = c.gather(&[c.rank() as u32; 2])?;
            // Many rounds in a row: no rank may run into the next round's posts.
            let many: f64 = (0..200).map(|k| c.sum(k as f64)).sum::<Result<f64>>()?;
            Ok((s, id, all, many))
        })
        .unwrap();
        for (r, (s, id, all, many)) in got.iter().enumerate() {
            assert_eq!(*s, 8.0);
            assert_eq!(*id, [7; 3]);
            let want: Vec<u32> = if r == 0 {
                vec![0, 0, 1, 1, 2, 2, 3, 3]
            } else {
                vec![]
            };
            assert_eq!(*all, want);
            assert_eq!(*many, 4.0 * (0..200).sum::<i32>() as f64);
        }
    }

    #[test]
    fn exchanges_match_the_one_rank_communicator() {
        // A periodic 1-D ring of 12 points over 1 to 5 ranks with a halo of 2: each rank's margins
        // hold its neighbours' values, as the whole ring's would.
        for ranks in 1..=5 {
            let split = Decomposition::new([12], [ranks], [2], [true]).unwrap();
            let got = run(ranks, |c| -> Result<Vec<f64>> {
                let own = split.owned(c.rank());
                let mut data = vec![f64::NAN; own.size[0] + 4];
                for i in 0..own.size[0] {
                    data[i + 2] = (own.begin[0] + i) as f64;
                }
                c.exchange(&split.halo_plan(c.rank()), &mut data, &|p: [usize; 1]| p[0])?;
                Ok(data)
            })
            .unwrap();
            for (r, data) in got.iter().enumerate() {
                let own = split.owned(r);
                for (i, v) in data.iter().enumerate() {
                    let want = ((own.begin[0] + 12 + i) - 2) % 12;
                    assert_eq!(*v, want as f64, "{ranks} ranks, rank {r}, element {i}");
                }
            }
        }
        // One rank: the same as Solo.
        let split = Decomposition::new([5], [1], [1], [true]).unwrap();
        let mut solo = vec![9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 9.0];
        Solo.exchange(&split.halo_plan(0), &mut solo, &|p: [usize; 1]| p[0])
            .unwrap();
        let threads = run(1, |c| -> Result<Vec<f64>> {
            let mut d = vec![9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 9.0];
            c.exchange(&split.halo_plan(0), &mut d, &|p: [usize; 1]| p[0])?;
            Ok(d)
        })
        .unwrap();
        assert_eq!(threads[0], solo);
    }

    #[test]
    fn a_failing_rank_stops_the_others_and_its_error_is_returned() {
        let e = run(3, |c| -> std::result::Result<(), String> {
            if c.rank() == 1 {
                return Err("rank 1's own problem".into());
            }
            // The others wait in a collective rank 1 never joins: they must not hang.
            c.sum(1.0).map_err(|e| e.to_string())?;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e, "rank 1's own problem");
    }

    #[test]
    fn ranks_making_different_calls_get_an_error_not_a_hang() {
        // One sum more on rank 2: it waits for ranks that finished.
        let e = run(3, |c| -> Result<()> {
            c.sum(1.0)?;
            if c.rank() == 2 {
                c.sum(2.0)?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("finished while rank 2 still made a collective call")
                && e.contains("different collective calls"),
            "{e}"
        );
        // A sum against a broadcast: the posts differ in type.
        let e = run(2, |c| -> Result<()> {
            if c.rank() == 0 {
                c.sum(1.0)?;
            } else {
                c.broadcast(&mut [1u8; 4])?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("posted something else than"), "{e}");
    }
}
