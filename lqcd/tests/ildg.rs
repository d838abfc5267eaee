//! ILDG/LIME gauge files: round trips, the byte layout checked by hand, checksums, and every kind
//! of bad file.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use lattice_gpu_lqcd::ildg::{
    crc32, list_lime_records, read_ildg, read_lime_records, write_ildg, write_ildg_with_lfn,
    write_lime_file, IldgConfig, LimeRecord, Precision, ScidacChecksum,
};
use lattice_gpu_lqcd::{Error, Result};
use num_complex::Complex64;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ----------------------------------------------------------------------------------------------
// Fixtures
// ----------------------------------------------------------------------------------------------

/// A unique directory under the system temp dir, removed with everything in it on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "lqcd-ildg-test-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn volume(dims: [usize; 4]) -> usize {
    dims.iter().product()
}

fn random_links(dims: [usize; 4], seed: u64) -> Vec<Complex64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..volume(dims) * 36)
        .map(|_| Complex64::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)))
        .collect()
}

/// Index of U_mu(x, y, z, t)[a][b] written as ILDG's nested array `[t][z][y][x][mu][a][b]`,
/// independently of the crate's `n = x + X (y + Y (z + Z t))` formula.
fn ildg_index(
    dims: [usize; 4],
    (t, z, y, x, mu, a, b): (usize, usize, usize, usize, usize, usize, usize),
) -> usize {
    let [lx, ly, lz, _] = dims;
    (((((t * lz + z) * ly + y) * lx + x) * 4 + mu) * 3 + a) * 3 + b
}

/// A record header parsed by hand from raw bytes (not with the crate's reader).
#[derive(Debug)]
struct RawRecord {
    kind: String,
    flags: u16,
    header_at: usize,
    data_at: usize,
    len: usize,
}

fn raw_records(bytes: &[u8]) -> Vec<RawRecord> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let h = &bytes[pos..pos + 144];
        assert_eq!(&h[0..4], &[0x45, 0x67, 0x89, 0xab], "magic at {pos}");
        assert_eq!(&h[4..6], &[0x00, 0x01], "version at {pos}");
        let flags = u16::from_be_bytes([h[6], h[7]]);
        let len = u64::from_be_bytes(h[8..16].try_into().unwrap()) as usize;
        let tend = h[16..].iter().position(|&c| c == 0).unwrap();
        assert!(h[16 + tend..].iter().all(|&c| c == 0), "type NUL-padded");
        let kind = String::from_utf8(h[16..16 + tend].to_vec()).unwrap();
        let data_at = pos + 144;
        let padded = len.div_ceil(8) * 8;
        assert!(
            bytes[data_at + len..data_at + padded]
                .iter()
                .all(|&c| c == 0),
            "zero padding"
        );
        out.push(RawRecord {
            kind,
            flags,
            header_at: pos,
            data_at,
            len,
        });
        pos = data_at + padded;
    }
    assert_eq!(
        pos,
        bytes.len(),
        "records end exactly at the end of the file"
    );
    out
}

/// Bit-by-bit CRC-32 and the QIO rotation, written out independently of the crate's.
// The shifts are spelled as QIO's DML_checksum_accum writes them, to check `rotate_left` against.
#[allow(clippy::manual_rotate)]
fn reference_checksum(data: &[u8], site_len: usize) -> (u32, u32) {
    let (mut a, mut b) = (0u32, 0u32);
    for (rank, site) in data.chunks(site_len).enumerate() {
        let mut c = 0xffff_ffffu32;
        for &byte in site {
            c ^= byte as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0xedb8_8320
                } else {
                    c >> 1
                };
            }
        }
        let w = !c;
        let (r29, r31) = ((rank % 29) as u32, (rank % 31) as u32);
        a ^= if r29 == 0 {
            w
        } else {
            (w << r29) | (w >> (32 - r29))
        };
        b ^= if r31 == 0 {
            w
        } else {
            (w << r31) | (w >> (32 - r31))
        };
    }
    (a, b)
}

fn expect_gauge_error<T: std::fmt::Debug>(r: Result<T>, words: &[&str]) -> String {
    match r {
        Err(Error::GaugeFile { problem, .. }) => {
            let lower = problem.to_lowercase();
            for w in words {
                assert!(
                    lower.contains(&w.to_lowercase()),
                    "error {problem:?} should mention {w:?}"
                );
            }
            problem
        }
        Err(other) => panic!("expected Error::GaugeFile mentioning {words:?}, got {other:?}"),
        Ok(v) => panic!("expected Error::GaugeFile mentioning {words:?}, got Ok({v:?})"),
    }
}

