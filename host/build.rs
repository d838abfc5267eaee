//! Compiles the framework's kernels (the crate lattice-gpu-kernels, wherever cargo found it) to PTX with
//! lattice-gpu-builder, the same builder users' build scripts call; [`FRAMEWORK`](crate::module) embeds it.

fn main() -> Result<(), lattice_gpu_builder::Error> {
    let kernels = std::env::var("DEP_LATTICE_GPU_KERNELS_ROOT").expect(
        "lattice-gpu-kernels' build script sets its root (links = \"lattice_gpu_kernels\")",
    );
    let module = lattice_gpu_builder::Builder::new(kernels).build()?;
    println!("cargo:rustc-env=LATTICE_GPU_PTX_ARCH={}", module.arch);
    Ok(())
}
