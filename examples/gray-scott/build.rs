//! Compiles the kernel crate in `kernels/` to PTX, which `ptx_module!("gray_scott_kernels")` embeds.

fn main() -> Result<(), lattice_gpu_builder::Error> {
    lattice_gpu_builder::Builder::new("kernels").build()?;
    Ok(())
}
