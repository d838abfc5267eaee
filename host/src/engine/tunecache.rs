//! Persistent auto-tuning cache, in the spirit of QUDA's `tunecache.tsv`.
//!
//! The auto-tuner times several launch configurations of a kernel (block
//! shapes, z-marching length, ...) on real work and keeps the fastest. Tuning
//! costs many launches, so the winner is written to a per-user file and a
//! later run of the program reuses it without tuning again.
//!
//! An entry is keyed by kernel, problem size, precision, GPU and a hash of the
//! PTX the kernels were built from ([`fnv1a64`]). When the kernels are rebuilt
//! the hash changes: the old entry is reported as stale by [`TuneCache::get`]
//! and replaced by the next [`TuneCache::insert`] for the same
//! kernel/size/precision/device.
//!
//! # File format
//!
//! Plain text, one entry per line, tab-separated (`⇥` below stands for a
//! tab), sorted so that the output is deterministic:
//!
//! ```text
//! # lattice-gpu tunecache v1
//! # kernel⇥size⇥precision⇥device⇥ptx_hash⇥params⇥time_ms
//! wilson_dslash⇥32x32x32x64⇥f32⇥NVIDIA H100 80GB HBM3⇥0123456789abcdef⇥block_x=32,block_y=4⇥0.125
//! ```
//!
//! `ptx_hash` is 16 lowercase hex digits, `params` is `name=value,...` (names
//! `[A-Za-z0-9_]+`, values `u32`, possibly empty) and `time_ms` a float.
//! Blank lines and `#` lines after the header are skipped.
//!
//! # Robustness and concurrency
//!
//! A cache is an optimisation, so loading never fails: an unreadable file, a
//! file with a wrong header or version, and corrupt lines are skipped, each
//! with a warning collected for [`TuneCache::take_warnings`].
//!
//! Several processes (e.g. MPI ranks) may tune at once. Every insert takes an
//! exclusive advisory lock (`.tunecache.tsv.lock` beside the file), re-reads
//! the file, merges the new entry into what other processes wrote meanwhile,
//! writes the result to a uniquely named temporary file in the same directory
//! and renames it over the cache file. The lock keeps two merges from
//! interleaving, so no entry is lost; the rename is atomic, so readers only
//! ever see a complete file; for a given key the last writer wins. The lock is std's
//! [`File::lock`](std::fs::File::lock) (stable since Rust 1.89: `flock` on Unix, `LockFileEx` on
//! Windows), the well-kept way now, so no locking crate is used.
//!
//! A file that is not a tune cache, or a read-only one, is never replaced: it
//! is read (a read-only cache is used), and the first insert says once that
//! tuned launches are kept in memory only.

pub use crate::module::fnv1a64;
use lattice_gpu_formats::{write_atomically, IoError};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// First line of every tune-cache file; any other first line makes the whole
/// file be ignored (and rewritten on the next insert if it is a tune cache of
/// another version, never if it is something else).
const HEADER: &str = "# lattice-gpu tunecache v1";

/// What the first line of a tune cache of any version starts with.
const HEADER_PREFIX: &str = "# lattice-gpu tunecache v";

/// Comment line naming the columns, written after the header.
const COLUMNS: &str = "# kernel\tsize\tprecision\tdevice\tptx_hash\tparams\ttime_ms";

/// Number of tab-separated fields of an entry line.
const FIELDS: usize = 7;

/// Environment variable overriding the cache file path.
const ENV_VAR: &str = "LATTICE_GPU_TUNE_CACHE";

/// Identifies one tuned call: kernel, problem size, precision, GPU and PTX build.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TuneKey {
    /// Kernel name.
    pub kernel: String,
    /// Problem size, e.g. `"32x32x32x64"`.
    pub size: String,
    /// Floating-point precision, e.g. `"f32"`.
    pub precision: String,
    /// GPU name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub device: String,
    /// Hash of the PTX the kernels were built from (see [`fnv1a64`]).
    pub ptx_hash: u64,
}

/// The winning configuration: named parameter values and the time it took.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneEntry {
    /// Launch parameters in order, e.g. `[("block_x", 32), ("block_y", 4)]`.
    /// Names must match `[A-Za-z0-9_]+`.
    pub params: Vec<(String, u32)>,
    /// Measured time of one launch with these parameters, in milliseconds.
    pub time_ms: f64,
}

/// A [`TuneKey`] without its PTX hash: at most one entry per slot is kept, so
/// rebuilt kernels replace their stale entries.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    kernel: String,
    size: String,
    precision: String,
    device: String,
}

impl Slot {
    fn of(key: &TuneKey) -> Self {
        Slot {
            kernel: key.kernel.clone(),
            size: key.size.clone(),
            precision: key.precision.clone(),
            device: key.device.clone(),
        }
    }
}

