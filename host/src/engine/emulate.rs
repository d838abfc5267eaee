//! A GPU launch of a 3-D kernel, run on the CPU: every thread of every block executes the same per-thread
//! code the generated kernel runs ([`plain_thread`], [`zqueue_thread`], [`TiledThread`],
//! [`vector_thread`], [`fields_vector_thread`]), with the thread coordinates a launch with the given
//! shape would give it. So the index arithmetic, the z-queue, the tile staging with its halo and guards,
//! and the double buffering of each variant are checked against the CPU engine for any launch shape on
//! a machine without a GPU.
//!
//! Within a tiled block the threads run one after another between barriers, in an order that is legal on
//! the GPU and hard on the tile: after the barrier of step `s`, each thread in turn computes step `s`,
//! moves on and stages step `s + 1` before the next thread computes step `s`. A tile that were not double
//! buffered, or a halo cell left unstaged (the tile starts as NaN), would change the result.
//!
//! [`emulate3d_temporal`] runs the temporally blocked loop ([`TemporalBlock`]) the same way: each phase
//! of each wavefront step for every thread in turn, the barrier between phases; its shared memory
//! starts as NaN too. [`emulate3d_columns`] runs the column form ([`ColumnThread`]) in the tiled order:
//! after the barrier of step `s` each thread in turn computes step `s` and stages step `s + 1`, which
//! the planes' double buffering must withstand.

use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::device::shared::SharedPtr;
use lattice_gpu_kernels::stencil::{
    ends_first, fields_vector_thread, plain_thread, signal_written, vector_thread, zqueue_thread,
    ColumnThread, FieldsUpdate3D, GpuEntry, LoopRange, PassRange, PointUpdate3D, StencilUpdate3D,
    TemporalBlock, ThreadCoords, TiledThread, Variant, STEP_PLANES,
};
use rayon::prelude::*;

use super::device::{KernelInfo, LaunchShape};
use super::{check_pass, check_radius, check_range};
use crate::error::{Error, Result};

/// The most threads per block the emulated device accepts (as every GPU from Volta on).
pub const EMULATED_MAX_THREADS: u32 = 1024;

/// The most dynamic shared memory an emulated block may have, its kernel opting in (as an H100).
pub const EMULATED_MAX_SHARED_BYTES: usize = 227 * 1024;

/// Runs `update` over `range` as the GPU kernel of `shape`'s variant launched with `shape` would, on the
/// CPU (blocks in parallel). Fails as the launch would: a range without the update's margin, a shape the
/// device refuses, a variant the kernel lacks. For tests; far slower than [`HostLoopEngine`](super::HostLoopEngine).
pub fn emulate3d<F: StencilUpdate3D + GpuEntry>(
    update: &F,
    range: &LoopRange,
    shape: LaunchShape,
) -> Result<()> {
    launch::<F>(range, shape, |b, tile_len| {
        block(update, range, shape, b, tile_len)
    })
}

/// [`emulate3d`] for a [`FieldsUpdate3D`], whose kernels are the plain and the vector variant
/// ([`fields_vector_thread`]).
pub fn emulate3d_fields<F: FieldsUpdate3D<N, M> + GpuEntry, const N: usize, const M: usize>(
    update: &F,
    range: &LoopRange,
    shape: LaunchShape,
) -> Result<()> {
    if !matches!(shape.variant, Variant::Plain | Variant::Vector) {
        return Err(Error::InvalidSetting(format!(
            "the emulator runs a fields update's plain and vector variants, not {}",
            shape.variant.name()
        )));
    }
    let march = shape.march;
    launch::<F>(range, shape, |b, _| {
        threads(shape, b).for_each(|c| match shape.variant {
            Variant::Vector => fields_vector_thread(update, range, march, c),
            _ => plain_thread(update, range, march, c),
        })
    })
}

