//! The vector variant of a point update of several fields ([`FieldsUpdate3D`]), run by the launch
//! emulator on the CPU for every tuning candidate, against the CPU engine bit for bit: rows of odd
//! length (every thread falls back to single columns), rows of whole vectors with ranges that start on a
//! vector (the vector path) or one point past it (the fallback), and ranges that stop short of the
//! interior, so that rows end in a partial vector and blocks straddle the range's edges.

use lattice_gpu::host::engine::emulate::{emulate3d_fields, EMULATED_MAX_THREADS};
use lattice_gpu::host::engine::{tune_candidates, KernelInfo, TuneSpace, Variant};
use lattice_gpu::host::{Element, Field, HostLoopEngine, LaunchShape, Loop3D, LoopEngine, Shape};
use lattice_gpu::kernels::stencil::{
    ArrayIndex3D, FieldMut, FieldRef, FieldsUpdate3D, GpuEntry, LoopRange, PointUpdate3D, Source3D,
    VECTOR_BYTES,
};

use common::{check_written, poison, random};
use lattice_gpu_testkit as common;

/// Two inputs, two outputs, radius (2, 1, 1): each output reads both inputs, at the point, along the
/// column, in the rows, two points left and right, and off the column in other planes (from memory).
/// Not a physical update, a test of the sources' reach and of which output gets which value.
#[repr(C)]
#[derive(Clone, Copy)]
struct TwoFields<T> {
    a: FieldRef<T>,
    b: FieldRef<T>,
    p: FieldMut<T>,
    q: FieldMut<T>,
}

impl<T: Element> PointUpdate3D for TwoFields<T> {
    type Real = T;
    const RADIUS: [u32; 3] = [2, 1, 1];
    fn update(&self, idx: &ArrayIndex3D) {
        self.update_with(idx, &self.inputs())
    }
}

impl<T: Element> FieldsUpdate3D<2, 2> for TwoFields<T> {
    fn inputs(&self) -> [FieldRef<T>; 2] {
        [self.a, self.b]
    }
    fn outputs(&self) -> [FieldMut<T>; 2] {
        [self.p, self.q]
    }
    fn values_with<S: Source3D<T>>(&self, idx: &ArrayIndex3D, src: &[S; 2]) -> [T; 2] {
        let [a, b] = src;
        let c = T::from_f64;
        let ab = a.at::<0, 0, 0>(idx) * b.at::<0, 0, 0>(idx);
        let p = c(0.5) * a.at::<0, 0, 0>(idx)
            + c(0.25) * a.at::<2, 0, 0>(idx)
            + c(0.125) * a.at::<-1, 0, 0>(idx)
            + c(0.75) * a.at::<0, 1, 0>(idx)
            + c(1.5) * a.at::<0, 0, -1>(idx)
            + c(0.875) * a.at::<1, 0, 1>(idx)
            + c(0.375) * b.at::<-2, 0, 0>(idx)
            + c(1.25) * b.at::<0, -1, 0>(idx)
            - c(0.3) * ab;
        let q = c(0.625) * b.at::<0, 0, 0>(idx)
            + c(0.0625) * b.at::<1, 0, 0>(idx)
            + c(1.125) * b.at::<0, 0, 1>(idx)
            + c(0.03125) * b.at::<-1, 1, 0>(idx)
            + c(0.7) * a.at::<0, 0, 1>(idx)
            + c(1.0625) * a.at::<0, -1, 0>(idx)
            + c(0.1) * ab;
        [p, q]
    }
}

impl<T> GpuEntry for TwoFields<T> {
    // Emulated only: no module holds these entries.
    const MODULE: &'static str = "tests";
    const ENTRY: &'static str = "two_fields";
    const VECTOR_ENTRY: Option<&'static str> = Some("two_fields_vector");
}

