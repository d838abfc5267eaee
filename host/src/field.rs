//! Fields with margins: an array of `interior + 2 * margin` points per axis, x fastest, in host or
//! device memory. The loops update the interior; the margins hold boundary values (zeros for
//! Dirichlet walls) or halos.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use lattice_gpu_kernels::device::math::Real;
use lattice_gpu_kernels::stencil::{FieldMut, FieldRef, LoopRange};

use rayon::prelude::*;

use crate::error::{CudaContext, Error, Result};
use crate::gpu::Gpu;

/// Element types of fields: f32 and f64.
pub trait Element:
    Real + DeviceRepr + ValidAsZeroBits + crate::wire::Wire + lattice_gpu_formats::checkpoint::Stored
{
}
impl Element for f32 {}
impl Element for f64 {}

/// The size of a field: interior points and margin width per axis, and where the interior sits in the
/// array. A 2-D field has `interior[2] = 1` and `margin[2] = 0`.
///
/// By default the array is the interior plus the margins. [`Shape::aligned_rows`] pads rows in x so that
/// every row's first interior point starts a 128-byte line: a warp's 32 loads of a row then touch 4
/// sectors instead of 5, which matters because stencils on large grids are bound by L2 throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    interior: [usize; 3],
    margin: [usize; 3],
    first: [usize; 3],
    size: [usize; 3],
}

impl Shape {
    /// A 3-D field of `interior` points with `margin` points on each side of each axis.
    pub fn new_3d(interior: [usize; 3], margin: usize) -> Result<Self> {
        Self::new(interior, [margin, margin, margin])
    }

    /// A 3-D field of `interior` points with `margin[a]` points on each side of axis `a` (a split
    /// run's halo layers deeper along its cut axis).
    pub fn new_3d_margins(interior: [usize; 3], margin: [usize; 3]) -> Result<Self> {
        Self::new(interior, margin)
    }

    /// A 2-D field of `interior` points with `margin` points on each side.
    pub fn new_2d(interior: [usize; 2], margin: usize) -> Result<Self> {
        Self::new([interior[0], interior[1], 1], [margin, margin, 0])
    }

    fn new(interior: [usize; 3], margin: [usize; 3]) -> Result<Self> {
        if interior.contains(&0) {
            return Err(Error::InvalidSize(format!(
                "grid {} has an axis of zero points; every axis needs at least one",
                fmt_dims(&interior)
            )));
        }
        let s = Self {
            interior,
            margin,
            first: margin,
            size: [0, 1, 2].map(|a| interior[a] + 2 * margin[a]),
        };
        s.check_indexable()?;
        Ok(s)
    }

    fn check_indexable(&self) -> Result<()> {
        // The kernels index with u32 per axis and usize overall.
        if self.size.iter().any(|&v| v > u32::MAX as usize / 2)
            || self
                .size
                .iter()
                .try_fold(1usize, |a, &v| a.checked_mul(v))
                .is_none()
        {
            return Err(Error::InvalidSize(format!(
                "grid {} is too large to index",
                fmt_dims(&self.interior)
            )));
        }
        Ok(())
    }

    /// This shape with rows padded in x so that each row's interior starts on a 128-byte boundary for
    /// elements of `elem_bytes` bytes; unchanged when that would make the array more than `max_growth`
    /// times larger (narrow grids would move more sectors, not fewer).
    pub fn aligned_rows(self, elem_bytes: usize, max_growth: f64) -> Self {
        let per_line = (128 / elem_bytes.max(1)).max(1);
        let first = self.margin[0].next_multiple_of(per_line);
        let nx = (first + self.interior[0] + self.margin[0]).next_multiple_of(per_line);
        let padded = Self {
            first: [first, self.first[1], self.first[2]],
            size: [nx, self.size[1], self.size[2]],
            ..self
        };
        if nx as f64 > max_growth * self.size[0] as f64 || padded.check_indexable().is_err() {
            return self;
        }
        padded
    }

    /// Interior points per axis.
    pub fn interior(&self) -> [usize; 3] {
        self.interior
    }

    /// Margin width per axis (the halo a point update may read).
    pub fn margin(&self) -> [usize; 3] {
        self.margin
    }

    /// Array index of the first interior point per axis (margin plus any alignment padding).
    pub fn first(&self) -> [usize; 3] {
        self.first
    }

    /// Array size per axis, margins and padding included.
    pub fn size(&self) -> [usize; 3] {
        self.size
    }

    /// Number of array elements, margins and padding included.
    pub fn len(&self) -> usize {
        self.size.iter().product()
    }

