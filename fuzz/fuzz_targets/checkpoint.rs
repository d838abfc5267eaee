//! The checkpoint reader on arbitrary bytes: it may refuse them, never panic or over-allocate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = lattice_gpu_fuzz_input(data);
    if let Ok(mut ck) = lattice_gpu_formats::checkpoint::Checkpoint::read(&path) {
        let _ = ck.take::<f32>("field", &path);
    }
});

include!("input.rs");
