//! A run's output directory, filled all or nothing.
//!
//! A run writes several files (a field, pictures, CSV series). Were they written straight into the
//! output directory, a run that fails half-way (a full disk, a diverged state, a signal) would leave
//! some new files beside some old ones, which look like one run's results and are not. So the files
//! go into a hidden staging directory beside the output directory, and [`OutputDir::commit`] moves
//! them in together once the run has succeeded; dropped without a commit, the staging directory is
//! removed and the output directory keeps what it had.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::temporary::Temporary;
use crate::IoError;

/// An output directory whose files are staged until [`commit`](Self::commit).
#[derive(Debug)]
pub struct OutputDir {
    target: PathBuf,
    staging: PathBuf,
    committed: bool,
    _registered: Temporary,
}

impl OutputDir {
    /// Stages the output of a run that will go into `target`: checks now that `target` can be made
    /// (before hours of work), and makes a staging directory beside it. `target` and its parents are
    /// created only at the commit.
    pub fn stage(target: &Path) -> Result<Self, IoError> {
        let fail = |source| IoError::CreateDir {
            path: target.to_path_buf(),
            source,
        };
        if target.exists() && !target.is_dir() {
            return Err(fail(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "it exists and is not a directory; name a directory for the run's files",
            )));
        }
        let name = target.file_name().ok_or_else(|| {
            fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path names no directory; give one such as out or results/run1",
            ))
        })?;
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        fs::create_dir_all(parent).map_err(fail)?;
        let staging = parent.join(format!(
            ".{}.{}.staging",
            name.to_string_lossy(),
            std::process::id()
        ));
        let registered = Temporary::dir(&staging);
        // A leftover of an earlier process with this pid (killed with SIGKILL) is of no use to anyone.
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir(&staging).map_err(fail)?;
        Ok(Self {
            target: target.to_path_buf(),
            staging,
            committed: false,
            _registered: registered,
        })
    }

    /// Where to write the file `name` now (in the staging directory).
    pub fn file(&self, name: &str) -> PathBuf {
        self.staging.join(name)
    }

    /// Where the file `name` will be after the commit.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// The output directory.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Moves every staged file into the output directory (made now if it is missing), and returns
    /// their final paths, sorted. A file of the same name there is replaced, through a symbolic link
    /// as [`write_atomically`](crate::write_atomically) does. Every target path is checked before the
    /// first is moved: if one is a directory or a device, nothing moves and the staged files are
    /// removed.
    pub fn commit(mut self) -> Result<Vec<PathBuf>, IoError> {
        let mut names: Vec<PathBuf> = fs::read_dir(&self.staging)
            .and_then(|d| d.map(|e| e.map(|e| e.path())).collect())
            .map_err(|source| IoError::Write {
                path: self.staging.clone(),
                source,
            })?;
        names.sort();
        let mut moves = Vec::with_capacity(names.len());
        for from in names {
            let Some(name) = from.file_name() else {
                continue;
            };
            let to =
                crate::follow_links(&self.target.join(name)).map_err(|source| IoError::Write {
                    path: self.target.join(name),
                    source,
                })?;
            if fs::metadata(&to).is_ok_and(|m| !m.is_file()) {
                return Err(IoError::Write {
                    path: to.clone(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} exists and is not a regular file; move it away, or choose another \
                             output directory",
                            to.display()
                        ),
                    ),
                });
            }
            moves.push((from, to));
        }
        if !self.target.exists() {
            fs::create_dir_all(&self.target).map_err(|source| IoError::CreateDir {
                path: self.target.clone(),
                source,
            })?;
        }
        let mut done = Vec::with_capacity(moves.len());
        for (from, to) in moves {
            fs::rename(&from, &to).map_err(|source| IoError::Write {
                path: to.clone(),
                source,
            })?;
            done.push(self.target.join(from.file_name().unwrap_or_default()));
        }
        crate::sync_dir(&self.target);
        self.committed = true;
        let _ = fs::remove_dir(&self.staging);
        Ok(done)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{entries, scratch_dir};

    #[test]
    fn files_appear_together_at_the_commit() {
        let dir = scratch_dir("output-commit");
        let target = dir.join("a/b/out");
        let out = OutputDir::stage(&target).unwrap();
        crate::write_atomically(&out.file("x.csv"), |w| w.write_all(b"1\n")).unwrap();
        crate::write_atomically(&out.file("y.csv"), |w| w.write_all(b"2\n")).unwrap();
        assert!(!target.exists(), "nothing before the commit");
        let paths = out.commit().unwrap();
        assert_eq!(paths, vec![target.join("x.csv"), target.join("y.csv")]);
        assert_eq!(entries(&target), ["x.csv", "y.csv"]);
        // No staging directory is left beside it.
        assert_eq!(entries(&dir.join("a/b")), ["out"]);
    }

    #[test]
    fn a_run_that_fails_leaves_the_old_files_alone() {
        let dir = scratch_dir("output-fail");
        let target = dir.join("out");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("x.csv"), "old").unwrap();
        {
            let out = OutputDir::stage(&target).unwrap();
            fs::write(out.file("x.csv"), "new").unwrap();
            fs::write(out.file("y.csv"), "new").unwrap();
            // Dropped without a commit: the run failed.
        }
        assert_eq!(entries(&dir), ["out"]);
        assert_eq!(entries(&target), ["x.csv"]);
        assert_eq!(fs::read_to_string(target.join("x.csv")).unwrap(), "old");
    }

    #[test]
    fn nothing_moves_when_one_target_cannot_be_replaced() {
        let dir = scratch_dir("output-blocked");
        let target = dir.join("out");
        fs::create_dir_all(target.join("y.csv")).unwrap();
        let out = OutputDir::stage(&target).unwrap();
        fs::write(out.file("x.csv"), "new").unwrap();
        fs::write(out.file("y.csv"), "new").unwrap();
        let e = out.commit().unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(entries(&target), ["y.csv"]);
        assert!(target.join("y.csv").is_dir());
        assert_eq!(entries(&dir), ["out"]);
    }

    #[test]
    fn a_file_in_the_way_of_the_directory_is_refused_before_the_run() {
        let dir = scratch_dir("output-file");
        fs::write(dir.join("out"), "data").unwrap();
        let e = OutputDir::stage(&dir.join("out")).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert_eq!(fs::read_to_string(dir.join("out")).unwrap(), "data");
    }
}
