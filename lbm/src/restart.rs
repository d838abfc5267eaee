//! Checkpoint and restart: what a checkpoint of a lattice-Boltzmann run holds beside the lattice
//! ([`Lbm::save_state`]), the parameters a resume must share with the run that wrote it, and the
//! collective read of one on rank 0.
//!
//! A checkpoint ([`Checkpoint`], one file) holds the step, the populations of the whole grid in their
//! storage type, slot by slot, as the lattice stores them at that step (the in-place scheme keeps a
//! cell's populations in reversed slots after an even number of steps and streamed into its
//! neighbours' after an odd one: the step's parity says which, and a resume goes on with the step it
//! implies), independent of how many ranks held the grid; and what the case keeps between steps: the
//! moments of the last steadiness check of a run to steady state ([`MONITOR`]), the energy samples of
//! the Taylor-Green vortex. The tags are not stored: every rank builds them again from the case's
//! parameters, which the checkpoint's parameters fix.
//!
//! Only rank 0 reads and writes the file. Whatever it finds wrong (a missing, corrupt, truncated or
//! foreign file, another run's parameters), every rank stops with its message ([`agree`]), so that no
//! rank waits for the others in a collective call.
//!
//! [`Lbm::save_state`]: crate::Lbm::save_state

use std::path::Path;

use lattice_gpu_formats::checkpoint::Checkpoint;
use lattice_gpu_formats::IoError;
use lattice_gpu_host::comm::Communicator;
use lattice_gpu_kernels::lbm::Velocities;

use crate::params::{Collision, Open, Params};
use crate::solver::{LbmStorage, Moments, Streaming};
use crate::{Error, Result};

/// The application a checkpoint of `lbm` names.
pub const APPLICATION: &str = "lbm";

/// The checkpoint's file name in its directory.
pub const FILE: &str = "lbm.ckpt";

/// The prefix of the arrays that hold the moments a run to steady state compares the next ones with.
pub const MONITOR: &str = "monitor";

/// The parameters of the physics, the grid and the storage that every resume of a run of `case` on
/// the grid `dims` must share with it, by the names of the options that set them: the case, the
/// grid, the storage precision, the streaming scheme and the velocity set (which decide what the
/// populations' bytes mean), and the relaxation, force and wall speed of `params`.
pub fn physics<S: LbmStorage>(
    case: &str,
    dims: [usize; 3],
    streaming: Streaming,
    velocities: Velocities,
    params: &Params,
) -> Vec<(String, String)> {
    let vector = |v: [f64; 3]| v.map(|c| c.to_string()).join(",");
    let mut p = vec![
        ("case".to_string(), case.to_string()),
        ("size".into(), dims.map(|d| d.to_string()).join("x")),
        ("precision".into(), S::NAME.into()),
        ("streaming".into(), streaming.name().into()),
        ("tau".into(), params.tau.to_string()),
    ];
    // Named only where not the default, so that the checkpoints written before stay as they were.
    if velocities != Velocities::D3Q19 {
        p.push(("velocities".into(), velocities.name().into()));
    }
    match params.collision {
        Collision::Bgk => p.push(("collision".into(), "bgk".into())),
        Collision::Trt { magic } => {
            p.push(("collision".into(), "trt".into()));
            p.push(("magic".into(), magic.to_string()));
        }
    }
    p.push(("force".into(), vector(params.force)));
    p.push(("wall-velocity".into(), vector(params.wall_velocity)));
    let open = &params.open;
    if *open != Open::NONE {
        let parabola = open
            .parabola
            .map(|a| a.map_or("uniform".into(), |[lo, hi]| format!("{lo}..{hi}")));
        p.push(("inflow".into(), vector(open.velocity)));
        p.push(("inflow-profile".into(), parabola.join(",")));
        p.push(("inflow-ramp".into(), open.ramp.to_string()));
        p.push(("outlet-density".into(), open.outlet_density.to_string()));
        // Named only where set, so that the checkpoints of fixed-density outlets stay as they were.
        if open.outlet_memory > 0 {
            p.push(("outlet-memory".into(), open.outlet_memory.to_string()));
        }
    }
    p
}

