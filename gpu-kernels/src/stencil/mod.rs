//! The device half of the stencil framework (Shimokawabe et al.): a point index with compile-time
//! neighbour offsets, the loop range, the point-update traits the user implements, the loops that run a
//! point update over a range on the GPU, and the macros that make a kernel entry for a point-update type.
//!
//! A point update is a `#[repr(C)]` struct holding everything one grid point needs (field pointers,
//! coefficients): the functor of the paper together with its parameters. The host builds it, an engine
//! runs `update` for every point of a range, on the CPU or as a generated GPU kernel.

mod block;
mod columns;
mod field;
mod index;
mod loops;
mod reduce;
mod source;
mod temporal;

pub use block::{BlockProgram, BlockStrided, Passes, Serial};
pub use columns::{
    column_output_tile, column_rows, column_shared_bytes, column_tile, device_loop3d_columns,
    ends_first, signal_written, ColumnThread, COLUMN_MAXNREG, COLUMN_MAXNREG_SUFFIX,
    COLUMN_PLANE_CELLS, MAX_COLUMN_ROWS, MAX_COLUMN_STEPS,
};
pub use field::{FieldMut, FieldRef, VECTOR_BYTES};
pub use index::{ArrayIndex2D, ArrayIndex3D};
pub use loops::{
    device_loop2d, device_loop3d, device_loop3d_fields_vector, device_loop3d_lanes,
    device_loop3d_tiled, device_loop3d_vector, device_loop3d_zqueue, device_sum3d,
    fields_vector_thread, lanes_thread, plain_thread, sum_thread, tile_shared_bytes, vector_lanes,
    vector_thread, zqueue_thread, LoopRange, PassRange, PassSignal, ThreadCoords, TiledThread,
};
pub use reduce::{CountNonFinite, FieldDot, FieldDotInto, SumInto};
pub use source::{Lane, Source3D, Tile, VectorQueue, ZQueue, ZQUEUE_MAX_RADIUS};
pub use temporal::{
    device_loop3d_temporal, temporal_shared_bytes, Stage, TemporalBlock, MAX_TEMPORAL_STEPS,
    STAGE_CELLS, STEP_PLANES,
};

use crate::device::math::Real;

/// The update of one point of a 3-D grid. Implementations must be `#[repr(C)]` (the struct is passed to
/// the GPU kernel by value) and must not use block barriers (threads outside the range return early).
/// Updates with one stencil input field can also implement [`StencilUpdate3D`] to get the staged
/// kernel variants, updates of several fields [`FieldsUpdate3D`] to get the vector variant.
pub trait PointUpdate3D: Copy + Send + Sync {
    /// The working precision; names the precision in tune-cache keys and bandwidth figures.
    type Real: Real;
    /// The largest neighbour offset `update` reads along each axis (x, y, z). The loop checks that the
    /// range leaves at least this much margin, so `update` may index without bounds checks.
    const RADIUS: [u32; 3] = [1, 1, 1];
    /// Floating-point operations per point, for the rates benchmarks print (0: not stated).
    const FLOPS: u32 = 0;
    /// Bytes per point the update must move through device memory at the least (each value it reads
    /// or writes once, neighbours from cache), for the fraction of the copy bandwidth (0: not stated).
    const BYTES: u32 = 0;
    /// Computes the point `idx`.
    fn update(&self, idx: &ArrayIndex3D);
}

/// A [`PointUpdate3D`] that also adds a term per point to one f64 sum over the range: a dot product
/// fused into the loop that writes (or reads) its operands, so that the operands are not read again
/// (the ocean-model report's kernel fusion; conjugate gradients' `p.Ap` and `r.r`). The engines' summing
/// loop (`run3d_sum`) leaves the sum in a value where the fields live; its kernel, made by
/// [`kernel3d_sum!`](crate::kernel3d_sum), needs blocks of whole warps.
///
/// The update is written in two halves, [`load`](Self::load) and [`store_term`](Self::store_term), so
/// that the GPU loop can load a thread's next point before it stores this one: the compiler cannot
/// tell the fields apart and would otherwise wait for every store before the next loads (a thread
/// would keep one point's bytes in flight, too few for the memory). That order is legal because no
/// point reads what another point writes (other threads may run it at any time).
/// [`PointUpdate3D::update`] is `self.update_term(idx);`.
pub trait SumUpdate3D: PointUpdate3D {
    /// What the point's update reads from memory.
    type Loads: Copy;
    /// Loads what the point `idx` reads, and nothing more.
    fn load(&self, idx: &ArrayIndex3D) -> Self::Loads;
    /// Computes the point `idx` from its loads, stores it and returns its term of the sum.
    fn store_term(&self, idx: &ArrayIndex3D, loads: Self::Loads) -> f64;
    /// The whole point: [`load`](Self::load), then [`store_term`](Self::store_term).
    #[inline(always)]
    fn update_term(&self, idx: &ArrayIndex3D) -> f64 {
        self.store_term(idx, self.load(idx))
    }
}

