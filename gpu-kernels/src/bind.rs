//! Typed kernels: argument structs bound to the memory they address, so that launching one is safe.
//!
//! A kernel's one parameter is a `#[repr(C)]` struct of plain pointers and numbers (the layout the GPU
//! reads). Raw pointers say nothing of how much memory is behind them, so each such struct has a
//! checked constructor that takes [`Span`]s (a pointer with its length, borrowed for `'a`), checks
//! every length against what the kernel reads and writes, and returns a [`Bound`]: the struct, valid
//! while the spans are borrowed. The runtime (lattice-gpu-host) launches a `Bound` on the GPU or runs
//! it on the CPU without `unsafe` at the call site; the unsafety stays here and in the runtime, each
//! with its `SAFETY:` argument.
//!
//! Spans are made safely from slices (the CPU engine) and, by the runtime, from live device buffers.

use core::marker::PhantomData;

/// Where memory lies: a struct bound to host memory runs only on the CPU, one bound to device memory
/// only on the GPU (whose kernels may run after the host borrow ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Host memory (slices).
    Host,
    /// Device memory.
    Device,
}

impl Place {
    /// The one place of all `places`, or an error naming the mix (a kernel's memory lies in one place).
    pub fn common(places: &[Place]) -> Result<Place, SpanError> {
        let first = places.first().copied().unwrap_or(Place::Host);
        match places.iter().all(|&p| p == first) {
            true => Ok(first),
            false => Err(SpanError::Mixed),
        }
    }
}

/// Memory a kernel reads: a pointer and the number of elements behind it, borrowed for `'a`.
#[derive(Debug)]
pub struct Span<'a, T> {
    ptr: *const T,
    len: usize,
    place: Place,
    _borrow: PhantomData<&'a [T]>,
}

impl<T> Clone for Span<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Span<'_, T> {}

/// Memory a kernel writes: a pointer and the number of elements behind it, borrowed for `'a`.
#[derive(Debug)]
pub struct SpanMut<'a, T> {
    ptr: *mut T,
    len: usize,
    place: Place,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, T> Span<'a, T> {
    /// The elements of `slice`.
    pub fn of(slice: &'a [T]) -> Self {
        Self {
            ptr: slice.as_ptr(),
            len: slice.len(),
            place: Place::Host,
            _borrow: PhantomData,
        }
    }

    /// `len` elements of device memory at `ptr`.
    ///
    /// # Safety
    /// `ptr` must address `len` elements of device memory valid for reads by the kernels this span is
    /// bound into until the kernels queued while `'a` lasts have run.
    pub unsafe fn from_device_parts(ptr: *const T, len: usize) -> Self {
        Self {
            ptr,
            len,
            place: Place::Device,
            _borrow: PhantomData,
        }
    }

    /// Where the memory lies.
    pub fn place(&self) -> Place {
        self.place
    }

    /// The address.
    pub fn ptr(&self) -> *const T {
        self.ptr
    }

    /// Elements behind the address.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same memory read as `U` (a type of the same bits, e.g. a storage type and its raw bits).
    pub fn cast<U: Bits<T>>(self) -> Span<'a, U> {
        Span {
            ptr: self.ptr as *const U,
            len: self.len,
            place: self.place,
            _borrow: PhantomData,
        }
    }
}

impl<'a, T> SpanMut<'a, T> {
    /// The elements of `slice`.
    pub fn of(slice: &'a mut [T]) -> Self {
        Self {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            place: Place::Host,
            _borrow: PhantomData,
        }
    }

    /// `len` elements of device memory at `ptr`.
    ///
    /// # Safety
    /// `ptr` must address `len` elements of device memory valid for reads and writes by the kernels
    /// this span is bound into, and written by nothing else meanwhile (the host only through copies
    /// ordered with those kernels), until the kernels queued while `'a` lasts have run.
    pub unsafe fn from_device_parts(ptr: *mut T, len: usize) -> Self {
        Self {
            ptr,
            len,
            place: Place::Device,
            _borrow: PhantomData,
        }
    }

    /// Where the memory lies.
    pub fn place(&self) -> Place {
        self.place
    }

    /// The first `n` elements (all of them, if there are fewer).
    pub fn prefix(self, n: usize) -> Self {
        Self {
            len: self.len.min(n),
            ..self
        }
    }

    /// The address.
    pub fn ptr(&self) -> *mut T {
        self.ptr
    }

    /// Elements behind the address.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same memory as `U` (a type of the same bits).
    pub fn cast<U: Bits<T>>(self) -> SpanMut<'a, U> {
        SpanMut {
            ptr: self.ptr as *mut U,
            len: self.len,
            place: self.place,
            _borrow: PhantomData,
        }
    }
}

/// A type whose values have the bits of a `T` and the same size and alignment (a storage type and the
/// plain integer it is stored as), so memory of one may be read as the other.
///
/// # Safety
/// `Self` and `T` must have the same size and alignment, and every bit pattern of either must be a valid
/// value of the other.
pub unsafe trait Bits<T> {}