/// Rewrites the file's ildg-format record through `edit`, keeping all other records.
fn edit_format(path: &Path, edit: impl Fn(&str) -> String) {
    let records = read_lime_records(path).unwrap();
    let records: Vec<LimeRecord> = records
        .into_iter()
        .map(|mut r| {
            if r.kind == "ildg-format" {
                r.data = edit(std::str::from_utf8(&r.data).unwrap()).into_bytes();
            }
            r
        })
        .collect();
    write_lime_file(path, &records).unwrap();
}

fn assert_bit_exact(a: &[Complex64], b: &[Complex64]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(
            (x.re.to_bits(), x.im.to_bits()),
            (y.re.to_bits(), y.im.to_bits()),
            "entry {i}: {x} vs {y}"
        );
    }
}

// ----------------------------------------------------------------------------------------------
// CRC and checksum
// ----------------------------------------------------------------------------------------------

#[test]
fn crc32_known_values() {
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    assert_eq!(
        crc32(b"The quick brown fox jumps over the lazy dog"),
        0x414f_a339
    );
}

#[test]
fn scidac_checksum_matches_reference_and_xml_round_trips() {
    let data: Vec<u8> = (0..100 * 24).map(|i: u32| (i * 7 + i / 13) as u8).collect();
    let sum = ScidacChecksum::of_sites(&data, 24);
    assert_eq!((sum.suma, sum.sumb), reference_checksum(&data, 24));
    assert_eq!(ScidacChecksum::from_xml(&sum.to_xml()), Some(sum));
    let c_style =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><scidacChecksum><version>1.0</version>\
                   <suma>0x0000beef</suma><sumb>0X12AB</sumb></scidacChecksum>";
    assert_eq!(
        ScidacChecksum::from_xml(c_style),
        Some(ScidacChecksum {
            suma: 0xbeef,
            sumb: 0x12ab
        })
    );
    assert_eq!(
        ScidacChecksum::from_xml("<suma>zz</suma><sumb>1</sumb>"),
        None
    );
}

// ----------------------------------------------------------------------------------------------
// Round trips
// ----------------------------------------------------------------------------------------------

#[test]
fn round_trip_f64_is_bit_exact() {
    let dir = TempDir::new("rt64");
    let path = dir.file("conf.ildg");
    let dims = [4, 2, 2, 6];
    let mut links = random_links(dims, 1);
    // Values whose bits a sloppy conversion would change.
    links[0] = Complex64::new(-0.0, f64::MIN_POSITIVE / 4.0);
    links[1] = Complex64::new(f64::MAX, -1e-300);
    links[2] = Complex64::new(1.0 + f64::EPSILON, std::f64::consts::PI);
    write_ildg(&path, dims, &links, Precision::F64).unwrap();
    let conf: IldgConfig = read_ildg(&path).unwrap();
    assert_eq!(conf.dims, dims);
    assert_eq!(conf.precision, Precision::F64);
    assert_eq!(conf.volume(), volume(dims));
    assert_bit_exact(&conf.links, &links);

    let bytes = fs::read(&path).unwrap();
    let recs = raw_records(&bytes);
    let bin = recs.iter().find(|r| r.kind == "ildg-binary-data").unwrap();
    let (a, b) = reference_checksum(&bytes[bin.data_at..bin.data_at + bin.len], 36 * 16);
    assert_eq!(conf.checksum, Some(ScidacChecksum { suma: a, sumb: b }));
}

#[test]
fn round_trip_f32_is_exact_for_f32_values() {
    let dir = TempDir::new("rt32");
    let path = dir.file("conf.ildg");
    let dims = [2, 4, 2, 2];
    let mut rng = StdRng::seed_from_u64(2);
    let links: Vec<Complex64> = (0..volume(dims) * 36)
        .map(|_| {
            Complex64::new(
                rng.random_range(-1.0f32..1.0) as f64,
                rng.random_range(-1.0f32..1.0) as f64,
            )
        })
        .collect();
    write_ildg(&path, dims, &links, Precision::F32).unwrap();
    let conf = read_ildg(&path).unwrap();
    assert_eq!(conf.dims, dims);
    assert_eq!(conf.precision, Precision::F32);
    assert_bit_exact(&conf.links, &links);

    let bytes = fs::read(&path).unwrap();
    let recs = raw_records(&bytes);
    let bin = recs.iter().find(|r| r.kind == "ildg-binary-data").unwrap();
    assert_eq!(bin.len, volume(dims) * 36 * 8);
    let (a, b) = reference_checksum(&bytes[bin.data_at..bin.data_at + bin.len], 36 * 8);
    assert_eq!(conf.checksum, Some(ScidacChecksum { suma: a, sumb: b }));
}

