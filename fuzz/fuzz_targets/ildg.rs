//! The ILDG/LIME gauge-file reader on arbitrary bytes: it may refuse them, never panic or
//! over-allocate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = lattice_gpu_fuzz_input(data);
    let _ = lattice_gpu_lqcd::ildg::list_lime_records(&path);
    let _ = lattice_gpu_lqcd::ildg::read_ildg(&path);
});

include!("input.rs");