    /// Always false: a shape has at least one point.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Linear index of array point (i, j, k) (array coordinates: margins and padding included).
    pub fn index(&self, i: usize, j: usize, k: usize) -> usize {
        i + self.size[0] * (j + self.size[1] * k)
    }

    /// The loop range covering the interior.
    pub fn interior_range(&self) -> LoopRange {
        LoopRange {
            n: self.size.map(|v| v as u32),
            begin: self.first.map(|v| v as u32),
            end: [0, 1, 2].map(|a| (self.first[a] + self.interior[a]) as u32),
        }
    }

    /// Bytes of one field of `T` with this shape.
    pub fn bytes<T>(&self) -> u64 {
        self.len() as u64 * std::mem::size_of::<T>() as u64
    }

    /// The whole array for interior values `interior` (x fastest, `nx * ny * nz` of them), with `fill` in
    /// the margins and padding.
    pub fn embed<T: Copy + Send + Sync>(&self, interior: &[T], fill: T) -> Result<Vec<T>> {
        self.embed_map(interior, fill, |v| v)
    }

    /// As [`embed`](Self::embed), each interior value passed through `map` on the way (a conversion
    /// without an intermediate copy of the field). Array planes are filled in parallel: a set-up of
    /// hundreds of millions of values is otherwise a long single-threaded pause.
    pub fn embed_map<S: Copy + Sync, T: Copy + Send + Sync>(
        &self,
        interior: &[S],
        fill: T,
        map: impl Fn(S) -> T + Sync,
    ) -> Result<Vec<T>> {
        let [nx, ny, nz] = self.interior;
        if interior.len() != nx * ny * nz {
            return Err(Error::InvalidSize(format!(
                "{} interior values do not fill a {} grid",
                interior.len(),
                fmt_dims(&self.interior)
            )));
        }
        let mut v = vec![fill; self.len()];
        let plane = self.size[0] * self.size[1];
        v.par_chunks_mut(plane).enumerate().for_each(|(kk, p)| {
            let Some(k) = kk.checked_sub(self.first[2]).filter(|&k| k < nz) else {
                return;
            };
            for j in 0..ny {
                let dst = self.first[0] + self.size[0] * (self.first[1] + j);
                let src = nx * (j + ny * k);
                for (d, &s) in p[dst..dst + nx].iter_mut().zip(&interior[src..src + nx]) {
                    *d = map(s);
                }
            }
        });
        Ok(v)
    }

    /// The interior values (x fastest) of a whole array of this shape.
    pub fn extract<T: Copy>(&self, whole: &[T]) -> Vec<T> {
        let [nx, ny, nz] = self.interior;
        let mut v = Vec::with_capacity(nx * ny * nz);
        for k in 0..nz {
            for j in 0..ny {
                let src = self.index(self.first[0], self.first[1] + j, self.first[2] + k);
                v.extend_from_slice(&whole[src..src + nx]);
            }
        }
        v
    }
}

