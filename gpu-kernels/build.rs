//! Tells the crates that compile this one to PTX where its sources are (`DEP_LATTICE_GPU_KERNELS_ROOT`,
//! through `links`): lattice-gpu-host's build script builds the framework's module from them, also
//! where this crate comes from a registry.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        println!("cargo:root={}", dir.to_string_lossy());
    }
}