/// A [`PointUpdate3D`] that reads its stencil input field (the one whose neighbours it reads) only through
/// a [`Source3D`] and writes one value per point into its output field. Opting in lets
/// [`kernel3d!`](crate::kernel3d) generate the staged kernel variants (see [`Variant`]), which keep the
/// input's values in registers and shared memory instead of reloading them, or compute the points of a
/// vector per thread with vector loads and stores; the update is still written once, in
/// [`value_with`](Self::value_with), and its [`PointUpdate3D::update`] is
/// `self.update_with(idx, &self.input())` (a [`FieldRef`] is the plain global source), which the CPU
/// engine and the plain kernel run.
///
/// The staged variants assume the input is not written while a loop runs (as every point update already
/// must, since other threads read it). Reads of other fields the update holds go to memory as usual.
pub trait StencilUpdate3D: PointUpdate3D {
    /// The stencil input field: what [`value_with`](Self::value_with)'s source reads.
    fn input(&self) -> FieldRef<Self::Real>;
    /// The field the point's value is written to.
    fn output(&self) -> FieldMut<Self::Real>;
    /// The new value of the point `idx`, reading the input at offset (DX, DY, DZ) as
    /// `src.at::<DX, DY, DZ>(idx)` (within [`PointUpdate3D::RADIUS`]).
    fn value_with<S: Source3D<Self::Real>>(&self, idx: &ArrayIndex3D, src: &S) -> Self::Real;
    /// Computes the point `idx` from `src` and stores it.
    #[inline(always)]
    fn update_with<S: Source3D<Self::Real>>(&self, idx: &ArrayIndex3D, src: &S) {
        self.output().set(idx.ix(), self.value_with(idx, src));
    }
}

/// A [`PointUpdate3D`] of several fields: it reads each of its `N` stencil input fields only through a
/// [`Source3D`] of its own and writes one value per point into each of its `M` output fields (a
/// reaction-diffusion step of two species). Opting in lets [`kernel3d!`](crate::kernel3d) generate the
/// vector variant besides the plain one ([`device_loop3d_fields_vector`]: the points of a 16-byte
/// vector per thread, each input's columns in a [`VectorQueue`]). As for [`StencilUpdate3D`], the update
/// is written once, in [`values_with`](Self::values_with), and its [`PointUpdate3D::update`] is
/// `self.update_with(idx, &self.inputs())`, which the CPU engine and the plain kernel run.
///
/// The vector variant assumes the inputs are not written while a loop runs.
pub trait FieldsUpdate3D<const N: usize, const M: usize>: PointUpdate3D {
    /// The stencil input fields: what [`values_with`](Self::values_with)'s sources read, in order.
    fn inputs(&self) -> [FieldRef<Self::Real>; N];
    /// The fields the point's values are written to, in the order of the values.
    fn outputs(&self) -> [FieldMut<Self::Real>; M];
    /// The new values of the point `idx`, one per output, reading input `i` at offset (DX, DY, DZ) as
    /// `src[i].at::<DX, DY, DZ>(idx)` (within [`PointUpdate3D::RADIUS`]).
    fn values_with<S: Source3D<Self::Real>>(
        &self,
        idx: &ArrayIndex3D,
        src: &[S; N],
    ) -> [Self::Real; M];
    /// Computes the point `idx` from `src` and stores its values.
    #[inline(always)]
    fn update_with<S: Source3D<Self::Real>>(&self, idx: &ArrayIndex3D, src: &[S; N]) {
        let values = self.values_with(idx, src);
        // By reference: an array's by-value iterator indexes a copy in local memory on the GPU.
        for (out, &v) in self.outputs().iter().zip(&values) {
            out.set(idx.ix(), v);
        }
    }
}

