//! The `.npy` reader on arbitrary bytes: it may refuse them, never panic or over-allocate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = lattice_gpu_fuzz_input(data);
    let _ = lattice_gpu_formats::npy::read_npy::<f64>(&path);
    let _ = lattice_gpu_formats::npy::read_npy_shaped::<f32>(&path, &[4, 6, 10]);
});

include!("input.rs");