/// Runs `steps` steps of `update` over `pass` as the temporally blocked kernel launched with `shape`'s
/// block and march would (its variant is not used): reads the input, writes the last step into the
/// output at the points of `pass.out`. Fails as the launch would: ranges without the update's margin
/// or not nested, no temporal entry, steps out of `1 ..= MAX_TEMPORAL_STEPS`, or more shared memory
/// than a block has.
pub fn emulate3d_temporal<F: StencilUpdate3D + GpuEntry>(
    update: &F,
    pass: &PassRange,
    shape: LaunchShape,
    steps: u32,
) -> Result<()> {
    let bytes = super::device::temporal_bytes::<F>(shape, steps, EMULATED_MAX_SHARED_BYTES)?;
    let elem = std::mem::size_of::<F::Real>();
    let plain = shape.with_variant(Variant::Plain);
    check_pass(pass, &F::RADIUS, F::ENTRY)?;
    launch::<F>(&pass.out, plain, |b, _| {
        let mut shared = vec![F::Real::from_f64(f64::NAN); bytes / elem];
        let ptr = SharedPtr::from_host_ptr(shared.as_mut_ptr());
        let first = threads(plain, b).next().expect("a block has a thread");
        let block = TemporalBlock::new(update, pass, shape.march, steps, first);
        let stages: Vec<_> = threads(plain, b).map(|c| block.stage::<F>(c)).collect();
        for q in block.wavefront().step_by(STEP_PLANES) {
            // The barrier after each phase: every thread has run it.
            for stage in &stages {
                // SAFETY: `shared` has the launch's bytes and outlives the loop.
                unsafe { block.stage_planes(update, ptr, stage, q) };
            }
            for level in 1..=steps {
                for stage in &stages {
                    // SAFETY: as above.
                    unsafe { block.level(update, ptr, stage, q, level) };
                }
            }
        }
    })
}

/// Runs `T` steps of `update` over `pass` in the column form of temporal blocking
/// ([`ColumnThread`]): blocks of `block` threads (x, y), each covering its output tile (the block less
/// `T` radii a side) of `pass.out` and `march` planes of z, their phases run for every thread in turn
/// between the barriers. Reads the input, writes the last step into the output at the points of
/// `pass.out`. Fails on ranges without the update's margin or not nested, a block with no output
/// tile or too many threads, or more shared memory than a block has.
pub fn emulate3d_columns<F: StencilUpdate3D + GpuEntry, const T: usize>(
    update: &F,
    pass: &PassRange,
    block: [u32; 2],
    march: u32,
) -> Result<()> {
    check_pass(pass, &F::RADIUS, F::ENTRY)?;
    let pass = &super::device::column_pass::<F>(pass, T as u32);
    super::device::column_entry::<F>(T as u32)?;
    let (grid, bytes) = super::device::column_launch::<F>(
        pass,
        block,
        march,
        T as u32,
        EMULATED_MAX_THREADS,
        EMULATED_MAX_SHARED_BYTES,
    )?;
    let elem = std::mem::size_of::<F::Real>();
    let blocks: Vec<[u32; 3]> = (0..grid.2)
        .flat_map(|z| (0..grid.1).flat_map(move |y| (0..grid.0).map(move |x| [x, y, z])))
        .collect();
    let signal = pass.signal;
    blocks.into_par_iter().for_each(|mut b| {
        let mut shared = vec![F::Real::from_f64(f64::NAN); bytes / elem];
        let ptr = SharedPtr::from_host_ptr(shared.as_mut_ptr());
        let shape = LaunchShape {
            block_x: block[0],
            block_y: block[1],
            march,
            variant: Variant::Plain,
        };
        if signal.counter != 0 {
            b[2] = ends_first(b[2], grid.2);
        }
        let coords: Vec<ThreadCoords> = threads(shape, b).collect();
        let mut threads: Vec<ColumnThread<F, T>> = coords
            .iter()
            .map(|&c| ColumnThread::new(pass, march, c))
            .collect();
        let steps = threads[0].steps();
        let count_written = || {
            if signal.counter == 0 {
                return;
            }
            let count = ColumnThread::<F, T>::end_points(pass, march, coords[0], signal.depth);
            if count > 0 {
                // SAFETY: a signalled pass's counter is a `u32` the caller keeps for the pass (host
                // memory here); the block's threads "all arrive" as the last runs.
                unsafe { signal_written(signal.counter, count, true) };
            }
        };
        if steps == 0 {
            count_written();
            return;
        }
        // SAFETY (all): `shared` has the launch's bytes and outlives the loop.
        for t in &mut threads {
            t.prime(update);
            unsafe { t.stage(ptr, 0) };
        }
        for s in 0..steps {
            // The barrier of step `s` is here: every thread has staged it. Then each thread in turn
            // computes step `s` and stages step `s + 1` before the next computes step `s`.
            for t in &mut threads {
                unsafe { t.compute(update, ptr, s) };
                if s + 1 < steps {
                    unsafe { t.stage(ptr, s + 1) };
                }
            }
        }
        count_written();
    });
    Ok(())
}

