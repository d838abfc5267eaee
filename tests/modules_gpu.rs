//! Several PTX modules on one GPU: entries resolve within their module (a second module's
//! `diffusion3d_f32` is its own kernel, the framework's still the framework's), and the errors of module
//! handling name the problem and the fix: a module that is not loaded, an entry a module lacks, PTX newer
//! than the driver, a second module of a loaded name.
//!
//! The second module is hand-written PTX, so that it needs no kernel crate: its `diffusion3d_f32` takes the
//! generated entries' parameters and writes 42 to element 0 of its output, which the framework's
//! diffusion (writing the interior only) never touches.

use lattice_gpu::host::{
    DeviceLoopEngine, Field, HostLoopEngine, LaunchShape, Loop3D, LoopEngine, Module, Shape,
};
use lattice_gpu::kernels::diffusion::Diffusion3d;
use lattice_gpu::kernels::stencil::{ArrayIndex3D, FieldMut, GpuEntry, PointUpdate3D};

use common::{gpu, poison};
use lattice_gpu_testkit as common;

const HANDMADE: &str = "\
.version 7.0
.target sm_70
.address_size 64

.visible .entry diffusion3d_f32(
\t.param .align 8 .b8 update[8],
\t.param .align 4 .b8 range[36],
\t.param .u32 march
)
{
\t.reg .b64 %rd<3>;
\t.reg .f32 %f<2>;
\tld.param.u64 %rd1, [update];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.f32 %f1, 0f42280000;
\tst.global.f32 [%rd2], %f1;
\tret;
}
";

/// Writes 42 to element 0 of `out` (the hand-made module's kernel; the same on the CPU).
#[repr(C)]
#[derive(Clone, Copy)]
struct Mark {
    out: FieldMut<f32>,
}

impl PointUpdate3D for Mark {
    type Real = f32;
    fn update(&self, _: &ArrayIndex3D) {
        self.out.set(0, 42.0);
    }
}

impl GpuEntry for Mark {
    const MODULE: &'static str = "handmade";
    const ENTRY: &'static str = "diffusion3d_f32";
}

/// A kernel type whose module is never loaded, or whose entry its module lacks.
#[repr(C)]
#[derive(Clone, Copy)]
struct Lost<const MISSING_MODULE: bool> {
    out: FieldMut<f32>,
}

impl<const M: bool> PointUpdate3D for Lost<M> {
    type Real = f32;
    fn update(&self, _: &ArrayIndex3D) {}
}

impl GpuEntry for Lost<true> {
    const MODULE: &'static str = "never_loaded";
    const ENTRY: &'static str = "step_f32";
}

impl GpuEntry for Lost<false> {
    const MODULE: &'static str = lattice_gpu::kernels::MODULE;
    const ENTRY: &'static str = "no_such_entry";
}

#[test]
fn two_modules_may_hold_the_same_entry_name() {
    let Some(gpu) = gpu("two_modules_may_hold_the_same_entry_name") else {
        return;
    };
    gpu.load(&Module::new("handmade", HANDMADE)).unwrap();
    // Loading it again is a no-op.
    gpu.load(&Module::new("handmade", HANDMADE)).unwrap();
    let engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let shape = Shape::new_3d([8, 6, 5], 1).unwrap();
    let (mut f, mut g) = (
        engine.alloc::<f32>(shape).unwrap(),
        engine.alloc::<f32>(shape).unwrap(),
    );
    f.upload(&vec![1.0; shape.len()]).unwrap();
    g.upload(&poison::<f32>(shape.len())).unwrap();
    Loop3D::new(&engine, shape.interior_range())
        .unwrap()
        .run(&Mark { out: g.view_mut() })
        .unwrap();
    let marked = g.download().unwrap();
    assert_eq!(marked[0], 42.0);
    assert!(
        marked[1].is_nan(),
        "the hand-made kernel writes element 0 only"
    );

    // The framework's diffusion3d_f32 is still the framework's: it computes what the CPU engine does,
    // to the bit, and leaves element 0, in the margin, with the mark.
    let mut want = HostLoopEngine.alloc::<f32>(shape).unwrap();
    let mut h_ones = HostLoopEngine.alloc::<f32>(shape).unwrap();
    h_ones.upload(&vec![1.0; shape.len()]).unwrap();
    want.upload(&marked).unwrap();
    Loop3D::new(&HostLoopEngine, shape.interior_range())
        .unwrap()
        .run(&Diffusion3d::new(
            h_ones.view(),
            want.view_mut(),
            0.5,
            0.01,
            [0.5; 3],
        ))
        .unwrap();
    Loop3D::new(&engine, shape.interior_range())
        .unwrap()
        .run(&Diffusion3d::new(
            f.view(),
            g.view_mut(),
            0.5,
            0.01,
            [0.5; 3],
        ))
        .unwrap();
    let got = g.download().unwrap();
    let want = want.download().unwrap();
    assert_eq!(got[0], 42.0);
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "element {i}: GPU {a}, CPU {b}"
        );
    }
}

#[test]
fn module_errors_name_the_problem_and_the_fix() {
    let Some(gpu) = gpu("module_errors_name_the_problem_and_the_fix") else {
        return;
    };
    let engine = DeviceLoopEngine::new(gpu.clone(), LaunchShape::FIXED);
    let shape = Shape::new_3d([8, 6, 5], 1).unwrap();
    let mut g = engine.alloc::<f32>(shape).unwrap();
    let mut lp = Loop3D::new(&engine, shape.interior_range()).unwrap();

    let e = lp
        .run(&Lost::<true> { out: g.view_mut() })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("module `never_loaded` is not loaded")
            && e.contains("lattice_gpu_kernels")
            && e.contains("ptx_module!(\"never_loaded\")"),
        "{e}"
    );

    let e = lp
        .run(&Lost::<false> { out: g.view_mut() })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kernel `no_such_entry` is not in module `lattice_gpu_kernels`")
            && e.contains("diffusion3d_f32, ")
            && e.contains("kernel3d!(no_such_entry => YourType)"),
        "{e}"
    );

    let future = Module::new("future", ".version 99.9\n.target sm_70\n.address_size 64\n");
    let e = gpu.load(&future).unwrap_err().to_string();
    assert!(
        e.contains("module `future` is PTX ISA 99.9")
            && e.contains("installed driver (for CUDA ")
            && e.contains("update the NVIDIA driver"),
        "{e}"
    );

    let e = gpu
        .load(&Module::new(lattice_gpu::kernels::MODULE, HANDMADE))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a different module named `lattice_gpu_kernels` is already loaded"),
        "{e}"
    );
}