/// A [`PointUpdate3D`] that can also compute the `W` x-neighbouring points of one 16-byte vector at once
/// ([`vector_lanes`] of them: 4 in f32, 2 in f64), with vector loads and stores of its own: updates
/// whose neighbours are no plain stencil offsets (a red-black sweep on fields stored by colour) get the
/// vector variant this way. [`kernel3d!`](crate::kernel3d) makes its entry with `lanes = name`.
pub trait LanesUpdate3D: PointUpdate3D {
    /// Whether [`update_lanes`](Self::update_lanes) may run at `idx` and at every point above it in z
    /// (its vector accesses are aligned there); where not, the loop runs
    /// [`update`](PointUpdate3D::update) a column at a time.
    fn lanes_aligned<const W: usize>(&self, idx: &ArrayIndex3D) -> bool;
    /// Computes the points `idx, idx + 1, ..., idx + W - 1` of `idx`'s row that lie inside `r` (`idx`
    /// does); lanes past `r.end[0]` must be left as they are. Only called where
    /// [`lanes_aligned`](Self::lanes_aligned) holds. The same arithmetic as
    /// [`update`](PointUpdate3D::update) per point, so the result is the same to the bit.
    fn update_lanes<const W: usize>(&self, idx: &ArrayIndex3D, r: &LoopRange);
}

/// How a generated 3-D kernel reads the stencil input: the named tuning parameter `variant` (its `u32`
/// value) of the auto-tuner and the suffix of the kernel's entry names.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// Every neighbour loaded from global memory, every step ([`device_loop3d`]).
    Plain = 0,
    /// The input column kept in a register z-queue while the thread marches ([`device_loop3d_zqueue`]).
    ZQueue = 1,
    /// Each plane's xy tile with its halo staged in shared memory, the column in the z-queue
    /// ([`device_loop3d_tiled`]).
    Tiled = 2,
    /// The x-neighbouring points of one 16-byte vector per thread (4 in f32, 2 in f64), each vector
    /// moved by one load or store: a [`StencilUpdate3D`]'s columns in a register z-queue of vectors
    /// ([`device_loop3d_vector`]), a [`FieldsUpdate3D`]'s in one such queue per input
    /// ([`device_loop3d_fields_vector`]), a [`LanesUpdate3D`]'s own vector update
    /// ([`device_loop3d_lanes`]).
    Vector = 3,
}

impl Variant {
    /// Every variant, in tuning order.
    pub const ALL: [Variant; 4] = [
        Variant::Plain,
        Variant::ZQueue,
        Variant::Tiled,
        Variant::Vector,
    ];

    /// `"plain"`, `"zqueue"`, `"tiled"` or `"vector"`.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::ZQueue => "zqueue",
            Variant::Tiled => "tiled",
            Variant::Vector => "vector",
        }
    }

    /// The variant of a tuning-parameter value.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Variant::Plain),
            1 => Some(Variant::ZQueue),
            2 => Some(Variant::Tiled),
            3 => Some(Variant::Vector),
            _ => None,
        }
    }

    /// Points each thread computes per plane, for elements of `elem_bytes` bytes: [`vector_lanes`] for
    /// [`Variant::Vector`], else 1.
    pub const fn points_per_thread(self, elem_bytes: usize) -> u32 {
        match self {
            Variant::Vector => vector_lanes(elem_bytes) as u32,
            _ => 1,
        }
    }

    /// The variant named `name` (as [`name`](Self::name) spells it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// The update of one point of a 2-D grid; as [`PointUpdate3D`].
pub trait PointUpdate2D: Copy + Send + Sync {
    /// The working precision.
    type Real: Real;
    /// The largest neighbour offset `update` reads along each axis (x, y).
    const RADIUS: [u32; 2] = [1, 1];
    /// Floating-point operations per point (0: not stated), as [`PointUpdate3D::FLOPS`].
    const FLOPS: u32 = 0;
    /// Bytes per point it must move at the least (0: not stated), as [`PointUpdate3D::BYTES`].
    const BYTES: u32 = 0;
    /// Computes the point `idx`.
    fn update(&self, idx: &ArrayIndex2D);
}