/// What the cache holds for one [`Slot`].
#[derive(Clone, Debug, PartialEq)]
struct Stored {
    ptx_hash: u64,
    entry: TuneEntry,
}

type Entries = BTreeMap<Slot, Stored>;

/// The persistent tune cache: an in-memory map, optionally backed by a file.
#[derive(Debug)]
pub struct TuneCache {
    path: Option<PathBuf>,
    entries: Entries,
    warnings: Vec<String>,
    /// Every warning already reported, so that re-reads of the file on insert
    /// and repeated lookups do not repeat them.
    warned: HashSet<String>,
}

impl TuneCache {
    /// The default cache file: `$LATTICE_GPU_TUNE_CACHE` if set and non-empty
    /// (a file path), else `<platform cache dir>/lattice-gpu/tunecache.tsv`
    /// (see [`dirs::cache_dir`]), else `None`.
    #[must_use]
    pub fn default_path() -> Option<PathBuf> {
        default_path_from(std::env::var_os(ENV_VAR), dirs::cache_dir())
    }

    /// The user's cache: the file at [`default_path`](Self::default_path), in memory where there is
    /// none.
    #[must_use]
    pub fn per_user() -> Self {
        Self::default_path().map_or_else(Self::in_memory, Self::load)
    }

    /// An in-memory cache that never touches disk (for tests and
    /// `--no-tune-cache`).
    #[must_use]
    pub fn in_memory() -> Self {
        TuneCache {
            path: None,
            entries: Entries::new(),
            warnings: Vec::new(),
            warned: HashSet::new(),
        }
    }

    /// Loads the cache file at `path`; it is created by the first
    /// [`insert`](Self::insert). Never fails: a missing file gives an empty
    /// cache silently; an unreadable file, a wrong header or version, and
    /// corrupt lines are ignored, each with a warning (see
    /// [`take_warnings`](Self::take_warnings)).
    #[must_use]
    pub fn load(path: PathBuf) -> Self {
        let mut cache = TuneCache::in_memory();
        let (entries, warnings) = read_entries(&path);
        cache.entries = entries;
        for warning in warnings {
            cache.warn(warning);
        }
        cache.path = Some(path);
        cache
    }

    /// The file this cache persists to, if any.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The entry for `key`, if one was tuned with the same PTX build.
    ///
    /// If the only entry for the key's kernel, size, precision and device has
    /// a different `ptx_hash`, it is stale (the kernels were rebuilt): a
    /// warning is pushed (once per key) and `None` is returned, so that the
    /// caller retunes.
    pub fn get(&mut self, key: &TuneKey) -> Option<TuneEntry> {
        let key = sanitize_key(key);
        let stored = self.entries.get(&Slot::of(&key))?;
        if stored.ptx_hash == key.ptx_hash {
            return Some(stored.entry.clone());
        }
        let message = format!(
            "tune-cache entry for kernel `{}` (size {}, precision {}, device {}) is stale: \
             the kernels were rebuilt (ptx hash {:016x}, cached {:016x}); it will be retuned",
            key.kernel, key.size, key.precision, key.device, key.ptx_hash, stored.ptx_hash
        );
        self.warn(message);
        None
    }

    /// Inserts `entry` for `key`, replacing any entry for the same kernel,
    /// size, precision and device (stale ones included), and persists it.
    ///
    /// Tabs and line breaks in the key's fields are replaced by spaces (and a
    /// leading `#` of the kernel name by `_`), the same way
    /// [`get`](Self::get) does, so that the file stays parseable.
    ///
    /// Persisting re-reads the file (other processes may have added entries
    /// meanwhile), merges (this insert wins; the file wins over other
    /// in-memory entries), writes a temporary file in the same directory and
    /// renames it over the cache file, creating the directory if needed.
    ///
    /// # Errors
    ///
    /// The I/O error if the cache could not be persisted, or
    /// [`io::ErrorKind::InvalidInput`] if a parameter name is not
    /// `[A-Za-z0-9_]+` or `time_ms` is not finite (nothing is written then).
    /// In both cases the entry stays in memory for the rest of the run.
    pub fn insert(&mut self, key: TuneKey, entry: TuneEntry) -> io::Result<()> {
        let cleaned = match sanitize_key(&key) {
            Cow::Owned(cleaned) => Some(cleaned),
            Cow::Borrowed(_) => None,
        };
        let key = cleaned.unwrap_or(key);
        let slot = Slot::of(&key);
        let valid = validate_entry(&entry);
        let stored = Stored {
            ptx_hash: key.ptx_hash,
            entry,
        };
        self.entries.insert(slot.clone(), stored.clone());
        valid?;
        let Some(path) = self.path.clone() else {
            return Ok(());
        };

        // Other processes insert too: their read-merge-write and this one must not interleave, or
        // the later rename drops what the other added.
        let _lock = lock_beside(&path)?;
        if let Some((kind, why)) = must_not_replace(&path) {
            // Said once: later inserts keep to memory.
            self.path = None;
            return Err(io::Error::new(
                kind,
                format!(
                    "{} is {why}: it is left as it is, and tuned launches are not saved (they are \
                     kept for this run); point {ENV_VAR} at another file to keep them",
                    path.display()
                ),
            ));
        }
        let (mut merged, warnings) = read_entries(&path);
        for warning in warnings {
            self.warn(warning);
        }
        for (other_slot, other) in &self.entries {
            if *other_slot != slot && !merged.contains_key(other_slot) {
                merged.insert(other_slot.clone(), other.clone());
            }
        }
        merged.insert(slot, stored);
        let result = write_atomic(&path, serialize(&merged).as_bytes());
        self.entries = merged;
        result
    }

