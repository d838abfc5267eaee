//! CSV tables of results (benchmark rows, profiles), written atomically. Hand-written: a header and
//! rows of numbers need no quoting, which is all the `csv` crate would add.

use std::io::Write;
use std::path::Path;

use crate::{write_atomically, IoError};

/// Writes a CSV file: a header line, then one line per row, values joined by commas.
pub fn write_csv(path: &Path, header: &str, rows: &[Vec<String>]) -> Result<(), IoError> {
    write_atomically(path, |w: &mut dyn Write| {
        writeln!(w, "{header}")?;
        for r in rows {
            writeln!(w, "{}", r.join(","))?;
        }
        Ok(())
    })
}

/// Numbers as CSV fields, with enough digits to read them back as f64 would round them for plots.
pub fn numbers(values: &[f64]) -> Vec<String> {
    values.iter().map(|v| format!("{v:.9e}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_as_written() {
        let dir = std::env::temp_dir().join(format!("lattice-gpu-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        let rows = vec![numbers(&[1.0, -0.1]), vec!["a".into(), "3".into()]];
        write_csv(&path, "x,y", &rows).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text, "x,y\n1.000000000e0,-1.000000000e-1\na,3\n");
        let back: f64 = text
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(back, -0.1);
    }
}