/// A point-update type that has a GPU kernel entry, made by [`kernel3d!`](crate::kernel3d),
/// [`kernel2d!`](crate::kernel2d) or [`block_kernel!`](crate::block_kernel) in some kernel crate's module.
pub trait GpuEntry {
    /// The module holding the entries: the library name of the kernel crate that made them (the macros
    /// take it from `CARGO_CRATE_NAME`), which is the name lattice-gpu-builder gives its PTX. Entry names
    /// resolve within it, so two modules may both have a `step_f32`.
    const MODULE: &'static str;
    /// The PTX `.entry` name of the kernel running this update (the plain variant).
    const ENTRY: &'static str;
    /// The entry of the z-queue variant, where one was generated.
    const ZQUEUE_ENTRY: Option<&'static str> = None;
    /// The entry of the tiled variant, where one was generated.
    const TILED_ENTRY: Option<&'static str> = None;
    /// The entry of the vector variant, where one was generated.
    const VECTOR_ENTRY: Option<&'static str> = None;
    /// The entry of the temporally blocked loop ([`device_loop3d_temporal`]), where one was generated:
    /// it takes `(update, pass, march, steps)`, `pass` a [`PassRange`].
    const TEMPORAL_ENTRY: Option<&'static str> = None;
    /// The entries of the column form of temporal blocking ([`device_loop3d_columns`]) for 1 to 4
    /// steps, where they were generated: they take `(update, pass, march)`, `pass` a [`PassRange`].
    const COLUMN_ENTRIES: [Option<&'static str>; 4] = [None; 4];
    /// The column entries' twins capped at [`COLUMN_MAXNREG`] registers, where they were generated
    /// (`kernel3d!` names them after the entries, with [`COLUMN_MAXNREG_SUFFIX`]).
    const COLUMN_TWINS: [Option<&'static str>; 4] = [None; 4];
    /// Whether the entries sum a [`SumUpdate3D`]'s terms (they then take a [`SumInto`] after the march).
    const SUMS: bool = false;

    /// The entry running `variant`, if this type has one.
    fn entry(variant: Variant) -> Option<&'static str> {
        match variant {
            Variant::Plain => Some(Self::ENTRY),
            Variant::ZQueue => Self::ZQUEUE_ENTRY,
            Variant::Tiled => Self::TILED_ENTRY,
            Variant::Vector => Self::VECTOR_ENTRY,
        }
    }
}

/// A precision's entries of the kernel type `K` (a point-update type at this precision): what the
/// precision-generic forms of the kernel macros (`kernel3d!(for<T> Type<T> { f32 => .., f64 => .. })`)
/// make, one impl per precision, beside the one `impl<T: EntryOf<Type<T>>> GpuEntry for Type<T>` that
/// reads them. A precision trait with `EntryOf<Type<Self>>` among its supertraits (as
/// [`DiffusionReal`](crate::diffusion::DiffusionReal)) then gives generic code `Type<T>: GpuEntry` from
/// its one bound `T: ThatTrait`: rustc carries a trait's supertraits to every use of the bound, but not
/// a where-clause on another type. The items mean what [`GpuEntry`]'s do.
pub trait EntryOf<K: ?Sized> {
    /// [`GpuEntry::MODULE`].
    const MODULE: &'static str;
    /// [`GpuEntry::ENTRY`].
    const ENTRY: &'static str;
    /// [`GpuEntry::ZQUEUE_ENTRY`].
    const ZQUEUE_ENTRY: Option<&'static str> = None;
    /// [`GpuEntry::TILED_ENTRY`].
    const TILED_ENTRY: Option<&'static str> = None;
    /// [`GpuEntry::VECTOR_ENTRY`].
    const VECTOR_ENTRY: Option<&'static str> = None;
    /// [`GpuEntry::TEMPORAL_ENTRY`].
    const TEMPORAL_ENTRY: Option<&'static str> = None;
    /// [`GpuEntry::COLUMN_ENTRIES`].
    const COLUMN_ENTRIES: [Option<&'static str>; 4] = [None; 4];
    /// [`GpuEntry::COLUMN_TWINS`].
    const COLUMN_TWINS: [Option<&'static str>; 4] = [None; 4];
    /// [`GpuEntry::SUMS`].
    const SUMS: bool = false;
}

/// Makes the GPU kernel that runs a [`PointUpdate3D`] type over a range: a 2-D grid of 2-D blocks in the xy
/// plane, each thread marching in z (the paper's Fig. 1). `kernel3d!(diffusion3d_f32 => Diffusion3d<f32>);`
/// The entry takes `(update: T, range: LoopRange, march: u32)`.
///
/// A [`StencilUpdate3D`] type can have one entry per [`Variant`], named after `;`:
/// `kernel3d!(diffusion3d_f32 => Diffusion3d<f32>; zqueue = diffusion3d_zqueue_f32, tiled = diffusion3d_tiled_f32, vector = diffusion3d_vector_f32);`
/// The other entries take the same parameters; the tiled one wants the dynamic shared memory of
/// [`tile_shared_bytes`] at launch, the vector one a grid of x threads divided by its lanes (the host
/// engines do both). A fourth name, `temporal = diffusion3d_temporal_f32`, adds the temporally
/// blocked entry ([`device_loop3d_temporal`]), which takes `(update, pass: PassRange, march, steps)`
/// and [`temporal_shared_bytes`] of dynamic shared memory. A fifth, `columns = [name_c1, name_c2, name_c3,
/// name_c4]` after it, adds the column form of 1 to 4 steps ([`device_loop3d_columns`]: the update reads
/// off its column only in its own plane), each taking `(update, pass, march)`, [`column_shared_bytes`]
/// and a grid of [`column_output_tile`]s. A [`LanesUpdate3D`] type has a vector entry besides the plain one:
/// `kernel3d!(poisson_redblack_colours_f32 => RedBlackByColour<f32>; lanes = poisson_redblack_colours_vector_f32);`
/// So does a [`FieldsUpdate3D`] type (its numbers of fields are those of its one impl):
/// `kernel3d!(gray_scott3d_f32 => GrayScott3d<f32>; fields, vector = gray_scott3d_vector_f32);`
///
/// A type generic over its precision takes the precision-generic form, which names the entries of each
/// precision (and, in braces, what follows `;` above):
/// `kernel3d!(for<T> Residual<T> { f32 => poisson_residual_f32, f64 => poisson_residual_f64 });`
/// `kernel3d!(for<T> Diffusion3d<T> { f32 => diffusion3d_f32 { zqueue = diffusion3d_zqueue_f32, tiled = diffusion3d_tiled_f32, vector = diffusion3d_vector_f32 }, f64 => ... });`
/// It makes the same entries, an [`EntryOf`] impl per precision and one generic [`GpuEntry`] impl, so
/// that a precision trait with `EntryOf<Type<Self>>` among its supertraits is all the bound generic
/// code needs ([`EntryOf`]).
#[macro_export]
macro_rules! kernel3d {
    (@kernels $name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: runs the point update over the range, marching in z.
            pub unsafe fn $name(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d(&update, &range, march)
            }
        }
    };
    (@kernels $name:ident => $ty:ty; lanes = $lanes:ident $(,)?) => {
        $crate::kernel3d!(@kernels $name => $ty);
        $crate::kernel! {
            /// Generated kernel entry: as the plain one, the points of a 16-byte vector per thread.
            pub unsafe fn $lanes(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d_lanes(&update, &range, march)
            }
        }
    };
    (@kernels $name:ident => $ty:ty; fields, vector = $vector:ident $(,)?) => {
        $crate::kernel3d!(@kernels $name => $ty);
        $crate::kernel! {
            /// Generated kernel entry: as the plain one, the points of a 16-byte vector per thread.
            pub unsafe fn $vector(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d_fields_vector(&update, &range, march)
            }
        }
    };
    (@kernels $name:ident => $ty:ty; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident, temporal = $temporal:ident, columns = [$c1:ident, $c2:ident, $c3:ident, $c4:ident] $(,)?) => {
        $crate::kernel3d!(@kernels $name => $ty; zqueue = $zqueue, tiled = $tiled, vector = $vector, temporal = $temporal);
        $crate::kernel3d!(@column $ty, $c1, 1);
        $crate::kernel3d!(@column $ty, $c2, 2);
        $crate::kernel3d!(@column $ty, $c3, 3);
        $crate::kernel3d!(@column $ty, $c4, 4);
    };
    (@column $ty:ty, $entry:ident, $steps:literal) => {
        $crate::kernel! {
            /// Generated kernel entry: steps of the update in one pass, temporally blocked in the
            /// column form (the count in the entry's name).
            pub unsafe fn $entry(update: $ty, pass: $crate::stencil::PassRange, march: u32) {
                $crate::stencil::device_loop3d_columns::<$ty, $steps>(&update, &pass, march)
            }
        }
        $crate::kernel! {
            export_name = $crate::kernel3d!(@twin $entry);
            /// Generated kernel entry: the same, in at most 32 registers, which leaves room for two
            /// blocks of 1024 threads on each SM ([`COLUMN_MAXNREG`](crate::stencil::COLUMN_MAXNREG)).
            pub unsafe fn $entry(update: $ty, pass: $crate::stencil::PassRange, march: u32) {
                $crate::stencil::device_loop3d_columns::<$ty, $steps>(&update, &pass, march)
            }
        }
    };
    // The name of a column entry's register-capped twin: the entry's and COLUMN_MAXNREG_SUFFIX.
    (@twin $entry:ident) => {
        concat!(stringify!($entry), "__maxnreg32")
    };
    (@kernels $name:ident => $ty:ty; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident, temporal = $temporal:ident $(,)?) => {
        $crate::kernel3d!(@kernels $name => $ty; zqueue = $zqueue, tiled = $tiled, vector = $vector);
        $crate::kernel! {
            /// Generated kernel entry: `steps` steps of the update in one pass, temporally blocked.
            pub unsafe fn $temporal(
                update: $ty,
                pass: $crate::stencil::PassRange,
                march: u32,
                steps: u32,
            ) {
                $crate::stencil::device_loop3d_temporal(&update, &pass, march, steps)
            }
        }
    };
    (@kernels $name:ident => $ty:ty; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident $(,)?) => {
        $crate::kernel3d!(@kernels $name => $ty);
        $crate::kernel! {
            /// Generated kernel entry: as the plain one, with the input column in a register z-queue.
            pub unsafe fn $zqueue(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d_zqueue(&update, &range, march)
            }
        }
        $crate::kernel! {
            /// Generated kernel entry: as the plain one, each plane's xy tile staged in shared memory.
            pub unsafe fn $tiled(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d_tiled(&update, &range, march)
            }
        }
        $crate::kernel! {
            /// Generated kernel entry: as the plain one, the points of a 16-byte vector per thread.
            pub unsafe fn $vector(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop3d_vector(&update, &range, march)
            }
        }
    };
    // The names, as the items of a `GpuEntry` or `EntryOf` impl.
    (@names $name:ident) => {
        const MODULE: &'static str = env!("CARGO_CRATE_NAME");
        const ENTRY: &'static str = stringify!($name);
    };
    (@names $name:ident; lanes = $lanes:ident $(,)?) => {
        $crate::kernel3d!(@names $name);
        const VECTOR_ENTRY: Option<&'static str> = Some(stringify!($lanes));
    };
    (@names $name:ident; fields, vector = $vector:ident $(,)?) => {
        $crate::kernel3d!(@names $name);
        const VECTOR_ENTRY: Option<&'static str> = Some(stringify!($vector));
    };
    (@names $name:ident; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident, temporal = $temporal:ident, columns = [$c1:ident, $c2:ident, $c3:ident, $c4:ident] $(,)?) => {
        $crate::kernel3d!(@names $name; zqueue = $zqueue, tiled = $tiled, vector = $vector, temporal = $temporal);
        const COLUMN_ENTRIES: [Option<&'static str>; 4] = [
            Some(stringify!($c1)),
            Some(stringify!($c2)),
            Some(stringify!($c3)),
            Some(stringify!($c4)),
        ];
        const COLUMN_TWINS: [Option<&'static str>; 4] = [
            Some($crate::kernel3d!(@twin $c1)),
            Some($crate::kernel3d!(@twin $c2)),
            Some($crate::kernel3d!(@twin $c3)),
            Some($crate::kernel3d!(@twin $c4)),
        ];
    };
    (@names $name:ident; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident, temporal = $temporal:ident $(,)?) => {
        $crate::kernel3d!(@names $name; zqueue = $zqueue, tiled = $tiled, vector = $vector);
        const TEMPORAL_ENTRY: Option<&'static str> = Some(stringify!($temporal));
    };
    (@names $name:ident; zqueue = $zqueue:ident, tiled = $tiled:ident, vector = $vector:ident $(,)?) => {
        $crate::kernel3d!(@names $name);
        const ZQUEUE_ENTRY: Option<&'static str> = Some(stringify!($zqueue));
        const TILED_ENTRY: Option<&'static str> = Some(stringify!($tiled));
        const VECTOR_ENTRY: Option<&'static str> = Some(stringify!($vector));
    };
    // The one `GpuEntry` impl of a precision-generic form: every name read from the precision.
    (@generic $p:ident, $ty:ty) => {
        impl<$p: $crate::stencil::EntryOf<$ty>> $crate::stencil::GpuEntry for $ty {
            const MODULE: &'static str = <$p as $crate::stencil::EntryOf<$ty>>::MODULE;
            const ENTRY: &'static str = <$p as $crate::stencil::EntryOf<$ty>>::ENTRY;
            const ZQUEUE_ENTRY: Option<&'static str> =
                <$p as $crate::stencil::EntryOf<$ty>>::ZQUEUE_ENTRY;
            const TILED_ENTRY: Option<&'static str> =
                <$p as $crate::stencil::EntryOf<$ty>>::TILED_ENTRY;
            const VECTOR_ENTRY: Option<&'static str> =
                <$p as $crate::stencil::EntryOf<$ty>>::VECTOR_ENTRY;
            const TEMPORAL_ENTRY: Option<&'static str> =
                <$p as $crate::stencil::EntryOf<$ty>>::TEMPORAL_ENTRY;
            const COLUMN_ENTRIES: [Option<&'static str>; 4] =
                <$p as $crate::stencil::EntryOf<$ty>>::COLUMN_ENTRIES;
            const COLUMN_TWINS: [Option<&'static str>; 4] =
                <$p as $crate::stencil::EntryOf<$ty>>::COLUMN_TWINS;
            const SUMS: bool = <$p as $crate::stencil::EntryOf<$ty>>::SUMS;
        }
    };
    // Each precision's entries and names in a block of its own, where the type's parameter is an
    // alias of that precision (a `macro_rules!` macro cannot substitute it in the type).
    (for<$p:ident> $ty:ty { $($real:ty => $name:ident $({ $($opt:tt)* })?),+ $(,)? }) => {
        $(
            const _: () = {
                type $p = $real;
                $crate::kernel3d!(@kernels $name => $ty $(; $($opt)*)?);
                impl $crate::stencil::EntryOf<$ty> for $real {
                    $crate::kernel3d!(@names $name $(; $($opt)*)?);
                }
            };
        )+
        $crate::kernel3d!(@generic $p, $ty);
    };
    ($name:ident => $ty:ty $(; $($opt:tt)*)?) => {
        $crate::kernel3d!(@kernels $name => $ty $(; $($opt)*)?);
        impl $crate::stencil::GpuEntry for $ty {
            $crate::kernel3d!(@names $name $(; $($opt)*)?);
        }
    };
}

/// Makes the GPU kernel that runs a [`SumUpdate3D`] type over a range and sums its terms: the plain loop
/// of [`kernel3d!`](crate::kernel3d), then the block's and grid's sums ([`device_sum3d`]).
/// `kernel3d_sum!(cg_step_f64 => CgStep);` The entry takes `(update: T, range: LoopRange, march: u32,
/// sum: SumInto)`. A type generic over its precision takes the precision-generic form of
/// [`kernel3d!`](crate::kernel3d): `kernel3d_sum!(for<T> ConvertDot<T> { f32 => convert_dot_f32, f64 => convert_dot_f64 });`
#[macro_export]
macro_rules! kernel3d_sum {
    (@kernels $name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: runs the point update over the range, marching in z, and sums
            /// its terms into `sum.out`.
            pub unsafe fn $name(
                update: $ty,
                range: $crate::stencil::LoopRange,
                march: u32,
                sum: $crate::stencil::SumInto,
            ) {
                $crate::stencil::device_sum3d(&update, &range, march, &sum)
            }
        }
    };
    (@names $name:ident) => {
        $crate::kernel3d!(@names $name);
        const SUMS: bool = true;
    };
    (for<$p:ident> $ty:ty { $($real:ty => $name:ident),+ $(,)? }) => {
        $(
            const _: () = {
                type $p = $real;
                $crate::kernel3d_sum!(@kernels $name => $ty);
                impl $crate::stencil::EntryOf<$ty> for $real {
                    $crate::kernel3d_sum!(@names $name);
                }
            };
        )+
        $crate::kernel3d!(@generic $p, $ty);
    };
    ($name:ident => $ty:ty) => {
        $crate::kernel3d_sum!(@kernels $name => $ty);
        impl $crate::stencil::GpuEntry for $ty {
            $crate::kernel3d_sum!(@names $name);
        }
    };
}

/// Makes the GPU kernel that runs a [`PointUpdate2D`] type over a range: 2-D blocks, each thread marching
/// over consecutive rows in y. As [`kernel3d!`](crate::kernel3d), with its precision-generic form:
/// `kernel2d!(for<T> GrayScott2d<T> { f32 => gray_scott2d_f32, f64 => gray_scott2d_f64 });`
#[macro_export]
macro_rules! kernel2d {
    (@kernels $name:ident => $ty:ty) => {
        $crate::kernel! {
            /// Generated kernel entry: runs the point update over the range, marching in y.
            pub unsafe fn $name(update: $ty, range: $crate::stencil::LoopRange, march: u32) {
                $crate::stencil::device_loop2d(&update, &range, march)
            }
        }
    };
    (for<$p:ident> $ty:ty { $($real:ty => $name:ident),+ $(,)? }) => {
        $(
            const _: () = {
                type $p = $real;
                $crate::kernel2d!(@kernels $name => $ty);
                impl $crate::stencil::EntryOf<$ty> for $real {
                    $crate::kernel3d!(@names $name);
                }
            };
        )+
        $crate::kernel3d!(@generic $p, $ty);
    };
    ($name:ident => $ty:ty) => {
        $crate::kernel2d!(@kernels $name => $ty);
        impl $crate::stencil::GpuEntry for $ty {
            $crate::kernel3d!(@names $name);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{GpuEntry, Variant};
    use crate::diffusion::{Diffusion3d, DiffusionReal};
    use crate::poisson::colours::{FromColoursDot, RedBlackByColour};
    use crate::poisson::{CoarseCycle, CoeffsAos, Convert, Jacobi, PoissonReal};
    use crate::vector::CgStep;

    /// The names a kernel type has for the engines: module, every variant's entry, and whether it sums.
    fn names<K: GpuEntry>() -> (&'static str, [Option<&'static str>; 4], bool) {
        (K::MODULE, Variant::ALL.map(K::entry), K::SUMS)
    }

    // Bounded by the precision traits alone: these compile only if the traits carry the entries.
    fn diffusion<T: DiffusionReal>() -> [Option<&'static str>; 4] {
        names::<Diffusion3d<T>>().1
    }

    fn poisson<T: PoissonReal>() -> [(&'static str, [Option<&'static str>; 4], bool); 5] {
        [
            names::<Jacobi<T>>(),
            names::<Convert<f64, T>>(),
            names::<RedBlackByColour<T>>(),
            names::<FromColoursDot<T>>(),
            names::<CoarseCycle<T, CoeffsAos<T>>>(),
        ]
    }

    #[test]
    fn precision_generic_forms_name_each_precisions_entries() {
        assert_eq!(
            diffusion::<f32>(),
            [
                Some("diffusion3d_f32"),
                Some("diffusion3d_zqueue_f32"),
                Some("diffusion3d_tiled_f32"),
                Some("diffusion3d_vector_f32")
            ]
        );
        assert_eq!(diffusion::<f64>()[3], Some("diffusion3d_vector_f64"));
        let plain = |e: &'static str| [Some(e), None, None, None];
        let module = crate::MODULE;
        assert_eq!(
            poisson::<f64>(),
            [
                (module, plain("poisson_jacobi_f64"), false),
                (module, plain("convert_f64_f64"), false),
                (
                    module,
                    [
                        Some("poisson_redblack_colours_f64"),
                        None,
                        None,
                        Some("poisson_redblack_colours_vector_f64")
                    ],
                    false
                ),
                (module, plain("poisson_from_colours_dot_f64"), true),
                (module, plain("poisson_coarse_cycle_aos_f64"), false),
            ]
        );
        assert_eq!(poisson::<f32>()[1].1[0], Some("convert_f64_f32"));
        // The single-type form, unchanged.
        assert_eq!(names::<CgStep>(), (module, plain("cg_step_f64"), true));
    }
}
