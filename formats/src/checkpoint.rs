//! Checkpoints: a run's whole state at a step, written so that a killed run loses only the steps since
//! the last one, and read back so that the resumed run gives the same bytes as a run never stopped.
//!
//! A checkpoint is one file: a text header, then the arrays' raw little-endian bytes.
//!
//! ```text
//! lattice-gpu checkpoint 1
//! application diffusion
//! step 1200
//! param kappa 0.1
//! param size 64x64x64
//! array field f32 262144 3f2a91c0
//! end
//! <the arrays' bytes, in the order of their lines>
//! ```
//!
//! Every `param` is a value that decides the physics or the layout (the grid, the precision, the
//! parameters), written so that it reads back exactly (floats in Rust's shortest round-trip form): a
//! resume compares them all and refuses a difference by name ([`Checkpoint::check_resume`]). Each
//! array carries its CRC-32, and the file's length must be exactly the header's plus the arrays', which
//! is checked before anything large is allocated: a truncated, corrupt or foreign file is refused with
//! a message, never half-read.
//!
//! The format is this project's own: a text header a person can read with `head` and raw arrays need
//! no library on either side (HDF5 would need its C library to build and run), and the header says
//! everything a resume must check.
//!
//! The file is written through [`write_atomically`](crate::write_atomically), so the previous
//! checkpoint stays whole until the new one is complete; [`Saver`] writes it from a host copy on
//! another thread while the run goes on.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::IoError;

/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

const MAGIC: &str = "lattice-gpu checkpoint";

/// The most header bytes a reader takes: far more than any run's parameters, and a bound on what a
/// foreign file makes it read.
const MAX_HEADER: u64 = 1 << 16;

/// Element types a checkpoint stores, with the name its header gives them: plain numbers
/// ([`bytemuck::Pod`]: no padding, every bit pattern a value), so an array is its bytes.
pub trait Stored: bytemuck::Pod + Default {
    /// The type's name in the header.
    const DTYPE: &'static str;
}

impl Stored for f32 {
    const DTYPE: &'static str = "f32";
}
impl Stored for f64 {
    const DTYPE: &'static str = "f64";
}
impl Stored for u8 {
    const DTYPE: &'static str = "u8";
}
impl Stored for u16 {
    const DTYPE: &'static str = "u16";
}
impl Stored for u32 {
    const DTYPE: &'static str = "u32";
}
impl Stored for u64 {
    const DTYPE: &'static str = "u64";
}

/// The bytes of `size` per element of each type name.
fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "u8" => 1,
        "u16" => 2,
        "f32" | "u32" => 4,
        "f64" | "u64" => 8,
        _ => return None,
    })
}

/// One named array of a checkpoint, as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Array {
    /// Its name, e.g. "field".
    pub name: String,
    /// Its element type ([`Stored::DTYPE`]).
    pub dtype: String,
    /// Its elements' little-endian bytes.
    pub bytes: Vec<u8>,
}

/// A run's state at a step: which application, the step, the parameters a resume must match, and the
/// arrays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The application that wrote it ("diffusion").
    pub application: String,
    /// The steps done.
    pub step: u64,
    /// (name, value) of everything a resumed run must have the same.
    pub params: Vec<(String, String)>,
    /// The state.
    pub arrays: Vec<Array>,
}

#[cfg(target_endian = "big")]
compile_error!(
    "checkpoints are stored little-endian, as the arrays are in memory on little-endian hosts"
);

/// A name or value the line format can hold: no whitespace, not empty.
fn token(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(char::is_whitespace)
}

impl Checkpoint {
    /// An empty checkpoint of `application` at `step`.
    pub fn new(application: &str, step: u64) -> Self {
        Self {
            application: application.to_string(),
            step,
            ..Self::default()
        }
    }

    /// Adds the parameter `name` = `value` (its `Display`; floats round-trip exactly).
    pub fn param(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.params.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds a copy of `data` as the array `name`.
    pub fn array<T: Stored>(mut self, name: &str, data: &[T]) -> Self {
        self.arrays.push(Array {
            name: name.to_string(),
            dtype: T::DTYPE.to_string(),
            // Little-endian hosts only: every host this crate runs on.
            bytes: bytemuck::cast_slice(data).to_vec(),
        });
        self
    }

    /// The array `name` as elements of `T`, taken out of the checkpoint; an error naming the file
    /// (`path`, for the message) where it is missing or of another type.
    pub fn take<T: Stored>(&mut self, name: &str, path: &Path) -> Result<Vec<T>, IoError> {
        let at = self.arrays.iter().position(|a| a.name == name);
        let Some(a) = at.map(|i| self.arrays.remove(i)) else {
            return Err(bad(path, format!("it holds no array `{name}`")));
        };
        if a.dtype != T::DTYPE {
            return Err(bad(
                path,
                format!(
                    "its array `{name}` is {}, and this run needs {}; resume with the precision it was \
                     written in",
                    a.dtype,
                    T::DTYPE
                ),
            ));
        }
        let mut out = vec![T::default(); a.bytes.len() / std::mem::size_of::<T>()];
        // The bytes may not be aligned for `T`, so they are copied rather than cast in place.
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&a.bytes);
        Ok(out)
    }