/// Checks the launch as the GPU would, then runs `block(block_idx, tile_len)` for every block of its
/// grid, `tile_len` the elements of its dynamic shared memory.
fn launch<F: PointUpdate3D + GpuEntry>(
    range: &LoopRange,
    shape: LaunchShape,
    block: impl Fn([u32; 3], usize) + Sync,
) -> Result<()> {
    check_range(range, 3)?;
    check_radius(range, &F::RADIUS, F::ENTRY)?;
    let kernel = KernelInfo::of3d::<F>();
    let cfg = shape.config(range, &kernel, EMULATED_MAX_THREADS)?;
    let (gx, gy, gz) = cfg.grid_dim;
    let tile_len = cfg.shared_mem_bytes as usize / kernel.elem_bytes;
    let blocks: Vec<[u32; 3]> = (0..gz)
        .flat_map(|z| (0..gy).flat_map(move |y| (0..gx).map(move |x| [x, y, z])))
        .collect();
    blocks.into_par_iter().for_each(|b| block(b, tile_len));
    Ok(())
}

/// The threads of block `b` of a launch of `shape`, x fastest.
fn threads(shape: LaunchShape, b: [u32; 3]) -> impl Iterator<Item = ThreadCoords> {
    let (bx, by) = (shape.block_x, shape.block_y);
    (0..by).flat_map(move |ty| {
        (0..bx).map(move |tx| ThreadCoords {
            block_idx: b,
            block_dim: [bx, by],
            thread_idx: [tx, ty],
        })
    })
}

/// One block of the launch.
fn block<F: StencilUpdate3D>(
    f: &F,
    r: &LoopRange,
    shape: LaunchShape,
    b: [u32; 3],
    tile_len: usize,
) {
    let march = shape.march;
    let threads = threads(shape, b);
    match shape.variant {
        Variant::Plain => threads.for_each(|c| plain_thread(f, r, march, c)),
        Variant::ZQueue => threads.for_each(|c| zqueue_thread(f, r, march, c)),
        Variant::Vector => threads.for_each(|c| vector_thread(f, r, march, c)),
        Variant::Tiled => {
            let mut shared = vec![F::Real::from_f64(f64::NAN); tile_len];
            let tile = SharedPtr::from_host_ptr(shared.as_mut_ptr());
            let mut block: Vec<TiledThread<F>> =
                threads.map(|c| TiledThread::new(f, r, march, c)).collect();
            let steps = block[0].steps();
            assert!(
                block.iter().all(|t| t.steps() == steps),
                "the threads of a block must run the same steps, or the barrier hangs"
            );
            if steps == 0 {
                return;
            }
            // SAFETY (all three): `shared` has the launch's `tile_shared_bytes` and outlives the loop.
            for t in &block {
                unsafe { t.stage(tile, 0) };
            }
            for s in 0..steps {
                // The barrier of step `s` is here: every thread has staged step `s`.
                for t in &mut block {
                    unsafe { t.compute(f, tile, s) };
                    t.advance(s);
                    if s + 1 < steps {
                        unsafe { t.stage(tile, s + 1) };
                    }
                }
            }
        }
    }
}
