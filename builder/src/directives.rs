//! Performance directives the nvptx backend does not write: an entry exported as `name__maxnregN`
//! gets PTX's `.maxnreg N`, the register cap CUDA C++ sets with `__launch_bounds__` or `maxrregcount`
//! (rustc has no attribute for it). Hand-written: a line scan of rustc's own PTX, whose entries open
//! with `.visible .entry name(` and whose bodies start with a line of `{`.

/// The suffix before an entry's register cap.
pub const MAXNREG_SUFFIX: &str = "__maxnreg";

/// `ptx` with a `.maxnreg` line before the body of each entry whose name asks for one.
pub fn apply(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 64);
    let mut cap: Option<u32> = None;
    for line in ptx.split_inclusive('\n') {
        if let Some(name) = line.trim().strip_prefix(".visible .entry ") {
            cap = maxnreg(name.trim_end_matches('('));
        } else if line.trim_end() == "{" {
            if let Some(n) = cap.take() {
                out.push_str(&format!(".maxnreg {n}\n"));
            }
        }
        out.push_str(line);
    }
    out
}

/// The register cap an entry's name asks for.
fn maxnreg(name: &str) -> Option<u32> {
    let (_, n) = name.rsplit_once(MAXNREG_SUFFIX)?;
    n.parse().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".visible .entry plain(\n\t.param .u32 a\n)\n{\n\tret;\n}\n\
                       .visible .entry capped__maxnreg32(\n\t.param .u32 a\n)\n{\n\tret;\n}\n\
                       .visible .entry odd__maxnregx(\n)\n{\n}\n";

    #[test]
    fn only_entries_named_for_a_cap_get_one_before_their_body() {
        let out = apply(PTX);
        assert_eq!(out.matches(".maxnreg").count(), 1, "{out}");
        assert!(
            out.contains("capped__maxnreg32(\n\t.param .u32 a\n)\n.maxnreg 32\n{\n"),
            "{out}"
        );
        assert!(out.contains("plain(\n\t.param .u32 a\n)\n{\n"), "{out}");
        assert_eq!(apply(&out.replace(".maxnreg 32\n", "")), out);
    }
}