#[test]
fn f32_write_rounds_f64_values_to_nearest_f32() {
    let dir = TempDir::new("round");
    let path = dir.file("conf.ildg");
    let dims = [2, 2, 2, 2];
    let links = random_links(dims, 3);
    write_ildg(&path, dims, &links, Precision::F32).unwrap();
    let conf = read_ildg(&path).unwrap();
    for (got, want) in conf.links.iter().zip(&links) {
        assert_eq!(got.re, want.re as f32 as f64);
        assert_eq!(got.im, want.im as f32 as f64);
    }
}

// ----------------------------------------------------------------------------------------------
// Byte layout, checked by hand
// ----------------------------------------------------------------------------------------------

fn check_layout(precision: Precision, re_bytes: &[u8], im_bytes: &[u8]) {
    let dir = TempDir::new("layout");
    let path = dir.file("conf.ildg");
    let dims = [4, 2, 2, 4];
    let (t, z, y, x, mu, a, b) = (2, 1, 0, 3, 2, 1, 2);
    let mut links = vec![Complex64::new(0.0, 0.0); volume(dims) * 36];
    // The crate's convention, links[(4 n + mu) * 9 + 3 a + b], must land on the ILDG position.
    let n = x + dims[0] * (y + dims[1] * (z + dims[2] * t));
    assert_eq!(
        (4 * n + mu) * 9 + 3 * a + b,
        ildg_index(dims, (t, z, y, x, mu, a, b))
    );
    links[(4 * n + mu) * 9 + 3 * a + b] = Complex64::new(1.5, -2.0);
    write_ildg(&path, dims, &links, precision).unwrap();

    let bytes = fs::read(&path).unwrap();
    // First record header, byte by byte.
    assert_eq!(&bytes[0..4], &[0x45, 0x67, 0x89, 0xab]);
    assert_eq!(&bytes[4..6], &[0x00, 0x01]);
    assert_eq!(
        &bytes[6..8],
        &[0x80, 0x00],
        "first record: message-begin only"
    );
    assert_eq!(&bytes[16..28], b"ildg-format\0");
    assert!(bytes[28..144].iter().all(|&c| c == 0));

    let recs = raw_records(&bytes);
    let kinds: Vec<&str> = recs.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["ildg-format", "ildg-binary-data", "scidac-checksum"]
    );
    assert_eq!(recs[0].flags, 0x8000);
    assert_eq!(recs[1].flags, 0x0000);
    assert_eq!(recs[2].flags, 0x4000, "last record: message-end only");
    assert_eq!(recs[1].header_at, 144 + recs[0].len.div_ceil(8) * 8);

    let xml = std::str::from_utf8(&bytes[recs[0].data_at..recs[0].data_at + recs[0].len]).unwrap();
    for part in [
        "<ildgFormat xmlns=\"http://www.lqcd.org/ildg\"",
        "<version>1.0</version>",
        "<field>su3gauge</field>",
        "<lx>4</lx>",
        "<ly>2</ly>",
        "<lz>2</lz>",
        "<lt>4</lt>",
    ] {
        assert!(xml.contains(part), "{xml} lacks {part}");
    }
    let bits = if precision == Precision::F64 { 64 } else { 32 };
    assert!(xml.contains(&format!("<precision>{bits}</precision>")));

    let w = re_bytes.len();
    assert_eq!(recs[1].len, volume(dims) * 36 * 2 * w);
    let at = recs[1].data_at + ildg_index(dims, (t, z, y, x, mu, a, b)) * 2 * w;
    assert_eq!(&bytes[at..at + w], re_bytes, "real part, big-endian");
    assert_eq!(
        &bytes[at + w..at + 2 * w],
        im_bytes,
        "imaginary part, big-endian"
    );
    let data = &bytes[recs[1].data_at..recs[1].data_at + recs[1].len];
    let mut expected = vec![0u8; data.len()];
    let rel = at - recs[1].data_at;
    expected[rel..rel + w].copy_from_slice(re_bytes);
    expected[rel + w..rel + 2 * w].copy_from_slice(im_bytes);
    assert!(
        data == expected.as_slice(),
        "every other byte of the binary record is zero"
    );

    let (sa, sb) = reference_checksum(data, 36 * 2 * w);
    let ck = std::str::from_utf8(&bytes[recs[2].data_at..recs[2].data_at + recs[2].len]).unwrap();
    assert!(ck.contains(&format!("<suma>{sa:x}</suma>")), "{ck}");
    assert!(ck.contains(&format!("<sumb>{sb:x}</sumb>")), "{ck}");
    assert!(
        ck.contains("<scidacChecksum><version>1.0</version>"),
        "{ck}"
    );
}