    /// The header's text.
    fn header(&self) -> io::Result<String> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let mut h = format!(
            "{MAGIC} {VERSION}\napplication {}\nstep {}\n",
            self.application, self.step
        );
        if !token(&self.application) {
            return Err(invalid(format!("application name `{}`", self.application)));
        }
        for (k, v) in &self.params {
            if !token(k) || !token(v) {
                return Err(invalid(format!("parameter `{k}` = `{v}` holds whitespace")));
            }
            h += &format!("param {k} {v}\n");
        }
        for a in &self.arrays {
            if !token(&a.name) {
                return Err(invalid(format!("array name `{}`", a.name)));
            }
            let size = dtype_size(&a.dtype).ok_or_else(|| invalid(a.dtype.clone()))?;
            h += &format!(
                "array {} {} {} {:08x}\n",
                a.name,
                a.dtype,
                a.bytes.len() as u64 / size,
                crc32fast::hash(&a.bytes)
            );
        }
        Ok(h + "end\n")
    }

    /// Writes it to `path` atomically: the file there stays as it was until this one is complete.
    pub fn write(&self, path: &Path) -> Result<u64, IoError> {
        let header = self.header().map_err(|source| IoError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        crate::write_atomically(path, |w| {
            w.write_all(header.as_bytes())?;
            for a in &self.arrays {
                w.write_all(&a.bytes)?;
            }
            Ok(())
        })?;
        Ok(header.len() as u64
            + self
                .arrays
                .iter()
                .map(|a| a.bytes.len() as u64)
                .sum::<u64>())
    }

    /// Reads the checkpoint at `path`, checking its format, its length and every array's checksum
    /// before it is returned.
    pub fn read(path: &Path) -> Result<Self, IoError> {
        let read_error = |source| IoError::Read {
            path: path.to_path_buf(),
            source,
        };
        // Before opening: opening a pipe waits for a writer.
        if let Some(m) = std::fs::metadata(path).ok().filter(|m| !m.is_file()) {
            return Err(bad(
                path,
                format!("it is {}, not a checkpoint file", crate::kind_of(&m)),
            ));
        }
        let file = File::open(path).map_err(read_error)?;
        let meta = file.metadata().map_err(read_error)?;
        if !meta.is_file() {
            return Err(bad(
                path,
                format!("it is {}, not a checkpoint file", crate::kind_of(&meta)),
            ));
        }
        let mut r = BufReader::new(file).take(MAX_HEADER);
        let mut lines = Vec::new();
        let mut header_len = 0u64;
        loop {
            let mut line = String::new();
            let n = r.read_line(&mut line).map_err(|e| match e.kind() {
                io::ErrorKind::InvalidData => bad(path, foreign()),
                _ => read_error(e),
            })?;
            if n == 0 {
                return Err(bad(
                    path,
                    match lines.is_empty() {
                        true => foreign(),
                        false => "its header has no end: the file is truncated or not a checkpoint"
                            .into(),
                    },
                ));
            }
            header_len += n as u64;
            // A foreign file is named as such at once, not read on as a header.
            if lines.is_empty() && !line.starts_with(MAGIC) {
                return Err(bad(path, foreign()));
            }
            let line = line.trim_end_matches('\n').to_string();
            if line == "end" {
                break;
            }
            lines.push(line);
        }
        let mut ck = Checkpoint::default();
        let mut expect = Vec::new();
        let mut words = lines.iter().map(|l| l.split(' ').collect::<Vec<_>>());
        match words.next().as_deref() {
            Some(["lattice-gpu", "checkpoint", v]) if *v == VERSION.to_string() => {}
            Some(["lattice-gpu", "checkpoint", v]) => {
                return Err(bad(
                    path,
                    format!(
                        "it is a checkpoint of format version {v}, and this build reads version \
                         {VERSION}; resume it with the lattice-gpu that wrote it"
                    ),
                ))
            }
            _ => return Err(bad(path, foreign())),
        }
        for w in words {
            match w.as_slice() {
                ["application", a] => ck.application = a.to_string(),
                ["step", s] => {
                    ck.step = s
                        .parse()
                        .map_err(|_| bad(path, format!("its step `{s}` is not a number")))?
                }
                ["param", k, v] => ck.params.push((k.to_string(), v.to_string())),
                ["array", name, dtype, n, crc] => {
                    let size = dtype_size(dtype).ok_or_else(|| {
                        bad(path, format!("its array `{name}` has type `{dtype}`"))
                    })?;
                    let bytes = n
                        .parse::<u64>()
                        .ok()
                        .and_then(|n| n.checked_mul(size))
                        .ok_or_else(|| bad(path, format!("its array `{name}` has length `{n}`")))?;
                    let crc = u32::from_str_radix(crc, 16).map_err(|_| {
                        bad(path, format!("its array `{name}` has checksum `{crc}`"))
                    })?;
                    expect.push((name.to_string(), dtype.to_string(), bytes, crc));
                }
                _ => {
                    return Err(bad(
                        path,
                        format!("its header line `{}` is not of a checkpoint", w.join(" ")),
                    ))
                }
            }
        }
        let data: u64 = expect
            .iter()
            .try_fold(0u64, |acc, e| acc.checked_add(e.2))
            .ok_or_else(|| bad(path, "its arrays' lengths overflow".into()))?;
        let held = meta.len().saturating_sub(header_len);
        if held != data {
            return Err(bad(
                path,
                format!(
                    "its arrays need {data} bytes after the header and the file holds {held}: {}",
                    if held < data {
                        "it is truncated"
                    } else {
                        "it has trailing bytes"
                    }
                ),
            ));
        }
        let mut r = r.into_inner();
        for (name, dtype, len, crc) in expect {
            let mut bytes = vec![0u8; len as usize];
            r.read_exact(&mut bytes).map_err(read_error)?;
            if crc32fast::hash(&bytes) != crc {
                return Err(bad(
                    path,
                    format!("its array `{name}` fails its checksum: the file is corrupt"),
                ));
            }
            ck.arrays.push(Array { name, dtype, bytes });
        }
        Ok(ck)
    }

    /// Refuses, naming every difference, to resume a run of `application` with parameters `params`
    /// from this checkpoint (read from `path`): another application, a parameter of another value, or
    /// one missing.
    pub fn check_resume(
        &self,
        application: &str,
        params: &[(String, String)],
        path: &Path,
    ) -> Result<(), IoError> {
        if self.application != application {
            return Err(bad(
                path,
                format!(
                    "it is a checkpoint of `{}`, not of `{application}`",
                    self.application
                ),
            ));
        }
        let mut differ = Vec::new();
        for (k, v) in params {
            match self.params.iter().find(|(n, _)| n == k) {
                Some((_, was)) if was == v => {}
                Some((_, was)) => differ.push(format!("{k} is {v} here and {was} there")),
                None => differ.push(format!("{k} is {v} here and missing there")),
            }
        }
        if differ.is_empty() {
            return Ok(());
        }
        Err(bad(
            path,
            format!(
                "the run cannot resume from it: {}; give the options it was started with",
                differ.join(", ")
            ),
        ))
    }
}