// SAFETY: the same type.
unsafe impl<T> Bits<T> for T {}

/// The elements of `s` as `U`, a type of the same bits.
pub fn bits<T, U: Bits<T>>(s: &[T]) -> &[U] {
    // SAFETY: `Bits`: the same size, alignment and valid bit patterns.
    unsafe { core::slice::from_raw_parts(s.as_ptr() as *const U, s.len()) }
}

/// The elements of `s` as `U`, a type of the same bits, for writing.
pub fn bits_mut<T, U: Bits<T>>(s: &mut [T]) -> &mut [U] {
    // SAFETY: `Bits`: the same size, alignment and valid bit patterns, both ways.
    unsafe { core::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut U, s.len()) }
}

/// Why memory cannot be bound into a kernel's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanError {
    /// A span holds fewer elements than the kernel addresses.
    Short {
        /// The kernel argument.
        argument: &'static str,
        /// Elements it must have at least.
        needs: usize,
        /// Elements it has.
        has: usize,
    },
    /// A span the kernel writes overlaps another it reads.
    Overlap {
        /// The argument written.
        written: &'static str,
        /// The argument it overlaps.
        other: &'static str,
    },
    /// Some spans are host memory and others device memory.
    Mixed,
    /// The lattice sizes cannot be laid out (what they must be).
    Dims(&'static str),
}

impl core::fmt::Display for SpanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Short {
                argument,
                needs,
                has,
            } => write!(
                f,
                "kernel argument `{argument}` holds {has} elements, but the kernel addresses {needs}: \
                 allocate it for this lattice"
            ),
            Self::Overlap { written, other } => write!(
                f,
                "kernel argument `{written}` overlaps `{other}`: give the kernel separate buffers"
            ),
            Self::Mixed => write!(
                f,
                "a kernel's arguments mix host and device memory: bind slices to run it on the CPU, \
                 device buffers to launch it on the GPU"
            ),
            Self::Dims(what) => write!(f, "a kernel's lattice sizes cannot be laid out: {what}"),
        }
    }
}

impl core::error::Error for SpanError {}

/// Checks that span `argument` of `has` elements holds at least `needs`.
pub fn check_len(argument: &'static str, has: usize, needs: usize) -> Result<(), SpanError> {
    match has >= needs {
        true => Ok(()),
        false => Err(SpanError::Short {
            argument,
            needs,
            has,
        }),
    }
}

/// A kernel's argument struct: it names its entry, and the work items its entry and the CPU engine run.
///
/// # Safety
/// `entry()` in module `MODULE` takes exactly one parameter, of type `Self`. Its threads (any grid) and
/// [`item`](Self::item) for `i < items()` touch only memory of the spans the value was bound to by its
/// checked constructor ([`Bound`]), and the items of one run write disjoint memory, so they may run
/// in parallel. A struct whose grid matters (a cooperative kernel) implements [`Cooperative`] too.
pub unsafe trait Kernel: Copy + Send + Sync {
    /// The module of the entry (the kernel crate's library name, as for [`crate::stencil::GpuEntry`]).
    const MODULE: &'static str;
    /// The PTX `.entry` name of the kernel running this value (a type may have several, chosen by a
    /// field, e.g. a streaming scheme).
    fn entry(&self) -> &'static str;
    /// Work items of one run.
    fn items(&self) -> usize;
    /// Runs work item `i` on the calling thread (the CPU engine; the GPU entry runs the same body).
    ///
    /// # Safety
    /// The value is bound ([`Bound`]), `i < items()`, and no other call for the same `i` runs at once.
    unsafe fn item(&self, i: usize);
}

/// A [`Kernel`] launched cooperatively, whose grid must be at most [`blocks`](Self::blocks) blocks of
/// [`BLOCK`](Self::BLOCK) threads (it holds per-block memory for that many).
///
/// # Safety
/// With a grid of at most `blocks()` blocks, all resident at once, the entry touches only memory of its
/// spans.
pub unsafe trait Cooperative: Kernel {
    /// Threads per block.
    const BLOCK: u32;
    /// The most blocks the bound memory serves.
    fn blocks(&self) -> u32;
}

/// A kernel argument struct checked against the spans it addresses, valid while they are borrowed. Not
/// `Copy`: the CPU engine runs one through `&mut`, so two runs writing the same memory never overlap.
#[derive(Debug)]
pub struct Bound<'a, K> {
    args: K,
    place: Place,
    _spans: PhantomData<&'a ()>,
}

impl<'a, K: Copy> Bound<'a, K> {
    /// `args`, checked by the caller, addressing memory at `place`.
    ///
    /// # Safety
    /// Every pointer in `args` must address memory of spans at `place` borrowed for `'a`, long enough
    /// for every access of the kernel's threads and items (the [`Kernel`] contract), and must have been
    /// checked so.
    pub unsafe fn new_unchecked(args: K, place: Place) -> Self {
        Self {
            args,
            place,
            _spans: PhantomData,
        }
    }