#[test]
fn byte_layout_f64() {
    check_layout(
        Precision::F64,
        &[0x3f, 0xf8, 0, 0, 0, 0, 0, 0],
        &[0xc0, 0x00, 0, 0, 0, 0, 0, 0],
    );
}

#[test]
fn byte_layout_f32() {
    check_layout(Precision::F32, &[0x3f, 0xc0, 0, 0], &[0xc0, 0x00, 0, 0]);
}

#[test]
fn lfn_record_and_message_flags() {
    let dir = TempDir::new("lfn");
    let path = dir.file("conf.ildg");
    let dims = [2, 2, 2, 2];
    let links = random_links(dims, 4);
    write_ildg_with_lfn(&path, dims, &links, Precision::F64, "lfn://ens/cfg_100").unwrap();
    let infos = list_lime_records(&path).unwrap();
    let kinds: Vec<&str> = infos.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ildg-format",
            "ildg-binary-data",
            "scidac-checksum",
            "ildg-data-lfn"
        ]
    );
    let flags: Vec<(bool, bool)> = infos
        .iter()
        .map(|r| (r.message_begin, r.message_end))
        .collect();
    assert_eq!(
        flags,
        [(true, false), (false, false), (false, false), (false, true)]
    );
    let recs = read_lime_records(&path).unwrap();
    assert_eq!(recs[3].data, b"lfn://ens/cfg_100");
    assert_bit_exact(&read_ildg(&path).unwrap().links, &links);
}

// ----------------------------------------------------------------------------------------------
// Atomic writing
// ----------------------------------------------------------------------------------------------

#[test]
fn write_leaves_no_temporary_files() {
    let dir = TempDir::new("tmp");
    let path = dir.file("conf.ildg");
    let dims = [2, 2, 2, 2];
    write_ildg(&path, dims, &random_links(dims, 5), Precision::F64).unwrap();
    assert_eq!(dir.entries(), ["conf.ildg"]);
    // Overwriting replaces the old file in place.
    let links = random_links(dims, 6);
    write_ildg(&path, dims, &links, Precision::F32).unwrap();
    assert_eq!(dir.entries(), ["conf.ildg"]);
    assert_eq!(read_ildg(&path).unwrap().precision, Precision::F32);
}

#[test]
fn failed_writes_leave_nothing_behind() {
    let dir = TempDir::new("fail");
    let path = dir.file("conf.ildg");
    let dims = [2, 2, 2, 2];
    let short = vec![Complex64::new(0.0, 0.0); volume(dims) * 36 - 1];
    assert!(matches!(
        write_ildg(&path, dims, &short, Precision::F64),
        Err(Error::InvalidParameter(_))
    ));
    let links = random_links(dims, 7);
    assert!(matches!(
        write_ildg(&path, [2, 3, 2, 2], &links, Precision::F64),
        Err(Error::InvalidDims { .. })
    ));
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    let missing = dir.file("no-such-dir").join("conf.ildg");
    let e = write_ildg(&missing, dims, &links, Precision::F64).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Host(_)), "{msg}");
    assert!(
        msg.starts_with("cannot write") && msg.contains("no-such-dir does not exist"),
        "{msg}"
    );
    assert!(dir.entries().is_empty(), "{:?}", dir.entries());
}

// ----------------------------------------------------------------------------------------------
// Bad files
// ----------------------------------------------------------------------------------------------