    /// Number of entries in memory.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// [`insert`](Self::insert), with a failure to save kept among the [`warnings`](Self::take_warnings)
    /// (the entry stays in memory either way): what a tuner does, whose result counts for this run
    /// whether or not the file takes it.
    pub fn store(&mut self, key: TuneKey, entry: TuneEntry) {
        // Refusals name the file themselves, and the cache forgets it after one.
        let path = self.path.as_ref().map(|p| p.display().to_string());
        if let Err(e) = self.insert(key, entry) {
            let message = match path {
                Some(path) if !e.to_string().contains(&path) => {
                    format!("could not save the tune cache {path}: {e}")
                }
                _ => format!("tune cache: {e}"),
            };
            self.warn(message);
        }
    }

    /// Warnings collected since the last call (corrupt lines with the file
    /// path and line number, stale entries, unreadable or foreign file),
    /// drained.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Records `message` unless it was already reported.
    fn warn(&mut self, message: String) {
        if self.warned.insert(message.clone()) {
            self.warnings.push(message);
        }
    }
}

/// [`TuneCache::default_path`] with the environment variable's value and the
/// platform cache directory passed in, so that it can be tested.
fn default_path_from(env: Option<OsString>, cache_dir: Option<PathBuf>) -> Option<PathBuf> {
    match env {
        Some(value) if !value.is_empty() => Some(PathBuf::from(value)),
        _ => cache_dir.map(|dir| dir.join("lattice-gpu").join("tunecache.tsv")),
    }
}

/// Replaces tabs and line breaks by spaces, which the file format cannot hold.
fn sanitize_field(field: &str) -> Cow<'_, str> {
    if field.contains(['\t', '\n', '\r']) {
        Cow::Owned(field.replace(['\t', '\n', '\r'], " "))
    } else {
        Cow::Borrowed(field)
    }
}

/// The key as it is stored: fields made storable and a leading `#` of the
/// kernel (which would turn the line into a comment) replaced by `_`.
fn sanitize_key(key: &TuneKey) -> Cow<'_, TuneKey> {
    let mut kernel = sanitize_field(&key.kernel);
    if let Some(rest) = kernel.strip_prefix('#') {
        kernel = Cow::Owned(format!("_{rest}"));
    }
    let size = sanitize_field(&key.size);
    let precision = sanitize_field(&key.precision);
    let device = sanitize_field(&key.device);
    let unchanged = [&kernel, &size, &precision, &device]
        .iter()
        .all(|field| matches!(field, Cow::Borrowed(_)));
    if unchanged {
        return Cow::Borrowed(key);
    }
    Cow::Owned(TuneKey {
        kernel: kernel.into_owned(),
        size: size.into_owned(),
        precision: precision.into_owned(),
        device: device.into_owned(),
        ptx_hash: key.ptx_hash,
    })
}

/// Whether `name` matches `[A-Za-z0-9_]+`.
fn is_param_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// Checks that `entry` can be written and read back unchanged.
fn validate_entry(entry: &TuneEntry) -> io::Result<()> {
    if let Some((name, _)) = entry.params.iter().find(|(name, _)| !is_param_name(name)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tune parameter name `{name}` is not [A-Za-z0-9_]+"),
        ));
    }
    if !entry.time_ms.is_finite() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tune time {} ms is not finite", entry.time_ms),
        ));
    }
    Ok(())
}

/// Reads the cache file at `path`: its entries and the warnings to report.
/// A missing file is an empty cache without warning.
fn read_entries(path: &Path) -> (Entries, Vec<String>) {
    // A device or pipe (LATTICE_GPU_TUNE_CACHE=/dev/zero) would be read without end.
    if let Some(m) = fs::metadata(path).ok().filter(|m| !m.is_file()) {
        return (
            Entries::new(),
            vec![format!(
                "{} is {}, not a tune cache file; tuning results stay in memory (name a file in \
                 LATTICE_GPU_TUNE_CACHE)",
                path.display(),
                lattice_gpu_formats::kind_of(&m)
            )],
        );
    }
    match fs::read(path) {
        Ok(bytes) => parse(path, &bytes),
        Err(err) if err.kind() == io::ErrorKind::NotFound => (Entries::new(), Vec::new()),
        Err(err) => (
            Entries::new(),
            vec![format!(
                "{}: cannot read tune cache ({err}); starting with an empty cache",
                path.display()
            )],
        ),
    }
}