/// What rank 0 found in the checkpoint a run resumes from.
#[derive(Debug)]
pub struct Resumed<T> {
    /// The checkpoint's step, on every rank.
    pub step: u64,
    /// The checkpoint, its arrays not yet taken: rank 0's; `None` on the others.
    pub checkpoint: Option<Checkpoint>,
    /// What the caller took out of it: rank 0's; `None` on the others.
    pub taken: Option<T>,
}

/// Reads the checkpoint at `path` on rank 0, checks that it is one of [`APPLICATION`] with the
/// parameters `params`, and hands it to `take` (which checks the step and takes out what the run
/// keeps beside the lattice); every rank gets the step, or the error rank 0 met. Collective.
pub fn read<C: Communicator, T>(
    comm: &C,
    path: &Path,
    params: &[(String, String)],
    take: impl FnOnce(&mut Checkpoint) -> Result<T>,
) -> Result<Resumed<T>> {
    let mine = (comm.rank() == 0).then(|| -> Result<(Checkpoint, T)> {
        let mut ck = Checkpoint::read(path)?;
        ck.check_resume(APPLICATION, params, path)?;
        let taken = take(&mut ck)?;
        Ok((ck, taken))
    });
    let mine = agree(comm, mine.transpose())?;
    let mut step = [mine.as_ref().map_or(0, |(ck, _)| ck.step)];
    comm.broadcast(&mut step)?;
    let (checkpoint, taken) = match mine {
        Some((ck, t)) => (Some(ck), Some(t)),
        None => (None, None),
    };
    Ok(Resumed {
        step: step[0],
        checkpoint,
        taken,
    })
}

/// `result` on rank 0, and on every other rank rank 0's error where it is one: the collective that
/// makes all ranks stop together when rank 0 alone found a problem (in a file only it reads).
/// Another rank's own `result` comes back as it was.
pub fn agree<C: Communicator, T>(comm: &C, result: Result<T>) -> Result<T> {
    let message = match &result {
        Err(e) if comm.rank() == 0 => e.to_string(),
        _ => String::new(),
    };
    let len = comm.sum(message.len() as f64)? as usize;
    if len == 0 {
        return result;
    }
    let mut bytes = match comm.rank() {
        0 => message.into_bytes(),
        _ => vec![0u8; len],
    };
    comm.broadcast(&mut bytes)?;
    match comm.rank() {
        0 => result,
        _ => Err(Error::OnRank0(String::from_utf8_lossy(&bytes).into_owned())),
    }
}

/// `ck` with the moments `m` as the arrays `NAME.rho` and `NAME.u` (x, y, z of each cell in turn).
pub fn put_moments(ck: Checkpoint, name: &str, m: &Moments) -> Checkpoint {
    ck.array(&format!("{name}.rho"), &m.rho)
        .array(&format!("{name}.u"), m.u.as_flattened())
}

/// The moments [`put_moments`] stored as `name`, of the grid `dims`, taken out of `ck` (read from
/// `path`, for the message); `None` where it holds none.
pub fn take_moments(
    ck: &mut Checkpoint,
    name: &str,
    dims: [usize; 3],
    path: &Path,
) -> Result<Option<Moments>> {
    let rho_name = format!("{name}.rho");
    if !ck.arrays.iter().any(|a| a.name == rho_name) {
        return Ok(None);
    }
    let rho = ck.take::<f64>(&rho_name, path)?;
    let u = ck.take::<f64>(&format!("{name}.u"), path)?;
    let cells = dims.iter().product::<usize>();
    if rho.len() != cells || u.len() != 3 * cells {
        return Err(IoError::Checkpoint {
            path: path.to_path_buf(),
            problem: format!(
                "its moments `{name}` hold {} densities and {} velocity components, and the grid \
                 has {cells} cells",
                rho.len(),
                u.len()
            ),
        }
        .into());
    }
    let u = u.chunks_exact(3).map(|v| [v[0], v[1], v[2]]).collect();
    Ok(Some(Moments { dims, rho, u }))
}