/// `a x b x c`, or `a x b` for 2-D sizes.
pub fn fmt_dims(d: &[usize]) -> String {
    let d = if d.len() == 3 && d[2] == 1 {
        &d[..2]
    } else {
        d
    };
    d.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// A field an engine can run point updates on.
pub trait Field<T: Element> {
    /// Its shape.
    fn shape(&self) -> Shape;
    /// A read-only pointer for a point update.
    fn view(&self) -> FieldRef<T>;
    /// A writable pointer for a point update.
    fn view_mut(&mut self) -> FieldMut<T>;
    /// Overwrites the whole array (margins included) with `data`, which must have `shape().len()` values.
    fn upload(&mut self, data: &[T]) -> Result<()>;
    /// The whole array (margins included), after all queued work on it has finished.
    fn download(&self) -> Result<Vec<T>>;
    /// `len` values from array index `start` on (whole planes of a decomposed run's faces), after all
    /// queued work on the field has finished.
    fn download_span(&self, start: usize, len: usize) -> Result<Vec<T>>;
    /// Overwrites `data.len()` values from array index `start` on, queued after the work before it.
    fn upload_span(&mut self, start: usize, data: &[T]) -> Result<()>;
    /// The array's address in GPU memory, for libraries that move device memory themselves (NCCL);
    /// `None` for a field in host memory.
    fn device_addr(&self) -> Option<u64> {
        None
    }
}

fn check_span(shape: &Shape, start: usize, len: usize) -> Result<()> {
    if start.checked_add(len).is_none_or(|end| end > shape.len()) {
        return Err(Error::InvalidSize(format!(
            "values {start}..{} are outside a field of {} = {} values",
            start.saturating_add(len),
            fmt_dims(&shape.size()),
            shape.len()
        )));
    }
    Ok(())
}

fn check_len(shape: &Shape, got: usize) -> Result<()> {
    if got != shape.len() {
        return Err(Error::InvalidSize(format!(
            "data of {got} values does not fill a field of {} = {} values",
            fmt_dims(&shape.size()),
            shape.len()
        )));
    }
    Ok(())
}

/// A field in host memory, for the CPU engine.
#[derive(Clone, Debug)]
pub struct HostField<T> {
    shape: Shape,
    data: Vec<T>,
}

impl<T: Element> HostField<T> {
    /// A zero-filled field.
    pub fn zeros(shape: Shape) -> Self {
        Self {
            shape,
            data: vec![T::ZERO; shape.len()],
        }
    }

    /// The values, margins included.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }
}

impl<T: Element> Field<T> for HostField<T> {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn view(&self) -> FieldRef<T> {
        // SAFETY: the pointer is valid while the field lives; the loops only touch shape-checked indices.
        unsafe { FieldRef::from_raw(self.data.as_ptr()) }
    }
    fn view_mut(&mut self) -> FieldMut<T> {
        // SAFETY: as above.
        unsafe { FieldMut::from_raw(self.data.as_mut_ptr()) }
    }
    fn upload(&mut self, data: &[T]) -> Result<()> {
        check_len(&self.shape, data.len())?;
        self.data.copy_from_slice(data);
        Ok(())
    }
    fn download(&self) -> Result<Vec<T>> {
        Ok(self.data.clone())
    }
    fn download_span(&self, start: usize, len: usize) -> Result<Vec<T>> {
        check_span(&self.shape, start, len)?;
        Ok(self.data[start..start + len].to_vec())
    }
    fn upload_span(&mut self, start: usize, data: &[T]) -> Result<()> {
        check_span(&self.shape, start, data.len())?;
        self.data[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// A field in GPU memory.
pub struct DeviceField<T> {
    shape: Shape,
    buf: CudaSlice<T>,
    gpu: Arc<Gpu>,
}

impl<T> Drop for DeviceField<T> {
    fn drop(&mut self) {
        self.gpu
            .hold((self.buf.len() * std::mem::size_of::<T>()) as u64, false);
    }
}

impl<T: Element> DeviceField<T> {
    /// The index of its first NaN or infinite value (margins included), `None` where all are finite:
    /// counted on the GPU, copied to the host only when there is one to find.
    pub fn first_non_finite(&self) -> Result<Option<usize>> {
        let n = self.shape.len();
        match crate::buffer::device_count_non_finite(&self.gpu, self.view().as_ptr(), n)? {
            0 => Ok(None),
            _ => Ok(crate::health::first_non_finite(&self.download()?)),
        }
    }

    /// A zero-filled field on `gpu`, after checking it fits in free memory.
    pub fn zeros(gpu: &Arc<Gpu>, shape: Shape) -> Result<Self> {
        gpu.check_fits(
            shape.bytes::<T>(),
            &format!("a {} {} field", fmt_dims(&shape.size()), T::NAME),
        )?;
        let buf = gpu
            .stream()
            .alloc_zeros(shape.len())
            .cuda(|| format!("allocating a {} field", fmt_dims(&shape.size())))?;
        gpu.hold((buf.len() * std::mem::size_of::<T>()) as u64, true);
        Ok(Self {
            shape,
            buf,
            gpu: gpu.clone(),
        })
    }

    fn address(&self) -> u64 {
        // Event tracking is off (see `Gpu::open`), so the guard records nothing.
        let (p, _guard) = self.buf.device_ptr(self.gpu.stream());
        p
    }
}

impl<T: Element> Field<T> for DeviceField<T> {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn device_addr(&self) -> Option<u64> {
        Some(self.address())
    }
    fn view(&self) -> FieldRef<T> {
        // SAFETY: a device address valid while the field lives; only device kernels dereference it.
        unsafe { FieldRef::from_raw(self.address() as *const T) }
    }
    fn view_mut(&mut self) -> FieldMut<T> {
        // SAFETY: as above.
        unsafe { FieldMut::from_raw(self.address() as *mut T) }
    }
    fn upload(&mut self, data: &[T]) -> Result<()> {
        check_len(&self.shape, data.len())?;
        self.gpu
            .stream()
            .memcpy_htod(data, &mut self.buf)
            .cuda(|| "copying a field to the GPU".into())
    }
    fn download(&self) -> Result<Vec<T>> {
        self.gpu
            .stream()
            .clone_dtoh(&self.buf)
            .cuda(|| "copying a field from the GPU (a kernel may have failed)".into())
    }
    fn download_span(&self, start: usize, len: usize) -> Result<Vec<T>> {
        check_span(&self.shape, start, len)?;
        self.gpu
            .stream()
            .clone_dtoh(&self.buf.slice(start..start + len))
            .cuda(|| "copying part of a field from the GPU (a kernel may have failed)".into())
    }
    fn upload_span(&mut self, start: usize, data: &[T]) -> Result<()> {
        check_span(&self.shape, start, data.len())?;
        self.gpu
            .stream()
            .memcpy_htod(data, &mut self.buf.slice_mut(start..start + data.len()))
            .cuda(|| "copying part of a field to the GPU".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_copy_part_of_a_host_field_and_refuse_to_run_past_it() {
        let shape = Shape::new_3d([2, 2, 2], 1).unwrap();
        let mut f = HostField::<f32>::zeros(shape);
        f.upload_span(16, &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(f.download_span(15, 5).unwrap(), [0.0, 1.0, 2.0, 3.0, 0.0]);
        assert_eq!(f.download().unwrap().iter().sum::<f32>(), 6.0);
        let len = shape.len();
        let e = f.download_span(len - 1, 2).unwrap_err().to_string();
        assert!(e.contains("outside a field"), "{e}");
        assert!(f.upload_span(usize::MAX, &[1.0]).is_err());
    }

    #[test]
    fn shape_sizes_and_interior_range() {
        let s = Shape::new_3d([4, 3, 2], 1).unwrap();
        assert_eq!(s.size(), [6, 5, 4]);
        assert_eq!(s.len(), 120);
        assert_eq!(s.index(1, 2, 3), 1 + 6 * (2 + 5 * 3));
        let r = s.interior_range();
        assert_eq!((r.n, r.begin, r.end), ([6, 5, 4], [1, 1, 1], [5, 4, 3]));
        assert_eq!(r.points(), 24);
        let s2 = Shape::new_2d([7, 5], 2).unwrap();
        assert_eq!(s2.size(), [11, 9, 1]);
        assert_eq!(s2.interior_range().end, [9, 7, 1]);
        assert_eq!(s.bytes::<f64>(), 960);
    }

    #[test]
    fn aligned_rows_start_on_128_bytes_and_round_trip() {
        let s = Shape::new_3d([512, 3, 2], 1).unwrap().aligned_rows(4, 1.25);
        assert_eq!((s.first(), s.size()), ([32, 1, 1], [576, 5, 4]));
        let r = s.interior_range();
        assert_eq!((r.begin, r.end), ([32, 1, 1], [544, 4, 3]));
        for j in 0..5 {
            assert_eq!(s.index(32, j, 1) * 4 % 128, 0);
        }
        let f64s = Shape::new_3d([512, 3, 2], 1).unwrap().aligned_rows(8, 1.25);
        assert_eq!((f64s.first()[0], f64s.size()[0]), (16, 544));
        // Narrow grids stay compact: padding would cost more than it saves.
        let narrow = Shape::new_3d([8, 512, 512], 1).unwrap();
        assert_eq!(narrow.aligned_rows(4, 1.25), narrow);
        let interior: Vec<u32> = (0..512 * 3 * 2).collect();
        let whole = s.embed(&interior, u32::MAX).unwrap();
        assert_eq!(whole.len(), s.len());
        assert_eq!(whole[s.index(33, 2, 1)], 1 + 512);
        assert_eq!(whole[s.index(31, 2, 1)], u32::MAX);
        assert_eq!(s.extract(&whole), interior);
        assert!(s.embed(&interior[1..], 0).is_err());
    }

    #[test]
    fn bad_shapes_are_errors() {
        let e = Shape::new_3d([4, 0, 2], 1).unwrap_err().to_string();
        assert!(e.contains("4x0x2") && e.contains("zero"), "{e}");
        let e = Shape::new_3d([1 << 31, 1, 1], 1).unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        let e = Shape::new_3d([1 << 22, 1 << 22, 1 << 22], 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn host_field_upload_checks_length() {
        let s = Shape::new_3d([2, 2, 2], 1).unwrap();
        let mut f = HostField::<f32>::zeros(s);
        assert!(f.upload(&[1.0; 63]).is_err());
        f.upload(&vec![2.5; 64]).unwrap();
        assert_eq!(f.download().unwrap(), vec![2.5; 64]);
    }
}
