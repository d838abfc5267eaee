//! Files in and out of a simulation: `.npy` arrays ([`npy`]), STL surfaces of bodies ([`stl`]), PNG
//! pictures of 2-D slices ([`png`]) and charts of time series ([`chart`]), legacy VTK for ParaView
//! ([`vtk`]), CSV tables ([`csv`]), checkpoints ([`checkpoint`]), atomic writes ([`write_atomically`])
//! and the run's all-or-nothing output directory ([`OutputDir`]).
//!
//! This crate knows nothing of GPUs or the runtime (`lattice-gpu-host` depends on it, not the other
//! way), so a tool that only reads or writes these files builds without CUDA bindings.
//!
//! All are standard formats, so fields go straight into NumPy, ParaView or an image viewer and
//! initial conditions come straight out of them, with no converter to write or trust.
//!
//! Runs are long and jobs get killed, so every file is written through [`write_atomically`]: a
//! reader (or the next job) sees either the old file or the complete new one, never a
//! half-written one. Input comes from people and other programs, so every read checks what it
//! gets and reports a problem as an [`IoError`] that names the file, the problem and the fix.

use std::fs::{self, File};
use std::io::{self, BufWriter, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod chart;
pub mod checkpoint;
pub mod csv;
pub mod npy;
pub mod output;
pub mod png;
pub mod stl;
pub mod temporary;
pub mod vtk;

pub use output::OutputDir;

/// Errors of reading and writing files; each names the file and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The file could not be written; nothing was left at its path.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The directory for a run's output files could not be made.
    #[error("cannot create the output directory {}: {source}; choose a directory you can write to", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The file is not a `.npy` file this crate can read, or the array cannot be saved as one.
    #[error("{}: not a valid .npy file: {problem}", path.display())]
    Npy {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The array in the file does not have the shape the simulation needs.
    #[error(
        "{}: the array has shape {} but the grid needs shape {}; the input must match the grid size: \
         regenerate or resample the input, or set the grid size to the input's shape",
        path.display(),
        shape_repr(found),
        shape_repr(expected)
    )]
    Shape {
        /// The file.
        path: PathBuf,
        /// The shape the grid needs.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// The picture cannot be made from the data given.
    #[error("{}: cannot write PNG: {problem}", path.display())]
    Png {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The file is not a checkpoint this build can resume from, or not one of this run.
    #[error("{}: {problem}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The file is not an STL surface this crate can read (truncated, malformed, empty, or with
    /// coordinates that are not finite), or the mesh cannot be saved as one.
    #[error("{}: not a valid STL file: {problem}", path.display())]
    Stl {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The VTK file cannot be made from the fields given; nothing was written.
    #[error("{}: cannot write VTK: {problem}", path.display())]
    Vtk {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        problem: String,
    },
}

/// A shape as Python writes a tuple, `(4, 3, 2)`, `(5,)` or `()`, since that is how users see
/// shapes in NumPy and how `.npy` headers spell them.
pub fn shape_repr(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// Writes `path` so that it never exists half-written: `write` fills a temporary file
/// `.{file_name}.{pid}.{n}.{ns}.tmp` in the same directory, which is flushed to disk and then renamed
/// over `path`. A symbolic link is followed, and the file it leads to written; a path that exists and
/// is not a regular file (a device, a socket, a directory) is refused and left alone.
///
/// On any error the temporary file is removed, `path` is left as it was, and the error is
/// [`IoError::Write`]. The directory must exist already; creating it is the caller's decision.
///
/// Written here rather than taken from tempfile (`NamedTempFile::persist`), which renames too but
/// replaces a symbolic link instead of writing through it, refuses no device or directory in the
/// way, leaves the rename unsynced, and cannot register its temporary for removal on a second
/// signal; the rest is a few lines.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> Result<(), IoError> {
    let fail = |source| IoError::Write {
        path: path.to_path_buf(),
        source,
    };
    // A link is written through, onto the file it leads to; renaming over the link would replace it.
    let path = &follow_links(path).map_err(fail)?;
    // Renaming over a device (/dev/null), a socket or a directory would replace it with a file.
    if let Some(m) = fs::metadata(path).ok().filter(|m| !m.is_file()) {
        return Err(fail(io::Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} exists and is {}, not a regular file; name a regular file, or a path that does \
                 not exist yet",
                path.display(),
                kind_of(&m)
            ),
        )));
    }
    let file_name = path.file_name().ok_or_else(|| {
        fail(io::Error::new(
            ErrorKind::InvalidInput,
            "the path names no file; give a file name such as out.npy",
        ))
    })?;
    // The temporary file must be in the same directory: rename is atomic only within one
    // file system.
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let problem = if dir.exists() {
            format!("{} is not a directory", dir.display())
        } else {
            format!(
                "directory {} does not exist; create it first (mkdir -p, or std::fs::create_dir_all)",
                dir.display()
            )
        };
        return Err(fail(io::Error::new(ErrorKind::NotFound, problem)));
    }
    // Unique per writer: threads of one process (one per GPU) and ranks on other hosts sharing the
    // directory (same pid, different clock) may write the same file at once, such as the tune cache.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let temp = dir.join(format!(
        ".{}.{}.{}.{nanos}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    // A second SIGINT removes it before the process exits ([`temporary`]).
    let _registered = temporary::Temporary::file(&temp);
    if let Err(source) = write_file(&temp, write).and_then(|()| fs::rename(&temp, path)) {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&temp);
        return Err(fail(source));
    }
    sync_dir(dir);
    Ok(())
}