fn valid_file(dir: &TempDir, name: &str, precision: Precision) -> (PathBuf, Vec<u8>) {
    let path = dir.file(name);
    let dims = [2, 2, 2, 4];
    write_ildg(&path, dims, &random_links(dims, 8), precision).unwrap();
    let bytes = fs::read(&path).unwrap();
    (path, bytes)
}

#[test]
fn checksum_detects_a_flipped_byte() {
    let dir = TempDir::new("flip");
    for precision in [Precision::F64, Precision::F32] {
        let (path, mut bytes) = valid_file(&dir, "conf.ildg", precision);
        let stored = read_ildg(&path).unwrap().checksum.unwrap();
        let bin = raw_records(&bytes)
            .into_iter()
            .find(|r| r.kind == "ildg-binary-data")
            .unwrap();
        bytes[bin.data_at + bin.len / 2 + 3] ^= 0x10;
        fs::write(&path, &bytes).unwrap();
        let problem = expect_gauge_error(read_ildg(&path), &["checksum mismatch"]);
        assert!(
            problem.contains(&stored.to_string()),
            "{problem} names the stored sums"
        );
        assert_eq!(
            problem.matches("suma").count(),
            2,
            "{problem} names both checksums"
        );
    }
}

#[test]
fn truncated_files() {
    let dir = TempDir::new("trunc");
    let (path, bytes) = valid_file(&dir, "conf.ildg", Precision::F64);
    let recs = raw_records(&bytes);
    let cuts = [
        100,                               // inside the first header
        150,                               // inside the ildg-format data
        recs[1].header_at + 60,            // inside the binary record's header
        recs[1].data_at + recs[1].len / 2, // inside the binary data
        recs[2].data_at + recs[2].len / 2, // inside the checksum record
    ];
    for cut in cuts {
        fs::write(&path, &bytes[..cut]).unwrap();
        expect_gauge_error(read_ildg(&path), &["truncated"]);
    }
    fs::write(&path, b"").unwrap();
    expect_gauge_error(read_ildg(&path), &["empty"]);
}

#[test]
fn wrong_magic() {
    let dir = TempDir::new("magic");
    let (path, bytes) = valid_file(&dir, "conf.ildg", Precision::F64);

    let mut b = bytes.clone();
    b[0] = 0x12;
    fs::write(&path, &b).unwrap();
    expect_gauge_error(
        read_ildg(&path),
        &["not a LIME file", "magic", "0x456789ab"],
    );

    let mut b = bytes.clone();
    b[0..4].copy_from_slice(&[0xab, 0x89, 0x67, 0x45]);
    fs::write(&path, &b).unwrap();
    expect_gauge_error(read_ildg(&path), &["byte-swapped"]);

    let mut b = bytes.clone();
    let second = raw_records(&bytes)[1].header_at;
    b[second + 2] ^= 0xff;
    fs::write(&path, &b).unwrap();
    expect_gauge_error(read_ildg(&path), &["magic", "record 1", "corrupt"]);

    fs::write(
        &path,
        "This is a text file, not a gauge configuration.\n".repeat(10),
    )
    .unwrap();
    expect_gauge_error(read_ildg(&path), &["not a LIME file"]);

    let missing = dir.file("absent.ildg");
    assert!(matches!(read_ildg(&missing), Err(Error::Io { .. })));
}

#[test]
fn missing_records() {
    let dir = TempDir::new("missing");
    let (path, _) = valid_file(&dir, "conf.ildg", Precision::F64);
    let records = read_lime_records(&path).unwrap();
    let only = |kinds: &[&str]| -> Vec<LimeRecord> {
        records
            .iter()
            .filter(|r| kinds.contains(&r.kind.as_str()))
            .cloned()
            .collect()
    };

    write_lime_file(&path, &only(&["ildg-format", "scidac-checksum"])).unwrap();
    expect_gauge_error(read_ildg(&path), &["no ildg-binary-data record"]);

    write_lime_file(&path, &only(&["ildg-binary-data", "scidac-checksum"])).unwrap();
    expect_gauge_error(
        read_ildg(&path),
        &["no ildg-format record", "scidac-checksum"],
    );

    // Without a checksum record the file is still a valid ILDG configuration.
    write_lime_file(&path, &only(&["ildg-format", "ildg-binary-data"])).unwrap();
    assert_eq!(read_ildg(&path).unwrap().checksum, None);
}

