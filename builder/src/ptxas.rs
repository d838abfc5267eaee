//! Assembling a module with NVIDIA's `ptxas` and reading its `-v` report: registers, stack and spills
//! per entry. ptxas comes from the `PTXAS` variable (for a machine without CUDA,
//! `pip install nvidia-cuda-nvcc==13.0.88` gives `nvidia/cu13/bin/ptxas`).

use std::path::Path;
use std::process::Command;

use crate::error::{io, Error};

/// The architecture modules are assembled for unless `LATTICE_GPU_PTXAS_ARCH` says otherwise.
pub const DEFAULT_ARCH: &str = "sm_90";

/// What `ptxas -v` reports of one kernel entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryReport {
    /// The entry's name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of stack frame per thread (spilled registers and local arrays).
    pub stack: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
}

/// Assembles `ptx` for `arch` with the ptxas at `ptxas` and returns its log.
pub fn assemble(ptxas: &Path, ptx: &Path, arch: &str, module: &str) -> Result<String, Error> {
    let cubin = ptx.with_extension("cubin");
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&cubin)
        .arg(ptx)
        .output()
        .map_err(io(format!(
            "running ptxas ({}; PTXAS names it)",
            ptxas.display()
        )))?;
    let _ = std::fs::remove_file(&cubin);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error::Ptxas {
            module: module.to_string(),
            log,
        });
    }
    Ok(log)
}

/// Each entry of a `ptxas -v` log, in the order the log gives them.
pub fn parse(log: &str) -> Vec<EntryReport> {
    let mut out = Vec::new();
    let mut entry: Option<String> = None;
    let (mut stack, mut stores, mut loads) = (0, 0, 0);
    let number_before = |l: &str, what: &str| -> Option<u32> {
        let head = &l[..l.find(what)?];
        head.split_whitespace().last()?.parse().ok()
    };
    for l in log.lines() {
        if let Some(rest) = l.split("Compiling entry function '").nth(1) {
            entry = rest.split('\'').next().map(str::to_string);
        } else if let Some(s) = number_before(l, "bytes stack frame") {
            stack = s;
            stores = number_before(l, "bytes spill stores").unwrap_or(0);
            loads = number_before(l, "bytes spill loads").unwrap_or(0);
        } else if let (Some(e), Some(r)) = (&entry, number_before(l, "registers")) {
            out.push(EntryReport {
                name: e.clone(),
                registers: r,
                stack,
                spill_stores: stores,
                spill_loads: loads,
            });
            entry = None;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ptxas_log_is_read_entry_by_entry() {
        let log = "ptxas info    : Compiling entry function 'k_a' for 'sm_90'\n\
                   ptxas info    : Function properties for k_a\n\
                   \x20   16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 25 registers, used 1 barriers\n\
                   ptxas info    : Compiling entry function 'k_b' for 'sm_90'\n\
                   ptxas info    : Function properties for k_b\n\
                   \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                   ptxas info    : Used 40 registers, 380 bytes cmem[0]\n";
        assert_eq!(
            parse(log),
            vec![
                EntryReport {
                    name: "k_a".into(),
                    registers: 25,
                    stack: 16,
                    spill_stores: 8,
                    spill_loads: 4
                },
                EntryReport {
                    name: "k_b".into(),
                    registers: 40,
                    stack: 0,
                    spill_stores: 0,
                    spill_loads: 0
                }
            ]
        );
    }
}
