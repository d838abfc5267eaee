//! The `scaling-plot` binary: a table of scripts/scaling-check.sh becomes a PNG beside it (or at
//! `--output`); a missing file or a corrupt table ends in a message naming the file and line, exit
//! code 1 and no picture, never a panic.

use std::fs;

use lattice_gpu_testkit as common;

fn scaling_plot(args: &[&str]) -> (bool, String) {
    common::run_cli(
        "LATTICE_GPU_SCALING_PLOT_BIN",
        env!("CARGO_BIN_EXE_scaling-plot"),
        args,
    )
}

const TABLE: &str = "\
run,gpus,rate,unit,efficiency_percent
diffusion,1,95.2,GLUPS,100.0
diffusion,2,180.1,GLUPS,94.6
lqcd-32x32x32x64-sync,1,600.0,GFLOPS,100.0
lqcd-32x32x32x64-sync,2,1000.0,GFLOPS,83.3
";

#[test]
fn table_becomes_a_png() {
    let dir = common::temp_dir("scaling-plot-ok");
    let csv = dir.join("scaling.csv");
    fs::write(&csv, TABLE).unwrap();
    let (ok, text) = scaling_plot(&[csv.to_str().unwrap()]);
    assert!(ok, "{text}");
    let png = dir.join("scaling.png");
    assert!(text.contains(png.to_str().unwrap()), "{text}");
    assert!(fs::read(&png).unwrap().starts_with(b"\x89PNG\r\n\x1a\n"));

    let other = dir.join("other.png");
    let (ok, text) = scaling_plot(&[csv.to_str().unwrap(), "--output", other.to_str().unwrap()]);
    assert!(ok && other.is_file(), "{text}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_a_message_not_a_picture() {
    let dir = common::temp_dir("scaling-plot-bad");
    let csv = dir.join("scaling.csv");
    let (ok, text) = scaling_plot(&[csv.to_str().unwrap()]);
    assert!(
        !ok && text.contains("cannot read") && text.contains("scaling.csv"),
        "{text}"
    );

    fs::write(&csv, TABLE.replace("180.1", "n/a")).unwrap();
    let (ok, text) = scaling_plot(&[csv.to_str().unwrap()]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("scaling.csv:3: the rate `n/a` is not a number"),
        "{text}"
    );
    assert!(!dir.join("scaling.png").exists());

    let (ok, text) = scaling_plot(&[]);
    assert!(!ok && text.contains("<CSV>"), "{text}");
    fs::remove_dir_all(&dir).unwrap();
}