    /// Where its memory lies: where it may run.
    pub fn place(&self) -> Place {
        self.place
    }

    /// The argument struct (read-only: changing a pointer would undo the check).
    pub fn args(&self) -> &K {
        &self.args
    }

    /// The argument struct, for this crate's checked setters.
    pub(crate) fn args_mut(&mut self) -> &mut K {
        &mut self.args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lbm::{Lattices, Physics, Scheme, Step};
    use std::string::ToString;
    use std::vec;

    /// The populations of the velocity set the tests bind (D3Q19).
    const Q: usize = 19;

    const PHYSICS: Physics<f32> = Physics {
        omega: 1.0,
        omega_minus: 1.0,
        force: [0.0; 3],
        wall: [0.0; 3],
        inflow: [0.0; 3],
        profile: [[0.0; 2]; 3],
        outlet: 0.0,
        outlet_follow: 0.0,
    };

    /// A step of a 4x3x2 grid over `f`, `g` and `tags`.
    fn bind<'a>(
        f: &'a mut [f32],
        g: Option<&'a mut [f32]>,
        tags: &'a [u8],
        planes: [u32; 2],
    ) -> Result<Bound<'a, Step<f32, Q>>, SpanError> {
        let mem = Lattices {
            f: SpanMut::of(f),
            g: g.map(SpanMut::of),
            tags: Span::of(tags),
            moments: None,
            cuts: None,
        };
        Step::bind(Scheme::Ab, mem, [4, 3, 2], planes, PHYSICS)
    }

    #[test]
    fn binding_checks_every_extent_and_names_what_is_wrong() {
        let cells = 24;
        let (mut f, mut g, tags) = (vec![0.0; Q * cells], vec![0.0; Q * cells], vec![0u8; cells]);
        let ok = bind(&mut f, Some(&mut g), &tags, [0, 2]).unwrap();
        assert_eq!((ok.place(), ok.args().items()), (Place::Host, cells));
        let short = bind(&mut f[1..], Some(&mut g), &tags, [0, 2]).unwrap_err();
        let needs = Q * cells;
        assert_eq!(
            short,
            SpanError::Short {
                argument: "f",
                needs,
                has: needs - 1,
            }
        );
        assert!(short.to_string().contains("allocate it"), "{short}");
        let no_g = bind(&mut f, None, &tags, [0, 2]).unwrap_err();
        assert!(matches!(no_g, SpanError::Short { argument: "g", .. }));
        let planes = bind(&mut f, Some(&mut g), &tags, [1, 2]).unwrap_err();
        assert!(matches!(
            planes,
            SpanError::Short {
                argument: "planes",
                needs: 3,
                has: 2
            }
        ));
        // Two views of one buffer, as spans of one device buffer may be, and the tags beside them.
        let (p, t) = (f.as_mut_ptr(), tags.as_ptr());
        // SAFETY: the binding only compares these addresses, and refuses them.
        let (a, b, on_device) = unsafe {
            (
                SpanMut::from_device_parts(p, Q * cells),
                SpanMut::from_device_parts(p, Q * cells),
                Span::from_device_parts(t, cells),
            )
        };
        let mem = Lattices {
            f: a,
            g: Some(b),
            tags: on_device,
            moments: None,
            cuts: None,
        };
        let err = Step::<_, Q>::bind(Scheme::Ab, mem, [4, 3, 2], [0, 2], PHYSICS).unwrap_err();
        assert_eq!(
            err,
            SpanError::Overlap {
                written: "g",
                other: "f"
            }
        );
        // Device lattices with host tags.
        let mixed = Lattices {
            // SAFETY: as above.
            f: unsafe { SpanMut::from_device_parts(p, Q * cells) },
            g: None,
            tags: Span::of(&tags),
            moments: None,
            cuts: None,
        };
        let err =
            Step::<_, Q>::bind(Scheme::AaEven, mixed, [4, 3, 2], [0, 2], PHYSICS).unwrap_err();
        assert_eq!(err, SpanError::Mixed);
        assert!(err.to_string().contains("host and device"), "{err}");
        // Interpolated links: a row index per cell.
        let (rows, distances) = (vec![u32::MAX; cells - 1], vec![0.5f32; Q]);
        let mut g = vec![0.0; Q * cells];
        let mem = Lattices {
            f: SpanMut::of(&mut f),
            g: Some(SpanMut::of(&mut g)),
            tags: Span::of(&tags),
            moments: None,
            cuts: Some(crate::lbm::Cuts {
                rows: Span::of(&rows),
                distances: Span::of(&distances),
            }),
        };
        let err = Step::<_, Q>::bind(Scheme::Ab, mem, [4, 3, 2], [0, 2], PHYSICS).unwrap_err();
        assert!(
            matches!(
                err,
                SpanError::Short {
                    argument: "cut rows",
                    ..
                }
            ),
            "{err}"
        );
    }
}
