//! PTX modules: the framework's own, embedded at build time, and any number of users', each known by the
//! name its kernel types record ([`GpuEntry::MODULE`](lattice_gpu_kernels::stencil::GpuEntry::MODULE)).
//!
//! A user's crate builds its kernel crate with lattice-gpu-builder in `build.rs`, embeds the PTX with
//! [`ptx_module!`](crate::ptx_module) and loads it with [`Gpu::load`](crate::Gpu::load); the engines
//! then find its kernels by type, as they find the framework's.

use std::borrow::Cow;

/// FNV-1a 64-bit hash (of the PTX text), stable across runs and platforms.
#[must_use]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The framework's module, compiled from lattice-gpu-kernels by this crate's build script.
const FRAMEWORK_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/lattice_gpu_kernels.ptx"));

/// The architecture the framework's module was built for (`LATTICE_GPU_ARCH` at build time, default
/// `sm_70`).
pub const FRAMEWORK_ARCH: &str = env!("LATTICE_GPU_PTX_ARCH");

/// A PTX module and the name its kernel types know it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    name: Cow<'static, str>,
    ptx: Cow<'static, str>,
}

/// A [`Module`] with the PTX that lattice-gpu-builder compiled from kernel crate `$name` (its library
/// name, `_` for `-`) in this crate's `build.rs`: `ptx_module!("my_kernels")`.
#[macro_export]
macro_rules! ptx_module {
    ($name:literal) => {
        $crate::module::Module::new(
            $name,
            include_str!(concat!(env!("OUT_DIR"), "/", $name, ".ptx")),
        )
    };
}

impl Module {
    /// The module `name` with PTX text `ptx`.
    pub fn new(name: impl Into<Cow<'static, str>>, ptx: impl Into<Cow<'static, str>>) -> Self {
        Self {
            name: name.into(),
            ptx: ptx.into(),
        }
    }

    /// The framework's own kernels (every [`Gpu`](crate::Gpu) loads it when it opens).
    pub fn framework() -> Self {
        Self::new(lattice_gpu_kernels::MODULE, FRAMEWORK_PTX)
    }

    /// The name kernel types look the module up by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PTX text.
    pub fn ptx(&self) -> &str {
        &self.ptx
    }

    /// FNV-1a hash of the PTX: tune-cache entries of another build of the module do not apply.
    pub fn hash(&self) -> u64 {
        fnv1a64(self.ptx.as_bytes())
    }

    /// The kernel entry names (the `.visible .entry` lines).
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        ptx_entries(&self.ptx)
    }

    /// The PTX ISA version the module declares (`.version 7.8` is `(7, 8)`).
    pub fn isa_version(&self) -> Option<(u32, u32)> {
        let v = directive(&self.ptx, ".version")?;
        let (major, minor) = v.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }

    /// The architecture the module was built for (`.target sm_70` is `"sm_70"`).
    pub fn target(&self) -> Option<&str> {
        directive(&self.ptx, ".target")?
            .split(',')
            .next()
            .map(str::trim)
    }
}

/// The argument of the first line that starts with `name`.
fn directive<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    ptx.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(' '))
        .map(str::trim)
}

/// The kernel entry names of a PTX module (its `.visible .entry` lines).
pub fn ptx_entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|l| {
        let name = l.trim().strip_prefix(".visible .entry ")?;
        Some(name.trim_end_matches('(').trim())
    })
}

/// The oldest CUDA release whose driver loads PTX ISA `(major, minor)`: ISA 6.x came with CUDA 9 and 10,
/// 7.x with CUDA 11.x, 8.x with CUDA 12.x, 9.x with CUDA 13.x (NVIDIA's PTX ISA release notes).
pub fn cuda_for_isa((major, minor): (u32, u32)) -> (u32, u32) {
    match (major, minor) {
        (7, m) => (11, m),
        (8, m @ 0..=5) => (12, m),
        (8, 6 | 7) => (12, 8),
        (8, _) => (12, 9),
        (m, n) if m >= 9 => (m + 4, n),
        _ => (10, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    const PTX: &str = "//\n.version 7.8\n.target sm_70\n.address_size 64\n\n\
                       .visible .entry step_f32(\n\t.param .u64 a\n)\n{\n}\n\
                       .visible .entry step_f64(\n)\n{\n}\n";

    #[test]
    fn a_module_reads_its_header_and_entries() {
        let m = Module::new("mine", PTX);
        assert_eq!(m.name(), "mine");
        assert_eq!(m.isa_version(), Some((7, 8)));
        assert_eq!(m.target(), Some("sm_70"));
        assert_eq!(m.entries().collect::<Vec<_>>(), ["step_f32", "step_f64"]);
        assert_ne!(
            m.hash(),
            Module::new("mine", PTX.replace("f64", "f16")).hash()
        );
        assert_eq!(Module::new("x", "garbage").isa_version(), None);
    }

    #[test]
    fn the_framework_module_is_embedded_with_its_header() {
        let m = Module::framework();
        assert_eq!(m.name(), "lattice_gpu_kernels");
        assert_eq!(m.target(), Some(FRAMEWORK_ARCH));
        assert!(m.isa_version().is_some_and(|v| v >= (6, 0)));
        assert!(m.entries().any(|e| e == "diffusion3d_f32"));
    }

    #[test]
    fn each_isa_names_the_cuda_release_that_loads_it() {
        assert_eq!(cuda_for_isa((7, 8)), (11, 8));
        assert_eq!(cuda_for_isa((8, 0)), (12, 0));
        assert_eq!(cuda_for_isa((8, 7)), (12, 8));
        assert_eq!(cuda_for_isa((9, 0)), (13, 0));
    }
}
