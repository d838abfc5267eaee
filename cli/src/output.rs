//! What a run leaves and shows: its output directory (all or nothing), checkpoint paths, progress bars
//! and the notice of unfinished tuning.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use lattice_gpu_formats::{IoError, OutputDir};

/// Stages the run's output directory ([`OutputDir`]): its files appear together when the run
/// succeeds, or not at all.
pub fn output_dir(dir: &Path) -> std::result::Result<OutputDir, IoError> {
    OutputDir::stage(dir)
}

/// Makes the output directory at once, with an error that names it. Transitional: applications move
/// to [`output_dir`], whose files appear all or nothing.
pub fn make_output_dir(dir: &Path) -> std::result::Result<std::path::PathBuf, IoError> {
    std::fs::create_dir_all(dir).map_err(|source| IoError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(dir.to_path_buf())
}

/// Moves a successful run's staged files into place and says where they are.
pub fn commit(out: OutputDir) -> std::result::Result<(), IoError> {
    let dir = out.target().to_path_buf();
    let files = out.commit()?;
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| Some(f.file_name()?.to_string_lossy().into_owned()))
        .collect();
    match names.len() {
        0 => {}
        n if n <= 6 => println!("wrote {} in {}", names.join(", "), dir.display()),
        n => println!("wrote {n} files in {}", dir.display()),
    }
    Ok(())
}

/// The checkpoint file `--resume PATH` names: `PATH/name` where PATH is a directory, else PATH.
pub fn checkpoint_file(path: &Path, name: &str) -> std::path::PathBuf {
    match path.is_dir() {
        true => path.join(name),
        false => path.to_path_buf(),
    }
}

/// The notice for a run that ended while the auto-tuner, `done` of its `needed` trial steps in, was
/// still timing launch shapes.
pub fn unfinished_tuning(done: usize, needed: usize) -> String {
    format!(
        "notice: the auto-tuner had timed {done} of its {needed} trial steps when the run ended, so the \
         rate above includes slow trial shapes and nothing went into the tune cache; run at least \
         {needed} steps once (later runs of this size take the cached shape), or fix a launch with \
         --engine device"
    )
}

/// A progress bar of `len` steps with a throughput field; hidden when stderr is not a terminal.
pub fn progress(len: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let template =
        format!("{{bar:40}} {{pos}}/{{len}} {unit} [{{elapsed_precise}} < {{eta}}] {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