/// What a path that is not a regular file is, for messages: "a directory", "a pipe", "a device", "a
/// socket".
pub fn kind_of(meta: &fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a pipe";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else if meta.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Where the symbolic links at `path` lead, a link to a link too; `path` itself where it is no link
/// (or does not exist). Relative links are relative to their own directory.
fn follow_links(path: &Path) -> io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    // Linux's own limit on links followed in one lookup.
    for _ in 0..40 {
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) => dir.join(to),
                    None => to,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(io::Error::new(
        ErrorKind::InvalidInput,
        "too many levels of symbolic links",
    ))
}

/// Writes and syncs the temporary file, so that the rename cannot publish data still in the
/// page cache, which a crash would lose.
fn write_file(
    temp: &Path,
    write: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> io::Result<()> {
    // Large writes (a gauge configuration, a 3-D field) go out in few system calls.
    let mut out = BufWriter::with_capacity(1 << 20, File::create_new(temp)?);
    write(&mut out)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}

/// Makes the rename itself durable. Best effort: the file is complete either way, and some file
/// systems refuse to sync directories.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Scratch directories for the file tests of this module and its children.
#[cfg(test)]
pub(crate) mod test_support {
    use std::fs;
    use std::path::{Path, PathBuf};

    /// A fresh, empty directory for the test `name`.
    pub(crate) fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lattice-io-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Decodes a PNG that must be 8-bit RGB: width, height and RGB bytes.
    pub(crate) fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    /// The sorted file names in `dir`.
    pub(crate) fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::FileTypeExt;

    use super::test_support::{entries, scratch_dir};

    #[test]
    fn shape_repr_is_python_tuple() {
        assert_eq!(shape_repr(&[]), "()");
        assert_eq!(shape_repr(&[5]), "(5,)");
        assert_eq!(shape_repr(&[4, 3, 2]), "(4, 3, 2)");
    }

    #[test]
    fn failed_write_keeps_old_file_and_leaves_no_temp() {
        let dir = scratch_dir("atomic");
        let path = dir.join("a.txt");
        write_atomically(&path, |w| w.write_all(b"old")).unwrap();
        let err = write_atomically(&path, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(matches!(err, IoError::Write { .. }), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(&dir), ["a.txt"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A symbolic link is written through: the link stays, its target gets the new contents, and the
    /// temporary file lives beside the target (in the target's file system), not beside the link.
    #[cfg(unix)]
    #[test]
    fn a_symlink_is_written_through() {
        let dir = scratch_dir("symlink");
        fs::create_dir(dir.join("data")).unwrap();
        let target = dir.join("data/field.npy");
        fs::write(&target, b"old").unwrap();
        let link = dir.join("field.npy");
        std::os::unix::fs::symlink("data/field.npy", &link).unwrap();
        write_atomically(&link, |w| w.write_all(b"new")).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // A link to a file not yet there is written through too, and to a link to a link.
        std::os::unix::fs::symlink("data/later.npy", dir.join("later.npy")).unwrap();
        std::os::unix::fs::symlink("later.npy", dir.join("twice.npy")).unwrap();
        write_atomically(&dir.join("twice.npy"), |w| w.write_all(b"late")).unwrap();
        assert_eq!(fs::read(dir.join("data/later.npy")).unwrap(), b"late");
        assert!(fs::symlink_metadata(dir.join("twice.npy"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            entries(&dir),
            ["data", "field.npy", "later.npy", "twice.npy"]
        );
        assert_eq!(entries(&dir.join("data")), ["field.npy", "later.npy"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A path that exists and is no regular file (a device such as /dev/null, a socket, a directory)
    /// is refused by name, and left as it was: renaming over it would replace it.
    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_a_regular_file_is_refused_and_kept() {
        let dir = scratch_dir("special");
        let socket = dir.join("out.npy");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let err = write_atomically(&socket, |w| w.write_all(b"x")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("out.npy") && msg.contains("not a regular file"),
            "{msg}"
        );
        assert!(fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket());
        fs::create_dir(dir.join("sub.npy")).unwrap();
        let msg = write_atomically(&dir.join("sub.npy"), |w| w.write_all(b"x"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("sub.npy") && msg.contains("not a regular file"),
            "{msg}"
        );
        // A link to such a path is refused the same way.
        std::os::unix::fs::symlink(&socket, dir.join("link.npy")).unwrap();
        let msg = write_atomically(&dir.join("link.npy"), |w| w.write_all(b"x"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("not a regular file"), "{msg}");
        assert_eq!(entries(&dir), ["link.npy", "out.npy", "sub.npy"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_directory_is_named() {
        let dir = scratch_dir("missing");
        let path = dir.join("no/such/dir/a.txt");
        let err = write_atomically(&path, |w| w.write_all(b"x")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, IoError::Write { .. }), "{msg}");
        assert!(
            msg.contains("no/such/dir") && msg.contains("does not exist"),
            "{msg}"
        );
        assert!(entries(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