fn foreign() -> String {
    "it is not a lattice-gpu checkpoint (its first line is not `lattice-gpu checkpoint N`)".into()
}

fn bad(path: &Path, problem: String) -> IoError {
    IoError::Checkpoint {
        path: path.to_path_buf(),
        problem,
    }
}

/// What writing one checkpoint took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Written {
    /// Its step.
    pub step: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Seconds the write took (on its own thread).
    pub seconds: f64,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checkpoint of step {}: {:.1} MB in {:.3} s ({:.0} MB/s)",
            self.step,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
        )
    }
}

/// Writes checkpoints to one path on a thread of their own, one at a time, so that the run goes on
/// stepping while the file is written; a new save first waits for the one before.
#[derive(Debug)]
pub struct Saver {
    path: PathBuf,
    pending: Option<JoinHandle<Result<Written, IoError>>>,
    /// Seconds the run waited for earlier writes to finish.
    waited: f64,
}

impl Saver {
    /// A saver that writes to `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            pending: None,
            waited: 0.0,
        }
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts writing `ck`, after the previous write has finished; returns what that one took.
    pub fn save(&mut self, ck: Checkpoint) -> Result<Option<Written>, IoError> {
        let before = self.wait()?;
        let path = self.path.clone();
        self.pending = Some(std::thread::spawn(move || {
            let t = Instant::now();
            // The directory is made with the first checkpoint, not before a run that may write none.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| IoError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
            }
            let bytes = ck.write(&path)?;
            Ok(Written {
                step: ck.step,
                bytes,
                seconds: t.elapsed().as_secs_f64(),
            })
        }));
        Ok(before)
    }

    /// Waits for the write under way, if any, and returns what it took.
    pub fn wait(&mut self) -> Result<Option<Written>, IoError> {
        let Some(h) = self.pending.take() else {
            return Ok(None);
        };
        let t = Instant::now();
        let done = h.join().map_err(|_| IoError::Write {
            path: self.path.clone(),
            source: io::Error::other("the checkpoint thread panicked"),
        })?;
        self.waited += t.elapsed().as_secs_f64();
        done.map(Some)
    }

    /// Seconds the run has waited for writes so far: what checkpointing cost it.
    pub fn waited(&self) -> f64 {
        self.waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::scratch_dir;

    fn sample() -> Checkpoint {
        Checkpoint::new("diffusion", 1200)
            .param("kappa", 0.1)
            .param("size", "4x3x2")
            .array("field", &[1.5f32, -0.0, f32::MAX, 3.25e-39])
            .array("tags", &[7u8, 0, 255])
    }

    #[test]
    fn round_trips_bit_for_bit() {
        let dir = scratch_dir("checkpoint-round");
        let path = dir.join("c.ckpt");
        let ck = sample();
        let bytes = ck.write(&path).unwrap();
        assert_eq!(bytes, std::fs::metadata(&path).unwrap().len());
        let mut back = Checkpoint::read(&path).unwrap();
        assert_eq!(back, ck);
        let f: Vec<f32> = back.take("field", &path).unwrap();
        assert_eq!(
            f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [1.5f32, -0.0, f32::MAX, 3.25e-39].map(f32::to_bits)
        );
        let e = back.take::<f64>("tags", &path).unwrap_err().to_string();
        assert!(e.contains("`tags` is u8") && e.contains("needs f64"), "{e}");
    }

    #[test]
    fn truncated_corrupt_and_foreign_files_are_refused_by_name() {
        let dir = scratch_dir("checkpoint-bad");
        let path = dir.join("c.ckpt");
        sample().write(&path).unwrap();
        let good = std::fs::read(&path).unwrap();
        let refused = |bytes: &[u8], needle: &str| {
            std::fs::write(&path, bytes).unwrap();
            let e = Checkpoint::read(&path).unwrap_err().to_string();
            assert!(e.contains(needle), "expected `{needle}` in: {e}");
        };
        refused(&good[..good.len() - 1], "it is truncated");
        refused(&[&good[..], b"x"].concat(), "trailing bytes");
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        refused(&flipped, "fails its checksum");
        refused(b"\x93NUMPY\x01\x00", "not a lattice-gpu checkpoint");
        refused(&[0xff; 100], "not a lattice-gpu checkpoint");
        refused(b"", "not a lattice-gpu checkpoint");
        refused(
            &String::from_utf8_lossy(&good)
                .replacen("checkpoint 1", "checkpoint 9", 1)
                .into_bytes(),
            "format version 9",
        );
        refused(
            b"lattice-gpu checkpoint 1\nstep 3\n",
            "truncated or not a checkpoint",
        );
        // A header that claims an absurd array is refused before anything is allocated.
        refused(
            b"lattice-gpu checkpoint 1\narray f f64 99999999999999999 0\nend\n",
            "truncated",
        );
        let e = Checkpoint::read(&dir).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        #[cfg(unix)]
        {
            // A pipe is refused before it is opened, which would wait for a writer.
            let fifo = dir.join("pipe");
            if std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .is_ok_and(|s| s.success())
            {
                let e = Checkpoint::read(&fifo).unwrap_err().to_string();
                assert!(e.contains("a pipe, not a checkpoint file"), "{e}");
            }
        }
    }

    #[test]
    fn a_resume_with_other_parameters_names_each_difference() {
        let dir = scratch_dir("checkpoint-resume");
        let p = dir.join("c.ckpt");
        let ck = sample();
        let same = [("kappa".to_string(), "0.1".to_string())];
        ck.check_resume("diffusion", &same, &p).unwrap();
        let other = [
            ("kappa".to_string(), "0.2".to_string()),
            ("dt".to_string(), "1e-5".to_string()),
        ];
        let e = ck
            .check_resume("diffusion", &other, &p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kappa is 0.2 here and 0.1 there")
                && e.contains("dt is 1e-5 here and missing"),
            "{e}"
        );
        let e = ck.check_resume("lbm", &same, &p).unwrap_err().to_string();
        assert!(e.contains("not of `lbm`"), "{e}");
    }

    #[test]
    fn the_saver_writes_in_the_background_and_keeps_the_last_whole() {
        let dir = scratch_dir("checkpoint-saver");
        let path = dir.join("c.ckpt");
        let mut s = Saver::new(&path);
        for step in [10, 20, 30] {
            s.save(Checkpoint::new("diffusion", step).array("f", &vec![step as f64; 1000]))
                .unwrap();
        }
        let last = s.wait().unwrap().unwrap();
        assert_eq!(last.step, 30);
        assert_eq!(Checkpoint::read(&path).unwrap().step, 30);
        assert!(last.to_string().contains("MB/s"));
    }
}
