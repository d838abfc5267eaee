//! The embedded PTX: built by `cargo build`, has the expected kernel entries and no unresolved externals,
//! and assembles for sm_90 with no register spills (the one allowance: `stack_allowance`).
//!
//! ptxas comes from `$PTXAS`, or `ptxas` on the PATH. Without one the assembly check is skipped with a
//! message, unless `LATTICE_GPU_REQUIRE_PTXAS=1` (set by `.ci/run`), when it fails.

use std::io::Write;
use std::process::Command;

use lattice_gpu::host::module::FRAMEWORK_ARCH;
use lattice_gpu::host::Module;
use lattice_gpu_builder::ptxas;

const ENTRIES: &[&str] = &[
    "diffusion3d_f32",
    "diffusion3d_f64",
    "diffusion3d_zqueue_f32",
    "diffusion3d_zqueue_f64",
    "diffusion3d_tiled_f32",
    "diffusion3d_tiled_f64",
    "diffusion3d_vector_f32",
    "diffusion3d_vector_f64",
    "diffusion3d_temporal_f32",
    "diffusion3d_temporal_f64",
    "smooth2d_f32",
    "selftest_thread_index",
    "selftest_warp",
    "selftest_shared",
    "selftest_atomic",
    "selftest_math",
    "dslash_f32_r18",
    "dslash_f32_r12",
    "dslash_f64_r18",
    "dslash_f64_r12",
    "dslash_split_f32_r18",
    "dslash_split_f32_r12",
    "dslash_split_f64_r18",
    "dslash_split_f64_r12",
    "clover_f32_r18",
    "clover_f32_r12",
    "clover_f64_r18",
    "clover_f64_r12",
    "clover_split_f32_r18",
    "clover_split_f32_r12",
    "clover_split_f64_r18",
    "clover_split_f64_r12",
    "clover_site_f32",
    "clover_site_f64",
    "dslash_half_r18",
    "dslash_half_r12",
    "dslash_split_half_r18",
    "dslash_split_half_r12",
    "clover_half_r18",
    "clover_half_r12",
    "clover_split_half_r18",
    "clover_split_half_r12",
    "clover_site_half",
    "dslash_fixed_r18",
    "dslash_fixed_r12",
    "dslash_split_fixed_r18",
    "dslash_split_fixed_r12",
    "clover_fixed_r18",
    "clover_fixed_r12",
    "clover_split_fixed_r18",
    "clover_split_fixed_r12",
    "clover_site_fixed",
    "bicg_xr_fixed",
    "mixed_add_f64_fixed",
    "bicg_fused_f32_r18",
    "bicg_fused_f32_r12",
    "bicg_fused_f64_r18",
    "bicg_fused_f64_r12",
    "bicg_dot_f32",
    "bicg_dot_f64",
    "bicg_s_f32",
    "bicg_s_f64",
    "bicg_xr_f32",
    "bicg_xr_f64",
    "bicg_p_f32",
    "bicg_p_f64",
    "bicg_diffnorm_f32",
    "bicg_diffnorm_f64",
    "bicg_finish",
    "wait_kernel",
    "stop_kernel",
    "advect_plain",
    "advect_queue",
    "advect_queue_bf",
    "advect_queue_bf_packed",
    "advect_queue_bf_packed_shared",
    "cg_step_f64",
    "cg_direction_f64",
    "cg_finish_f64",
    "convert_f64_f32",
    "convert_f64_f64",
    "convert_dot_f32",
    "convert_dot_f64",
    "field_dot_f64",
    "field_dot_into_f64",
    "poisson_apply_aos_f64",
    "poisson_residual_aos_f32",
    "poisson_residual_aos_f64",
    "poisson_jacobi_aos_f32",
    "poisson_jacobi_aos_f64",
    "poisson_redblack_aos_f32",
    "poisson_redblack_aos_f64",
    "poisson_apply_f64",
    "poisson_residual_f32",
    "poisson_residual_f64",
    "poisson_jacobi_f32",
    "poisson_jacobi_f64",
    "poisson_redblack_f32",
    "poisson_redblack_f64",
    "poisson_restrict_f32",
    "poisson_restrict_f64",
    "poisson_restrict_pairs_f32",
    "poisson_restrict_pairs_f64",
    "poisson_prolong_f32",
    "poisson_prolong_f64",
    "fill_f32",
    "fill_f64",
    "poisson_coarse_cycle_f32",
    "poisson_coarse_cycle_f64",
    "poisson_coarse_cycle_aos_f32",
    "poisson_coarse_cycle_aos_f64",
    "poisson_redblack_colours_f32",
    "poisson_redblack_colours_f64",
    "poisson_redblack_colours_vector_f32",
    "poisson_redblack_colours_vector_f64",
    "poisson_residual_colours_f32",
    "poisson_residual_colours_f64",
    "poisson_prolong_colours_f32",
    "poisson_prolong_colours_f64",
    "poisson_prolong_colours_colours_f32",
    "poisson_prolong_colours_colours_f64",
    "poisson_restrict_colours_f32",
    "poisson_restrict_colours_f64",
    "poisson_convert_colours_f64_f32",
    "poisson_convert_colours_f64_f64",
    "poisson_from_colours_dot_f32",
    "poisson_from_colours_dot_f64",
    "lbm_ab_f32",
    "lbm_ab_f64",
    "lbm_ab_f16",
    "lbm_aa_even_f32",
    "lbm_aa_even_f64",
    "lbm_aa_even_f16",
    "lbm_aa_odd_f32",
    "lbm_aa_odd_f64",
    "lbm_aa_odd_f16",
];