/// Parses the contents of a cache file; `path` only names it in warnings.
/// Later lines win over earlier ones for the same slot.
fn parse(path: &Path, bytes: &[u8]) -> (Entries, Vec<String>) {
    let mut entries = Entries::new();
    let mut warnings = Vec::new();
    if bytes.is_empty() {
        return (entries, warnings);
    }
    let mut lines = bytes
        .split(|&byte| byte == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let first = lines.next().unwrap_or_default();
    if first != HEADER.as_bytes() {
        let what = if first.starts_with(HEADER_PREFIX.as_bytes()) {
            "unsupported tune-cache version (first line is not `{HEADER}`); ignoring its contents, \
             it will be rewritten on the next insert"
        } else {
            "not a lattice-gpu tune cache; ignoring it, and it will not be written over"
        };
        warnings.push(format!(
            "{}: {}",
            path.display(),
            what.replace("{HEADER}", HEADER)
        ));
        return (entries, warnings);
    }
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        let Ok(line) = std::str::from_utf8(line) else {
            warnings.push(corrupt(path, number, "invalid UTF-8"));
            continue;
        };
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok((slot, stored)) => {
                entries.insert(slot, stored);
            }
            Err(why) => warnings.push(corrupt(path, number, &why)),
        }
    }
    (entries, warnings)
}

/// The warning for a corrupt line.
fn corrupt(path: &Path, line: usize, why: &str) -> String {
    format!(
        "{}:{line}: corrupt tune-cache line ignored ({why})",
        path.display()
    )
}

/// Parses one entry line, or says why it is corrupt.
fn parse_line(line: &str) -> Result<(Slot, Stored), String> {
    let fields: Vec<&str> = line.split('\t').collect();
    let [kernel, size, precision, device, hash, params, time] = fields[..] else {
        return Err(format!(
            "expected {FIELDS} tab-separated fields, found {}",
            fields.len()
        ));
    };
    let ptx_hash = parse_hash(hash)
        .ok_or_else(|| format!("bad ptx_hash `{hash}`, expected 16 lowercase hex digits"))?;
    let params = parse_params(params)?;
    let time_ms = time
        .parse::<f64>()
        .ok()
        .filter(|time| time.is_finite())
        .ok_or_else(|| format!("bad time_ms `{time}`"))?;
    let slot = Slot {
        kernel: kernel.to_owned(),
        size: size.to_owned(),
        precision: precision.to_owned(),
        device: device.to_owned(),
    };
    let entry = TuneEntry { params, time_ms };
    Ok((slot, Stored { ptx_hash, entry }))
}

/// Parses exactly 16 lowercase hex digits.
fn parse_hash(text: &str) -> Option<u64> {
    let well_formed = text.len() == 16
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if !well_formed {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// Parses `name=value,name=value` (empty text: no parameters).
fn parse_params(text: &str) -> Result<Vec<(String, u32)>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|item| {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("bad param `{item}`, expected name=value"))?;
            if !is_param_name(name) {
                return Err(format!("bad param name in `{item}`"));
            }
            let value = value
                .parse::<u32>()
                .map_err(|_| format!("bad param value in `{item}`, expected a u32"))?;
            Ok((name.to_owned(), value))
        })
        .collect()
}

/// The file contents for `entries`, sorted (by the map's order).
fn serialize(entries: &Entries) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    out.push_str(COLUMNS);
    out.push('\n');
    for (slot, stored) in entries {
        let params = stored
            .entry
            .params
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{:016x}\t{}\t{}",
            slot.kernel,
            slot.size,
            slot.precision,
            slot.device,
            stored.ptx_hash,
            params,
            stored.entry.time_ms
        );
    }
    out
}

/// An exclusive advisory lock on `.<file name>.lock` beside the cache at `path`, held until the
/// returned file is dropped; creates the cache's directory if needed. The cache file itself cannot
/// carry the lock: every write replaces it by a rename.
fn lock_beside(path: &Path) -> io::Result<fs::File> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!(".{name}.lock")))?;
    lock.lock()?;
    Ok(lock)
}