/// Runs the update over `range` on the host engine and, for every candidate of the default tuning space,
/// through the launch emulator; both outputs start as NaN. Returns the number of candidates per
/// variant, and whether the vector variant's threads could use vector accesses (rows of whole vectors,
/// the range's first point aligned in all four fields), not just fall back.
fn every_candidate_emulated<T: Element>(shape: Shape, range: LoopRange) -> ([usize; 4], bool) {
    let what = format!("two fields {} {range:?}", T::NAME);
    let len = shape.len();
    let [mut a, mut b, mut p, mut q] = [(); 4].map(|_| HostLoopEngine.alloc::<T>(shape).unwrap());
    let inputs = [random::<T>(len, 7), random::<T>(len, 11)];
    a.upload(&inputs[0]).unwrap();
    b.upload(&inputs[1]).unwrap();
    let [i, j, k] = range.begin.map(|b| b as usize);
    let first = i + shape.size()[0] * (j + shape.size()[1] * k);
    let row_vectors = (shape.size()[0] * std::mem::size_of::<T>()).is_multiple_of(VECTOR_BYTES);
    let fields = [
        a.view(),
        b.view(),
        p.view_mut().as_ref(),
        q.view_mut().as_ref(),
    ];
    let vectors = row_vectors && fields.iter().all(|f| f.vector_aligned(first));
    let mut run = |shape: Option<LaunchShape>| {
        p.upload(&poison::<T>(len)).unwrap();
        q.upload(&poison::<T>(len)).unwrap();
        let update = TwoFields {
            a: a.view(),
            b: b.view(),
            p: p.view_mut(),
            q: q.view_mut(),
        };
        match shape {
            None => Loop3D::new(&HostLoopEngine, range)
                .unwrap()
                .run(&update)
                .unwrap(),
            Some(c) => emulate3d_fields(&update, &range, c).unwrap(),
        }
        assert_eq!([a.download().unwrap(), b.download().unwrap()], inputs);
        [p.download().unwrap(), q.download().unwrap()]
    };
    let want = run(None);
    let candidates = tune_candidates(
        &TuneSpace::table1_all_variants(),
        &range,
        &KernelInfo::of3d::<TwoFields<T>>(),
        EMULATED_MAX_THREADS,
    );
    let mut counts = [0; 4];
    for c in candidates {
        counts[c.variant as usize] += 1;
        let got = run(Some(c));
        for (o, name) in ["p", "q"].iter().enumerate() {
            check_written(
                &got[o],
                &want[o],
                &shape,
                &range,
                &format!("{what} {c} {name}"),
            );
        }
    }
    (counts, vectors)
}

/// The cases of the module docs for elements `T`.
fn two_fields_emulated<T: Element>() {
    let compact = Shape::new_3d([21, 13, 11], 2).unwrap();
    let padded = compact.aligned_rows(std::mem::size_of::<T>(), f64::INFINITY);
    assert_ne!(compact, padded);
    let w = (VECTOR_BYTES / std::mem::size_of::<T>()) as u32;
    // (shape, first x relative to the interior's, x points left out at the end, vector path)
    for (shape, shift, short, vectors) in [
        (compact, 1, 0, false),
        (padded, 0, 0, true),
        (padded, w, 2, true),
        (padded, 1, 3, false),
    ] {
        let r = shape.interior_range();
        let range = LoopRange {
            begin: [r.begin[0] + shift, r.begin[1], r.begin[2] + 2],
            end: [r.end[0] - short, r.end[1] - 1, r.end[2] - 1],
            ..r
        };
        let (counts, vectorised) = every_candidate_emulated::<T>(shape, range);
        let (plain, vector) = (
            counts[Variant::Plain as usize],
            counts[Variant::Vector as usize],
        );
        assert!(
            plain >= 40 && vector >= 15 && plain + vector == counts.iter().sum::<usize>(),
            "candidates {counts:?}"
        );
        assert_eq!(vectorised, vectors, "{shape:?} {range:?}");
    }
}

#[test]
fn emulated_fields_vector_variant_matches_host_engine_f32() {
    two_fields_emulated::<f32>();
}

#[test]
fn emulated_fields_vector_variant_matches_host_engine_f64() {
    two_fields_emulated::<f64>();
}

#[test]
fn fields_emulator_refuses_what_it_cannot_run() {
    let shape = Shape::new_3d([9, 9, 9], 2).unwrap();
    let f = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut g = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut h = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let update = TwoFields {
        a: f.view(),
        b: f.view(),
        p: g.view_mut(),
        q: h.view_mut(),
    };
    let zqueue = LaunchShape {
        variant: Variant::ZQueue,
        ..LaunchShape::FIXED
    };
    let e = emulate3d_fields(&update, &shape.interior_range(), zqueue)
        .unwrap_err()
        .to_string();
    assert!(e.contains("zqueue"), "{e}");
    let no_margin = LoopRange {
        begin: [1, 2, 2],
        ..shape.interior_range()
    };
    let e = emulate3d_fields(&update, &no_margin, LaunchShape::FIXED)
        .unwrap_err()
        .to_string();
    assert!(e.contains("margin"), "{e}");
}