/// Stack bytes an entry may use. The fused BiCGStab iteration, which holds the hopping term, the
/// vector updates and the solver's scalars in one kernel (run at small volumes, where it is the
/// launches it saves that count). The column form's register-capped twins (`__maxnreg32`), which the
/// host launches only where the driver's build of them has no local memory (`column_kernel`): those
/// of f64 and of four steps spill, and are never run. Everything else, every hopping kernel
/// included, stays in registers.
fn stack_allowance(entry: &str) -> u32 {
    match entry {
        e if e.starts_with("bicg_fused_") => 128,
        e if e.ends_with(lattice_gpu::kernels::stencil::COLUMN_MAXNREG_SUFFIX) => u32::MAX,
        _ => 0,
    }
}

#[test]
fn ptx_has_every_kernel_entry() {
    // The same list `Gpu::open` loads eagerly.
    let framework = Module::framework();
    let found: Vec<&str> = framework.entries().collect();
    for e in ENTRIES {
        assert!(
            found.contains(e),
            "entry {e} missing from the PTX; found {found:?}"
        );
    }
    assert_eq!(framework.target(), Some(FRAMEWORK_ARCH));
}

/// The column entries' twins are in the module under the names the kernel types give the host, each
/// with its register cap (the builder's `.maxnreg`).
#[test]
fn column_twins_are_in_the_ptx_with_their_register_cap() {
    use lattice_gpu::kernels::diffusion::Diffusion3d;
    use lattice_gpu::kernels::stencil::{GpuEntry, COLUMN_MAXNREG, COLUMN_MAXNREG_SUFFIX};
    let framework = Module::framework();
    let ptx = framework.ptx();
    for twin in [
        Diffusion3d::<f32>::COLUMN_TWINS,
        Diffusion3d::<f64>::COLUMN_TWINS,
    ]
    .into_iter()
    .flatten()
    {
        let twin = twin.expect("diffusion has a column twin for each of 1 to 4 steps");
        assert!(twin.ends_with(COLUMN_MAXNREG_SUFFIX), "{twin}");
        let at = ptx
            .find(&format!(".visible .entry {twin}("))
            .unwrap_or_else(|| panic!("entry {twin} missing from the PTX"));
        let head = &ptx[at..at + ptx[at..].find("\n{").expect("an entry has a body")];
        assert!(
            head.ends_with(&format!(")\n.maxnreg {COLUMN_MAXNREG}")),
            "entry {twin} has no .maxnreg {COLUMN_MAXNREG} before its body:\n{head}"
        );
    }
}

#[test]
fn ptx_has_no_unresolved_externals() {
    // The only extern allowed is the dynamic shared-memory segment, which the launch sizes.
    let framework = Module::framework();
    let externs: Vec<&str> = framework
        .ptx()
        .lines()
        .filter(|l| l.contains(".extern") && !l.contains(".extern .shared"))
        .collect();
    assert!(externs.is_empty(), "unresolved externals: {externs:?}");
}

#[test]
fn ptx_assembles_for_sm90_without_spills() {
    let ptxas = std::env::var("PTXAS").unwrap_or_else(|_| "ptxas".into());
    let dir = std::env::temp_dir().join(format!("lattice-gpu-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kernels.ptx");
    std::fs::write(&file, Module::framework().ptx()).unwrap();
    let out = Command::new(&ptxas)
        .args(["-arch=sm_90", "-v", "-o"])
        .arg(dir.join("kernels.cubin"))
        .arg(&file)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            if std::env::var("LATTICE_GPU_REQUIRE_PTXAS").is_ok_and(|v| v == "1") {
                panic!("ptxas ({ptxas}) could not run: {e}; install it with `pip install nvidia-cuda-nvcc==13.0.88` and set PTXAS");
            }
            // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED ptx_assembles_for_sm90_without_spills: ptxas ({ptxas}) not found ({e}); set PTXAS or `pip install nvidia-cuda-nvcc==13.0.88`"
            );
            return;
        }
    };
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ptxas rejected the PTX:\n{log}");
    let compiled = log.matches("Compiling entry function").count();
    assert!(
        compiled >= ENTRIES.len(),
        "ptxas compiled {compiled} entries:\n{log}"
    );
    // A stack frame in these kernels means registers spilled (or the z-queue went to local memory).
    let report = ptxas::parse(&log);
    assert!(report.len() >= ENTRIES.len(), "unparsed ptxas log:\n{log}");
    for e in &report {
        assert!(
            e.stack <= stack_allowance(&e.name),
            "{} has a {}-byte stack frame (spills):\n{log}",
            e.name,
            e.stack
        );
        println!(
            "ptxas sm_90: {}: {} registers, {}-byte stack",
            e.name, e.registers, e.stack
        );
    }
    println!("ptxas sm_90: {compiled} entries within their stack allowance");
}
