/// The parsers read files, so each input goes to a file of this process's own (on tmpfs where
/// /dev/shm exists, so that the disk is not the limit).
fn lattice_gpu_fuzz_input(data: &[u8]) -> std::path::PathBuf {
    let dir = std::path::Path::new("/dev/shm");
    let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
    let path = dir.join(format!("lattice-gpu-fuzz-{}", std::process::id()));
    std::fs::write(&path, data).expect("the fuzz input file");
    path
}
