//! The tune-cache reader on arbitrary bytes: it may ignore them with warnings, never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = lattice_gpu_fuzz_input(data);
    let mut cache = lattice_gpu_host::engine::tunecache::TuneCache::load(path);
    let _ = cache.take_warnings();
});

include!("input.rs");