#[test]
fn dims_not_matching_the_data() {
    let dir = TempDir::new("dims");
    let (path, _) = valid_file(&dir, "conf.ildg", Precision::F64);
    edit_format(&path, |x| x.replace("<lt>4</lt>", "<lt>6</lt>"));
    expect_gauge_error(read_ildg(&path), &["do not match", "[2, 2, 2, 6]", "18432"]);

    // The same dims read as the wrong precision also cannot match the data length.
    let (path, _) = valid_file(&dir, "conf2.ildg", Precision::F64);
    edit_format(&path, |x| {
        x.replace("<precision>64</precision>", "<precision>32</precision>")
    });
    expect_gauge_error(read_ildg(&path), &["do not match"]);
}

#[test]
fn odd_dims() {
    let dir = TempDir::new("odd");
    let (path, _) = valid_file(&dir, "conf.ildg", Precision::F64);
    edit_format(&path, |x| x.replace("<lx>2</lx>", "<lx>3</lx>"));
    expect_gauge_error(read_ildg(&path), &["odd", "even"]);
}

#[test]
fn unsupported_precision_and_field() {
    let dir = TempDir::new("prec");
    let (path, _) = valid_file(&dir, "conf.ildg", Precision::F64);
    edit_format(&path, |x| {
        x.replace("<precision>64</precision>", "<precision>16</precision>")
    });
    expect_gauge_error(read_ildg(&path), &["unsupported", "precision", "16"]);

    let (path, _) = valid_file(&dir, "conf2.ildg", Precision::F64);
    edit_format(&path, |x| x.replace("su3gauge", "u1gauge"));
    expect_gauge_error(read_ildg(&path), &["unsupported", "field", "u1gauge"]);

    let (path, _) = valid_file(&dir, "conf3.ildg", Precision::F64);
    edit_format(&path, |x| x.replace("<lz>2</lz>", ""));
    expect_gauge_error(read_ildg(&path), &["<lz>"]);
}

#[test]
fn tolerant_xml_parsing() {
    let dir = TempDir::new("tolerant");
    let (path, _) = valid_file(&dir, "conf.ildg", Precision::F32);
    let want = read_ildg(&path).unwrap();
    let records = read_lime_records(&path).unwrap();
    let format = "<?xml version=\"1.0\"?>\n<ildg:ildgFormat xmlns:ildg=\"http://www.lqcd.org/ildg\">\n  \
                  <ildg:version> 1.0 </ildg:version>\n  <ildg:field> su3gauge </ildg:field>\n  \
                  <ildg:precision>\n32\n</ildg:precision>\n  <ildg:lx> 2 </ildg:lx> <ildg:ly>2</ildg:ly>\n  \
                  <ildg:lz>2</ildg:lz>\t<ildg:lt>4</ildg:lt>\n</ildg:ildgFormat>\n\0";
    let ck = want.checksum.unwrap();
    let checksum = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><scidacChecksum><version>1.0</version>\
         <suma>{:#010x}</suma><sumb>{:#010x}</sumb></scidacChecksum>",
        ck.suma, ck.sumb
    );
    let binary = records
        .iter()
        .find(|r| r.kind == "ildg-binary-data")
        .unwrap()
        .clone();
    let rebuilt = [
        LimeRecord {
            kind: "scidac-private-file-xml".into(),
            data: b"<scidacFile/>".to_vec(),
        },
        binary,
        LimeRecord {
            kind: "scidac-checksum".into(),
            data: checksum.into_bytes(),
        },
        LimeRecord {
            kind: "ildg-format".into(),
            data: format.as_bytes().to_vec(),
        },
    ];
    write_lime_file(&path, &rebuilt).unwrap();
    assert_eq!(read_ildg(&path).unwrap(), want);
}

