//! The STL reader on arbitrary bytes: it may refuse them, never panic or over-allocate; what it
//! accepts is a mesh whose edges can be counted.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = lattice_gpu_fuzz_input(data);
    if let Ok(mesh) = lattice_gpu_formats::stl::read_stl(&path) {
        let _ = mesh.open_edges();
        let _ = mesh.bounds();
    }
});

include!("input.rs");