/// Why the file at `path` must not be replaced by a cache, if it must not: it is something else
/// (a path set by mistake), or it is read-only (a shared cache its owner keeps fixed).
fn must_not_replace(path: &Path) -> Option<(io::ErrorKind, &'static str)> {
    // Checked before opening: opening a pipe waits for a writer.
    if !fs::metadata(path).ok()?.is_file() {
        return Some((io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut head = [0; HEADER_PREFIX.len()];
    let mut file = fs::File::open(path).ok()?;
    let read = io::Read::read(&mut file, &mut head).ok()?;
    if read > 0 && !head[..read].starts_with(HEADER_PREFIX.as_bytes()) {
        return Some((io::ErrorKind::InvalidData, "not a lattice-gpu tune cache"));
    }
    file.metadata()
        .ok()?
        .permissions()
        .readonly()
        .then_some((io::ErrorKind::PermissionDenied, "read-only"))
}

/// Replaces the file at `path` by `contents` atomically ([`write_atomically`]); its directory exists
/// ([`lock_beside`] made it).
fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_atomically(path, |w| w.write_all(contents)).map_err(|e| match e {
        IoError::Write { source, .. } => source,
        other => io::Error::other(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_or_pipe_named_as_the_cache_is_neither_read_nor_replaced() {
        let mut cache = TuneCache::load(PathBuf::from("/dev/zero"));
        assert_eq!(cache.len(), 0);
        let w = cache.take_warnings().join("\n");
        assert!(w.contains("a device, not a tune cache file"), "{w}");
        assert!(must_not_replace(Path::new("/dev/zero")).is_some());
    }
    use std::time::{SystemTime, UNIX_EPOCH};

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos())
                .unwrap_or(0);
            let dir = std::env::temp_dir().join(format!(
                "lattice-gpu-tunecache-{name}-{}-{nanos}",
                std::process::id()
            ));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn file(&self) -> PathBuf {
            self.0.join("tunecache.tsv")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn key(kernel: &str, device: &str, ptx_hash: u64) -> TuneKey {
        TuneKey {
            kernel: kernel.to_owned(),
            size: "32x32x32x64".to_owned(),
            precision: "f32".to_owned(),
            device: device.to_owned(),
            ptx_hash,
        }
    }

    fn entry(block_x: u32, time_ms: f64) -> TuneEntry {
        TuneEntry {
            params: vec![("block_x".to_owned(), block_x), ("block_y".to_owned(), 4)],
            time_ms,
        }
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";

    #[test]
    fn round_trip() {
        let dir = TempDir::new("round-trip");
        let mut cache = TuneCache::load(dir.file());
        assert!(cache.is_empty());
        let (k1, e1) = (key("dslash", H100, 1), entry(32, 0.125));
        let (k2, e2) = (key("clover", H100, 1), entry(64, 1.0 / 3.0));
        cache.insert(k1.clone(), e1.clone()).unwrap();
        cache.insert(k2.clone(), e2.clone()).unwrap();
        assert_eq!(cache.len(), 2);

        let mut loaded = TuneCache::load(dir.file());
        assert_eq!(loaded.path(), Some(dir.file().as_path()));
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.get(&k1), Some(e1));
        assert_eq!(loaded.get(&k2), Some(e2));
        assert!(loaded.take_warnings().is_empty());

        let text = fs::read_to_string(dir.file()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines[1], COLUMNS);
        // Sorted: clover before dslash.
        assert!(lines[2].starts_with("clover\t"));
        assert!(lines[3].starts_with("dslash\t"));
        assert_eq!(
            lines[3],
            format!(
                "dslash\t32x32x32x64\tf32\t{H100}\t0000000000000001\tblock_x=32,block_y=4\t0.125"
            )
        );
    }

    #[test]
    fn other_process_entries_are_kept() {
        let dir = TempDir::new("merge");
        let mut first = TuneCache::load(dir.file());
        let mut second = TuneCache::load(dir.file());
        first.insert(key("a", H100, 7), entry(8, 1.0)).unwrap();
        second.insert(key("b", H100, 7), entry(16, 2.0)).unwrap();
        // The second insert re-read the file, so it now knows the first one's entry.
        assert_eq!(second.len(), 2);

        let mut third = TuneCache::load(dir.file());
        assert_eq!(third.len(), 2);
        assert_eq!(third.get(&key("a", H100, 7)), Some(entry(8, 1.0)));
        assert_eq!(third.get(&key("b", H100, 7)), Some(entry(16, 2.0)));

        // Last writer wins for a key, and other entries survive.
        first.insert(key("b", H100, 7), entry(32, 0.5)).unwrap();
        let mut fourth = TuneCache::load(dir.file());
        assert_eq!(fourth.len(), 2);
        assert_eq!(fourth.get(&key("b", H100, 7)), Some(entry(32, 0.5)));
    }

    #[test]
    fn corrupt_lines_are_skipped_with_warnings() {
        let dir = TempDir::new("corrupt");
        let good = format!("k\ts\tf64\t{H100}\t00000000000000ff\tblock_x=8\t1.5");
        let text = format!(
            "{HEADER}\n{COLUMNS}\n{good}\n\na\tb\tc\n\
             k2\ts\tf64\tgpu\t00000000000000FG\tblock_x=8\t1.5\n\
             # a comment\n\
             k3\ts\tf64\tgpu\t00000000000000ff\tblock_x=abc\t1.5\n"
        );
        fs::write(dir.file(), text).unwrap();
        let mut cache = TuneCache::load(dir.file());
        assert_eq!(cache.len(), 1);
        let warnings = cache.take_warnings();
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let path = dir.file().display().to_string();
        for (warning, line) in warnings.iter().zip([5, 6, 8]) {
            assert!(
                warning.starts_with(&format!("{path}:{line}: corrupt tune-cache line ignored (")),
                "{warning}"
            );
        }
        assert!(warnings[0].contains("found 3"), "{}", warnings[0]);
        assert!(warnings[1].contains("ptx_hash"), "{}", warnings[1]);
        assert!(warnings[2].contains("block_x=abc"), "{}", warnings[2]);
        let mut good_key = key("k", H100, 0xff);
        good_key.size = "s".to_owned();
        good_key.precision = "f64".to_owned();
        let expected = TuneEntry {
            params: vec![("block_x".to_owned(), 8)],
            time_ms: 1.5,
        };
        assert_eq!(cache.get(&good_key), Some(expected));
        assert!(cache.take_warnings().is_empty(), "drained");
    }

    #[test]
    fn more_corrupt_fields() {
        let path = Path::new("x.tsv");
        for (line, why) in [
            ("k\ts\tp\td\t00000000000000ff\tblock_x=8\tfast", "time_ms"),
            ("k\ts\tp\td\t00000000000000ff\tblock_x=8\tNaN", "time_ms"),
            ("k\ts\tp\td\t+0000000000000ff\tblock_x=8\t1", "ptx_hash"),
            ("k\ts\tp\td\tff\tblock_x=8\t1", "ptx_hash"),
            ("k\ts\tp\td\t00000000000000ff\tblock-x=8\t1", "param name"),
            ("k\ts\tp\td\t00000000000000ff\tblock_x\t1", "name=value"),
            ("k\ts\tp\td\t00000000000000ff\tblock_x=4294967296\t1", "u32"),
            (
                "k\ts\tp\td\t00000000000000ff\tblock_x=8\t1\textra",
                "found 8",
            ),
        ] {
            let (entries, warnings) = parse(path, format!("{HEADER}\n{line}\n").as_bytes());
            assert!(entries.is_empty(), "{line}");
            assert_eq!(warnings.len(), 1, "{line}");
            assert!(warnings[0].starts_with("x.tsv:2: "), "{}", warnings[0]);
            assert!(warnings[0].contains(why), "{}", warnings[0]);
        }
        // Empty params and CRLF line endings are fine.
        let (entries, warnings) = parse(
            path,
            format!("{HEADER}\r\nk\ts\tp\td\t00000000000000ff\t\t2.5\r\n").as_bytes(),
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let stored = entries.values().next().unwrap();
        assert!(stored.entry.params.is_empty());
        assert_eq!(stored.entry.time_ms, 2.5);
    }

    #[test]
    fn bad_header_is_ignored_then_rewritten() {
        let dir = TempDir::new("header");
        let line = "k\ts\tf32\tgpu\t0000000000000001\tblock_x=8\t1";
        fs::write(dir.file(), format!("# lattice-gpu tunecache v2\n{line}\n")).unwrap();
        let mut cache = TuneCache::load(dir.file());
        assert!(cache.is_empty());
        let warnings = cache.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(&dir.file().display().to_string()));
        assert!(warnings[0].contains("rewritten"));

        cache.insert(key("dslash", H100, 2), entry(8, 1.0)).unwrap();
        // The re-read on insert does not repeat the warning.
        assert!(cache.take_warnings().is_empty());
        let text = fs::read_to_string(dir.file()).unwrap();
        assert_eq!(text.lines().next(), Some(HEADER));
        let mut loaded = TuneCache::load(dir.file());
        assert!(loaded.take_warnings().is_empty());
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded.get(&key("dslash", H100, 2)), Some(entry(8, 1.0)));
    }

    /// Writers in parallel (threads, each with its own cache and so its own open lock file, as
    /// processes have) lose no entry: every read-merge-write holds the lock.
    #[test]
    fn concurrent_writers_lose_no_entry() {
        let dir = TempDir::new("concurrent");
        let (writers, each) = (8, 40);
        std::thread::scope(|s| {
            for w in 0..writers {
                let file = dir.file();
                s.spawn(move || {
                    let mut cache = TuneCache::load(file);
                    for i in 0..each {
                        let k = key(&format!("k{w}_{i}"), H100, 1);
                        cache.insert(k, entry(8 + w, i as f64)).unwrap();
                    }
                });
            }
        });
        let mut loaded = TuneCache::load(dir.file());
        assert!(loaded.take_warnings().is_empty());
        assert_eq!(loaded.len(), (writers * each) as usize);
        for w in 0..writers {
            for i in 0..each {
                let k = key(&format!("k{w}_{i}"), H100, 1);
                assert_eq!(loaded.get(&k), Some(entry(8 + w, i as f64)), "{w} {i}");
            }
        }
    }

    /// A file that is no tune cache (a path set by mistake) is read as empty and never overwritten;
    /// the cache says so once and keeps its entries in memory.
    #[test]
    fn a_file_that_is_no_tune_cache_is_never_overwritten() {
        let dir = TempDir::new("foreign");
        let text = "my precious notes\n";
        fs::write(dir.file(), text).unwrap();
        let mut cache = TuneCache::load(dir.file());
        let warnings = cache.take_warnings();
        assert!(
            warnings.len() == 1 && warnings[0].contains("not a lattice-gpu tune cache"),
            "{warnings:?}"
        );
        let k = key("dslash", H100, 1);
        let e = cache
            .insert(k.clone(), entry(8, 1.0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a lattice-gpu tune cache") && e.contains("not saved"),
            "{e}"
        );
        assert_eq!(fs::read_to_string(dir.file()).unwrap(), text);
        assert_eq!(cache.get(&k), Some(entry(8, 1.0)));
        // Said once: later inserts keep to memory quietly.
        cache.insert(key("clover", H100, 1), entry(8, 1.0)).unwrap();
        assert_eq!(fs::read_to_string(dir.file()).unwrap(), text);
        assert_eq!(cache.path(), None);
    }

    /// A read-only cache is used but not replaced.
    #[cfg(unix)]
    #[test]
    fn a_read_only_cache_is_used_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new("readonly");
        let mut writer = TuneCache::load(dir.file());
        writer
            .insert(key("dslash", H100, 1), entry(8, 1.0))
            .unwrap();
        fs::set_permissions(dir.file(), fs::Permissions::from_mode(0o444)).unwrap();
        let before = fs::read(dir.file()).unwrap();
        let mut cache = TuneCache::load(dir.file());
        assert_eq!(cache.get(&key("dslash", H100, 1)), Some(entry(8, 1.0)));
        let e = cache
            .insert(key("clover", H100, 1), entry(16, 2.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("read-only") && e.contains("not saved"), "{e}");
        assert_eq!(fs::read(dir.file()).unwrap(), before);
        let mode = fs::metadata(dir.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o444);
        assert_eq!(cache.get(&key("clover", H100, 1)), Some(entry(16, 2.0)));
    }

    #[test]
    fn unreadable_file_warns() {
        let dir = TempDir::new("unreadable");
        // A directory where the file should be cannot be read as a file.
        fs::create_dir(dir.file()).unwrap();
        let mut cache = TuneCache::load(dir.file());
        assert!(cache.is_empty());
        let warnings = cache.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("is a directory, not a tune cache file"),
            "{}",
            warnings[0]
        );
        // Persisting fails, but the entry stays in memory.
        let k = key("dslash", H100, 1);
        assert!(cache.insert(k.clone(), entry(8, 1.0)).is_err());
        assert_eq!(cache.get(&k), Some(entry(8, 1.0)));
    }

    #[test]
    fn missing_and_empty_files_are_silent() {
        let dir = TempDir::new("missing");
        let mut cache = TuneCache::load(dir.file());
        assert!(cache.is_empty());
        assert!(cache.take_warnings().is_empty());
        fs::write(dir.file(), "").unwrap();
        let mut cache = TuneCache::load(dir.file());
        assert!(cache.is_empty());
        assert!(cache.take_warnings().is_empty());
    }

    #[test]
    fn stale_entries_warn_and_are_replaced() {
        let dir = TempDir::new("stale");
        let old = key("dslash", H100, 0xaaaa);
        let new = key("dslash", H100, 0xbbbb);
        let mut cache = TuneCache::load(dir.file());
        cache.insert(old.clone(), entry(8, 1.0)).unwrap();

        let mut cache = TuneCache::load(dir.file());
        assert_eq!(cache.get(&new), None);
        let warnings = cache.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("stale"), "{}", warnings[0]);
        assert!(warnings[0].contains("retuned"), "{}", warnings[0]);
        // Once per key.
        assert_eq!(cache.get(&new), None);
        assert!(cache.take_warnings().is_empty());
        // A key for another slot is simply absent.
        assert_eq!(cache.get(&key("clover", H100, 0xbbbb)), None);
        assert!(cache.take_warnings().is_empty());

        cache.insert(new.clone(), entry(16, 0.5)).unwrap();
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&new), Some(entry(16, 0.5)));
        let text = fs::read_to_string(dir.file()).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(lines[0].contains("000000000000bbbb"), "{text}");
        let mut loaded = TuneCache::load(dir.file());
        assert_eq!(loaded.get(&old), None);
        assert_eq!(loaded.get(&new), Some(entry(16, 0.5)));
    }

    #[test]
    fn spaces_survive_and_tabs_are_replaced() {
        let dir = TempDir::new("fields");
        let mut cache = TuneCache::load(dir.file());
        let spaced = key("dslash", H100, 3);
        cache.insert(spaced.clone(), entry(8, 1.0)).unwrap();
        let tabbed = TuneKey {
            kernel: "#odd\tkernel".to_owned(),
            size: "8x8\n".to_owned(),
            precision: "f\r32".to_owned(),
            device: "GPU\twith tab".to_owned(),
            ptx_hash: 3,
        };
        cache.insert(tabbed.clone(), entry(4, 2.0)).unwrap();
        // The original key still finds its (sanitized) entry.
        assert_eq!(cache.get(&tabbed), Some(entry(4, 2.0)));

        let mut loaded = TuneCache::load(dir.file());
        assert!(loaded.take_warnings().is_empty());
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.get(&spaced), Some(entry(8, 1.0)));
        assert_eq!(loaded.get(&tabbed), Some(entry(4, 2.0)));
        let clean = TuneKey {
            kernel: "_odd kernel".to_owned(),
            size: "8x8 ".to_owned(),
            precision: "f 32".to_owned(),
            device: "GPU with tab".to_owned(),
            ptx_hash: 3,
        };
        assert_eq!(loaded.get(&clean), Some(entry(4, 2.0)));
    }

    #[test]
    fn invalid_entries_are_not_written() {
        let dir = TempDir::new("invalid");
        let mut cache = TuneCache::load(dir.file());
        let k = key("dslash", H100, 1);
        let bad = TuneEntry {
            params: vec![("block x".to_owned(), 8)],
            time_ms: 1.0,
        };
        let err = cache.insert(k.clone(), bad.clone()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(cache.get(&k), Some(bad));
        let infinite = TuneEntry {
            params: Vec::new(),
            time_ms: f64::INFINITY,
        };
        let err = cache.insert(k, infinite).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!dir.file().exists());
    }

    #[test]
    fn no_temp_files_left_and_parent_created() {
        let dir = TempDir::new("temp");
        let path = dir.0.join("nested").join("deeper").join("tunecache.tsv");
        let mut cache = TuneCache::load(path.clone());
        for i in 0..20 {
            cache
                .insert(key(&format!("kernel{i}"), H100, 1), entry(i, 1.0))
                .unwrap();
        }
        let mut names: Vec<OsString> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|item| item.unwrap().file_name())
            .collect();
        names.sort();
        // The cache and its lock, no temporary file.
        assert_eq!(names, [".tunecache.tsv.lock", "tunecache.tsv"]);
        assert_eq!(TuneCache::load(path).len(), 20);
    }

    #[test]
    fn concurrent_writers_never_leave_partial_files() {
        let dir = TempDir::new("threads");
        let path = dir.file();
        let handles: Vec<_> = (0..8)
            .map(|thread| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut cache = TuneCache::load(path.clone());
                    for i in 0..10 {
                        let k = key(&format!("t{thread}k{i}"), H100, 1);
                        cache.insert(k, entry(i, 1.0)).unwrap();
                        // Every read sees a complete, valid file.
                        let mut reader = TuneCache::load(path.clone());
                        assert!(reader.take_warnings().is_empty());
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let mut names: Vec<OsString> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|item| item.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [".tunecache.tsv.lock", "tunecache.tsv"]);
        assert!(!TuneCache::load(path).is_empty());
    }

    #[test]
    fn in_memory_never_writes() {
        let mut cache = TuneCache::in_memory();
        assert_eq!(cache.path(), None);
        let k = key("dslash", H100, 1);
        cache.insert(k.clone(), entry(8, 1.0)).unwrap();
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&k), Some(entry(8, 1.0)));
        assert!(cache.take_warnings().is_empty());
    }

    #[test]
    fn default_path_prefers_env_then_cache_dir() {
        let cache_dir = Some(PathBuf::from("/home/u/.cache"));
        assert_eq!(
            default_path_from(Some(OsString::from("/tmp/my.tsv")), cache_dir.clone()),
            Some(PathBuf::from("/tmp/my.tsv"))
        );
        let expected = Some(PathBuf::from("/home/u/.cache/lattice-gpu/tunecache.tsv"));
        assert_eq!(default_path_from(None, cache_dir.clone()), expected);
        assert_eq!(
            default_path_from(Some(OsString::new()), cache_dir),
            expected
        );
        assert_eq!(default_path_from(None, None), None);
    }
}