#[test]
fn absurd_sizes_are_refused_without_allocating() {
    let dir = TempDir::new("absurd");
    let (path, bytes) = valid_file(&dir, "conf.ildg", Precision::F64);

    // A header announcing 2^64 - 1 data bytes.
    let mut b = bytes.clone();
    b[8..16].copy_from_slice(&[0xff; 8]);
    fs::write(&path, &b).unwrap();
    expect_gauge_error(read_ildg(&path), &["truncated"]);

    // Extents whose volume would need terabytes, with a small binary record.
    edit_format_bytes(&path, &bytes, |x| {
        x.replace("<lx>2</lx>", "<lx>1048576</lx>")
            .replace("<ly>2</ly>", "<ly>1048576</ly>")
    });
    expect_gauge_error(read_ildg(&path), &["do not match"]);

    // Extents whose volume overflows 64 bits.
    edit_format_bytes(&path, &bytes, |x| {
        x.replace("<lx>2</lx>", "<lx>4294967296</lx>")
            .replace("<ly>2</ly>", "<ly>4294967296</ly>")
    });
    expect_gauge_error(
        read_ildg(&path),
        &["do not match", "more bytes than any file"],
    );

    // An extent that is not a number at all.
    edit_format_bytes(&path, &bytes, |x| {
        x.replace("<lt>4</lt>", "<lt>99999999999999999999999</lt>")
    });
    expect_gauge_error(read_ildg(&path), &["<lt>", "positive integer"]);
}

fn edit_format_bytes(path: &Path, original: &[u8], edit: impl Fn(&str) -> String) {
    fs::write(path, original).unwrap();
    edit_format(path, edit);
}

#[test]
fn corrupted_files_never_panic() {
    let dir = TempDir::new("fuzz");
    let path = dir.file("conf.ildg");
    let dims = [2, 2, 2, 2];
    write_ildg(&path, dims, &random_links(dims, 9), Precision::F32).unwrap();
    let bytes = fs::read(&path).unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    let mut ok = 0;
    let mut errors = 0;
    // Every truncation.
    for cut in 0..bytes.len() {
        fs::write(&path, &bytes[..cut]).unwrap();
        match read_ildg(&path) {
            Ok(_) => ok += 1,
            Err(_) => errors += 1,
        }
    }
    // Random byte corruptions, concentrated on the headers and XML where parsing happens.
    let header_zone = raw_records(&bytes)[1].data_at;
    for i in 0..3000 {
        let mut b = bytes.clone();
        let hits = 1 + i % 4;
        for _ in 0..hits {
            let at = if i % 3 == 0 {
                rng.random_range(0..bytes.len())
            } else {
                rng.random_range(0..header_zone)
            };
            b[at] = rng.random();
        }
        fs::write(&path, &b).unwrap();
        match read_ildg(&path) {
            Ok(_) => ok += 1,
            Err(Error::GaugeFile { .. }) => errors += 1,
            Err(other) => panic!("corruption gave a non-GaugeFile error: {other:?}"),
        }
    }
    assert!(errors > 0 && ok > 0, "ok {ok}, errors {errors}");
}

#[test]
fn paths_that_are_no_regular_files_are_named_not_read() {
    let dir = TempDir::new("not-regular");
    let fifo = dir.file("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Opening the pipe for reading would wait for a writer for ever: the test would hang.
    for (path, what) in [
        (Path::new("/dev/zero"), "a device"),
        (dir.0.as_path(), "a directory"),
        (fifo.as_path(), "a pipe"),
    ] {
        let problem = expect_gauge_error(read_ildg(path), &[what, "not a regular file"]);
        assert!(!problem.contains("empty"), "{problem}");
        expect_gauge_error(list_lime_records(path), &[what, "not a regular file"]);
    }
}

#[test]
fn a_field_written_site_by_site_is_the_field_written_whole() {
    let dir = TempDir::new("sites");
    let dims = [2, 2, 2, 4];
    let links = random_links(dims, 17);
    let (whole, sites) = (dir.file("whole.ildg"), dir.file("sites.ildg"));
    write_ildg(&whole, dims, &links, Precision::F64).unwrap();
    lattice_gpu_lqcd::ildg::write_ildg_sites(&sites, dims, Precision::F64, |n, out| {
        out.copy_from_slice(&links[36 * n..36 * (n + 1)])
    })
    .unwrap();
    assert_eq!(fs::read(&whole).unwrap(), fs::read(&sites).unwrap());
    // And read back site by site, in order, checksum verified.
    let reader = lattice_gpu_lqcd::ildg::IldgReader::open(&sites).unwrap();
    assert_eq!((reader.dims, reader.volume()), (dims, 32));
    let mut got = Vec::new();
    let checksum = reader
        .read_sites(|n, site| {
            assert_eq!(got.len(), 36 * n as usize);
            got.extend_from_slice(site);
            Ok(())
        })
        .unwrap();
    assert!(checksum.is_some());
    assert_bit_exact(&got, &links);
}
