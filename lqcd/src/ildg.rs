//! ILDG gauge configurations in LIME containers, readable and writable by the community codes
//! (USQCD QIO/Chroma, Grid, tmLQCD, MILC).
//!
//! A LIME file is a sequence of records, each a 144-byte big-endian header (magic `0x456789ab`,
//! version 1, message-begin/-end flags, data length, 128-byte NUL-padded type string) followed by
//! the data, zero-padded to a multiple of 8 bytes. An ILDG configuration carries an `ildg-format`
//! XML record (field, precision, extents), the `ildg-binary-data` record (big-endian IEEE reals,
//! links in the order `[t][z][y][x][mu][a][b]`, re before im) and usually a `scidac-checksum`
//! record and an `ildg-data-lfn` record.
//!
//! The functions here work on raw link data in exactly that order (it is also the crate's own
//! order, see the crate docs), so they need nothing from the gauge-field type.
//!
//! Reading never trusts the file: every length is checked against the file's real size before
//! anything is allocated, and every problem comes back as [`Error::GaugeFile`] naming it.
//!
//! Written by hand because no Rust crate reads or writes LIME or ILDG (the reference is USQCD's C
//! library, c-lime); the format is small and fixed.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use lattice_gpu_formats::write_atomically;
use num_complex::Complex64;

use crate::error::{Error, Result};

/// The magic number that starts every LIME record header.
pub const LIME_MAGIC: u32 = 0x456789ab;
/// The LIME format version this module writes.
pub const LIME_VERSION: u16 = 1;
/// Bytes in a LIME record header.
pub const LIME_HEADER_LEN: usize = 144;
/// Bytes of the NUL-padded record-type field in a LIME header.
pub const LIME_TYPE_LEN: usize = 128;

const FLAG_MESSAGE_BEGIN: u16 = 1 << 15;
const FLAG_MESSAGE_END: u16 = 1 << 14;

/// Complex numbers per site: 4 directions times a 3x3 matrix.
const COMPLEX_PER_SITE: usize = 4 * 9;

/// XML records of real ILDG files are a few hundred bytes; a larger one means a damaged file,
/// and capping it keeps a lying header from making us allocate gigabytes.
const MAX_XML_RECORD: u64 = 1 << 20;

/// Buffer size for streaming the binary record; large enough that syscalls do not dominate.
const IO_BUFFER: usize = 1 << 20;

/// Floating-point precision of the binary data (ILDG's `<precision>` 32 or 64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE single precision, ILDG precision 32.
    F32,
    /// IEEE double precision, ILDG precision 64.
    F64,
}

impl Precision {
    /// The ILDG precision value: 32 or 64.
    pub fn bits(self) -> u32 {
        match self {
            Precision::F32 => 32,
            Precision::F64 => 64,
        }
    }

    /// Bytes per real number in the binary record.
    pub fn bytes_per_real(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }

    /// The precision for an ILDG precision value, `None` unless it is 32 or 64.
    pub fn from_bits(bits: u32) -> Option<Self> {
        match bits {
            32 => Some(Precision::F32),
            64 => Some(Precision::F64),
            _ => None,
        }
    }
}

/// A gauge configuration read from an ILDG file, links in ILDG order `[t][z][y][x][mu][a][b]`.
#[derive(Debug, Clone, PartialEq)]
pub struct IldgConfig {
    /// Lattice extents `[X, Y, Z, T]` from the `ildg-format` record.
    pub dims: [usize; 4],
    /// Precision the file stores the links in.
    pub precision: Precision,
    /// `V * 4 * 9` link entries, `links[(4 * n + mu) * 9 + 3 * a + b]`.
    pub links: Vec<Complex64>,
    /// The file's SciDAC checksum (already verified against the data), if it has one.
    pub checksum: Option<ScidacChecksum>,
}

impl IldgConfig {
    /// Number of lattice sites `X * Y * Z * T`.
    pub fn volume(&self) -> usize {
        self.dims.iter().product()
    }
}

// ---------------------------------------------------------------------------------------------
// CRC32
// ---------------------------------------------------------------------------------------------

/// Slicing-by-8 tables for the reflected IEEE polynomial `0xedb88320`; table 0 is the classic
/// zlib byte table, the others let the loop consume eight bytes per step (checksumming a big
/// configuration byte-by-byte would cost more than writing it).
const CRC_TABLES: [[u32; 256]; 8] = make_crc_tables();

const fn make_crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

/// CRC-32 (IEEE 802.3, as zlib's `crc32(0, buf, len)` and QIO's `DML_crc32`) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0, bytes)
}

/// Continues a CRC-32 over more bytes: `crc32_update(crc32(a), b) == crc32(a ++ b)`, like zlib.
pub fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut c = !crc;
    let mut chunks = bytes.chunks_exact(8);
    for ch in &mut chunks {
        let lo = c ^ u32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]);
        let hi = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

// ---------------------------------------------------------------------------------------------
// SciDAC checksum
// ---------------------------------------------------------------------------------------------

/// The SciDAC checksum pair of a lattice field, as USQCD QIO's `DML_checksum_accum` computes it.
///
/// Per site: `w = crc32(site bytes as stored in the file)`; `suma ^= w.rotate_left(rank % 29)`,
/// `sumb ^= w.rotate_left(rank % 31)`, with `rank` the lexicographic site index
/// `x + X * (y + Y * (z + Z * t))`. The sum is order-independent so parallel writers can combine
/// partial sums with XOR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ScidacChecksum {
    /// XOR of the site CRCs rotated by `rank % 29`.
    pub suma: u32,
    /// XOR of the site CRCs rotated by `rank % 31`.
    pub sumb: u32,
}

impl ScidacChecksum {
    /// Adds one site's bytes (as written in the file) at lexicographic site index `rank`.
    pub fn accumulate(&mut self, rank: u64, site_bytes: &[u8]) {
        let w = crc32(site_bytes);
        // QIO writes `w << r | w >> (32 - r)`, a rotation; for r = 0 that C shift is by 32,
        // which x86 treats as a shift by 0, so it is still `w` -- `rotate_left(0)` agrees.
        self.suma ^= w.rotate_left((rank % 29) as u32);
        self.sumb ^= w.rotate_left((rank % 31) as u32);
    }

    /// The checksum of a whole field stored site after site, `site_len` bytes per site.
    pub fn of_sites(data: &[u8], site_len: usize) -> Self {
        let mut sum = Self::default();
        if site_len == 0 {
            return sum;
        }
        for (rank, site) in data.chunks(site_len).enumerate() {
            sum.accumulate(rank as u64, site);
        }
        sum
    }

    /// The `scidac-checksum` record text, in the form QIO, Grid and tmLQCD write.
    pub fn to_xml(&self) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><scidacChecksum><version>1.0</version>\
             <suma>{:x}</suma><sumb>{:x}</sumb></scidacChecksum>",
            self.suma, self.sumb
        )
    }

    /// Parses a `scidac-checksum` record (hex with or without `0x`, any whitespace or prefix).
    pub fn from_xml(xml: &str) -> Option<Self> {
        Some(Self {
            suma: parse_hex_u32(xml_text(xml, "suma")?)?,
            sumb: parse_hex_u32(xml_text(xml, "sumb")?)?,
        })
    }
}

impl std::fmt::Display for ScidacChecksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "suma {:08x} sumb {:08x}", self.suma, self.sumb)
    }
}

fn parse_hex_u32(s: &str) -> Option<u32> {
    let s = s.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    // from_str_radix would accept a sign, which no checksum writer produces.
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

// ---------------------------------------------------------------------------------------------
// LIME
// ---------------------------------------------------------------------------------------------

/// One LIME record held in memory: its type string and its data (without padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimeRecord {
    /// The record type, e.g. `ildg-format`.
    pub kind: String,
    /// The record's data bytes.
    pub data: Vec<u8>,
}

/// Where one LIME record lies in a file, as found by walking the headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimeRecordInfo {
    /// The record type, e.g. `ildg-binary-data`.
    pub kind: String,
    /// Byte offset of the record's header in the file.
    pub header_offset: u64,
    /// Byte offset of the record's data in the file.
    pub data_offset: u64,
    /// Length of the data in bytes, without padding.
    pub data_len: u64,
    /// The header's message-begin flag.
    pub message_begin: bool,
    /// The header's message-end flag.
    pub message_end: bool,
}

fn padding(len: u64) -> u64 {
    (8 - len % 8) % 8
}

fn lime_header(
    kind: &str,
    data_len: u64,
    message_begin: bool,
    message_end: bool,
) -> io::Result<[u8; LIME_HEADER_LEN]> {
    // c-lime forces a NUL after at most 127 type bytes, so a longer type would be cut there.
    if kind.len() >= LIME_TYPE_LEN || kind.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("LIME record type {kind:?} must be at most 127 bytes without NULs"),
        ));
    }
    let mut h = [0u8; LIME_HEADER_LEN];
    h[0..4].copy_from_slice(&LIME_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&LIME_VERSION.to_be_bytes());
    let mut flags = 0u16;
    if message_begin {
        flags |= FLAG_MESSAGE_BEGIN;
    }
    if message_end {
        flags |= FLAG_MESSAGE_END;
    }
    h[6..8].copy_from_slice(&flags.to_be_bytes());
    h[8..16].copy_from_slice(&data_len.to_be_bytes());
    h[16..16 + kind.len()].copy_from_slice(kind.as_bytes());
    Ok(h)
}

/// Writes one LIME record (header, data, zero padding to 8 bytes) to `w`.
pub fn write_lime_record<W: Write + ?Sized>(
    w: &mut W,
    kind: &str,
    data: &[u8],
    message_begin: bool,
    message_end: bool,
) -> io::Result<()> {
    w.write_all(&lime_header(
        kind,
        data.len() as u64,
        message_begin,
        message_end,
    )?)?;
    w.write_all(data)?;
    w.write_all(&[0u8; 8][..padding(data.len() as u64) as usize])
}

/// Writes `records` as one LIME message to `path`, atomically (temporary file, then rename).
pub fn write_lime_file(path: &Path, records: &[LimeRecord]) -> Result<()> {
    Ok(write_atomically(path, |w| {
        let last = records.len().saturating_sub(1);
        for (i, r) in records.iter().enumerate() {
            write_lime_record(w, &r.kind, &r.data, i == 0, i == last)?;
        }
        Ok(())
    })?)
}

/// Lists the records of a LIME file (type, offsets, lengths, flags) without reading their data.
pub fn list_lime_records(path: &Path) -> Result<Vec<LimeRecordInfo>> {
    let (mut file, len) = open_for_read(path)?;
    walk_lime(path, &mut file, len)
}

/// Reads every record of a LIME file into memory; meant for small files and inspection.
pub fn read_lime_records(path: &Path) -> Result<Vec<LimeRecord>> {
    let (mut file, len) = open_for_read(path)?;
    let infos = walk_lime(path, &mut file, len)?;
    infos
        .into_iter()
        .map(|info| {
            // walk_lime proved data_offset + data_len <= len, so this allocation is backed by the file.
            let n = usize::try_from(info.data_len).map_err(|_| {
                bad(
                    path,
                    format!(
                        "record '{}' is too large for this machine's memory",
                        info.kind
                    ),
                )
            })?;
            let mut data = vec![0u8; n];
            file.seek(SeekFrom::Start(info.data_offset))
                .and_then(|_| file.read_exact(&mut data))
                .map_err(io_err(path))?;
            Ok(LimeRecord {
                kind: info.kind,
                data,
            })
        })
        .collect()
}

/// Opens a file to read as LIME, refusing what is not a regular file by name: a pipe would block the
/// open until some writer came, a device such as /dev/zero has no length (it would be called empty)
/// and a directory cannot be read at all.
fn open_for_read(path: &Path) -> Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    not_regular(path, &meta)?;
    let file = File::open(path).map_err(io_err(path))?;
    // The path may have been replaced between the two looks; what was opened is what counts.
    let meta = file.metadata().map_err(io_err(path))?;
    not_regular(path, &meta)?;
    Ok((file, meta.len()))
}

/// The refusal of a path that is not a regular file, naming what it is.
fn not_regular(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    Err(bad(
        path,
        format!(
            "this is {}, not a regular file, so it holds no gauge configuration; give the path \
             of an ILDG/LIME file",
            kind_of(meta)
        ),
    ))
}

/// What a path that is not a regular file is, for messages.
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a pipe (FIFO)";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "something other than a file"
    }
}

/// Walks the record headers of a LIME file of `len` bytes; every record's data is checked to lie
/// inside the file, so later reads of it cannot run past the end or allocate more than the file.
fn walk_lime(path: &Path, file: &mut File, len: u64) -> Result<Vec<LimeRecordInfo>> {
    if len == 0 {
        return Err(bad(
            path,
            "the file is empty, not an ILDG/LIME gauge configuration; check the path, or \
             re-copy the file if the copy failed",
        ));
    }
    let mut records: Vec<LimeRecordInfo> = Vec::new();
    let mut pos = 0u64;
    file.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    let mut reader = BufReader::new(file);
    while pos < len {
        let left = len - pos;
        if left < LIME_HEADER_LEN as u64 {
            if pos == 0 {
                return Err(bad(
                    path,
                    format!(
                        "only {len} bytes, fewer than one 144-byte LIME record header: not a \
                         LIME file, or one truncated to almost nothing; check the path, or \
                         re-copy the file"
                    ),
                ));
            }
            return Err(bad(
                path,
                format!(
                    "truncated LIME record header at byte {pos}: only {left} of its 144 bytes are \
                     present, so the file was cut short (incomplete copy or interrupted write); \
                     re-copy or regenerate it"
                ),
            ));
        }
        let mut h = [0u8; LIME_HEADER_LEN];
        reader.seek(SeekFrom::Start(pos)).map_err(io_err(path))?;
        reader.read_exact(&mut h).map_err(io_err(path))?;
        let magic = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if magic != LIME_MAGIC {
            let hint = if magic == LIME_MAGIC.swap_bytes() {
                " (it is the LIME magic byte-swapped: the file was written little-endian, \
                 which LIME does not allow; rewrite it with a conforming LIME writer)"
            } else {
                ""
            };
            return Err(bad(
                path,
                if pos == 0 {
                    format!(
                        "not a LIME file: bad magic number 0x{magic:08x} at byte 0, expected \
                         0x{LIME_MAGIC:08x}{hint}; ILDG gauge configurations are LIME files -- \
                         check that this is an ILDG file and not a MILC, NERSC or openQCD one"
                    )
                } else {
                    format!(
                        "bad LIME magic number 0x{magic:08x} in the header of record {} at byte \
                         {pos}, expected 0x{LIME_MAGIC:08x}{hint}; the file is corrupt (or the \
                         previous record's length is wrong) -- re-copy or regenerate it",
                        records.len()
                    )
                },
            ));
        }
        let flags = u16::from_be_bytes([h[6], h[7]]);
        let data_len = u64::from_be_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        let type_bytes = &h[16..];
        let type_end = type_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(type_bytes.len());
        let kind = String::from_utf8_lossy(&type_bytes[..type_end]).into_owned();
        let data_offset = pos + LIME_HEADER_LEN as u64;
        let available = len - data_offset;
        if data_len > available {
            return Err(bad(
                path,
                format!(
                    "truncated LIME record '{kind}' at byte {pos}: its header announces {data_len} \
                     data bytes but only {available} remain in the file, so the file was cut \
                     short (incomplete copy or interrupted write); re-copy or regenerate it"
                ),
            ));
        }
        records.push(LimeRecordInfo {
            kind,
            header_offset: pos,
            data_offset,
            data_len,
            message_begin: flags & FLAG_MESSAGE_BEGIN != 0,
            message_end: flags & FLAG_MESSAGE_END != 0,
        });
        // Some writers omit the last record's padding; tolerate that: the loop simply ends.
        pos = data_offset + data_len + padding(data_len);
    }
    Ok(records)
}

// ---------------------------------------------------------------------------------------------
// ILDG
// ---------------------------------------------------------------------------------------------

/// Writes an ILDG gauge configuration: `links` holds `V * 4 * 9` entries in ILDG order.
///
/// The records are `ildg-format`, `ildg-binary-data` and `scidac-checksum`, one LIME message.
/// The file appears at `path` only when complete (temporary file in the same directory, renamed).
pub fn write_ildg(
    path: &Path,
    dims: [usize; 4],
    links: &[Complex64],
    precision: Precision,
) -> Result<()> {
    write_ildg_impl(path, dims, links, precision, None)
}

/// Like [`write_ildg`], adding an `ildg-data-lfn` record with the ILDG logical file name `lfn`.
pub fn write_ildg_with_lfn(
    path: &Path,
    dims: [usize; 4],
    links: &[Complex64],
    precision: Precision,
    lfn: &str,
) -> Result<()> {
    write_ildg_impl(path, dims, links, precision, Some(lfn))
}

/// The `ildg-format` record text for a configuration of extents `dims` in `precision`.
pub fn ildg_format_xml(dims: [usize; 4], precision: Precision) -> String {
    let [x, y, z, t] = dims;
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ildgFormat xmlns=\"http://www.lqcd.org/ildg\" \
         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
         xsi:schemaLocation=\"http://www.lqcd.org/ildg http://www.lqcd.org/ildg/filefmt.xsd\">\
         <version>1.0</version><field>su3gauge</field><precision>{}</precision>\
         <lx>{x}</lx><ly>{y}</ly><lz>{z}</lz><lt>{t}</lt></ildgFormat>",
        precision.bits()
    )
}

/// Writes an ILDG gauge configuration of extents `dims` site by site: `site(rank, links)` fills the
/// `4 * 9` entries of lexicographic site `rank` (`links[9 * mu + 3 * a + b]`), so a field held in
/// another layout is written without a copy of the whole of it. The records and the atomic write are
/// those of [`write_ildg`].
pub fn write_ildg_sites(
    path: &Path,
    dims: [usize; 4],
    precision: Precision,
    mut site: impl FnMut(usize, &mut [Complex64]),
) -> Result<()> {
    let volume = checked_volume(dims)?;
    write_sites(path, dims, volume, precision, None, &mut site)
}

/// The volume of `dims`, refused where an extent is zero or odd, or the field would not fit in memory.
fn checked_volume(dims: [usize; 4]) -> Result<usize> {
    if let Some(&d) = dims.iter().find(|&&d| d == 0 || d % 2 != 0) {
        return Err(Error::InvalidDims {
            dims,
            why: format!(
                "extent {d} is {}; every extent must be even and nonzero (even-odd ordering)",
                if d == 0 { "zero" } else { "odd" }
            ),
        });
    }
    dims.iter()
        .try_fold(1usize, |v, &d| v.checked_mul(d))
        .filter(|v| v.checked_mul(COMPLEX_PER_SITE * 16).is_some())
        .ok_or_else(|| Error::InvalidDims {
            dims,
            why: "the lattice volume overflows this machine's address space; use smaller extents"
                .into(),
        })
}

fn write_ildg_impl(
    path: &Path,
    dims: [usize; 4],
    links: &[Complex64],
    precision: Precision,
    lfn: Option<&str>,
) -> Result<()> {
    let volume = checked_volume(dims)?;
    if links.len() != volume * COMPLEX_PER_SITE {
        return Err(Error::InvalidParameter(format!(
            "write_ildg: {} link entries given, but dims {dims:?} need V * 4 * 9 = {} \
             (links[(4 * n + mu) * 9 + 3 * a + b]); pass the whole field in ILDG order",
            links.len(),
            volume * COMPLEX_PER_SITE
        )));
    }
    let mut site = |rank: usize, out: &mut [Complex64]| {
        out.copy_from_slice(&links[rank * COMPLEX_PER_SITE..(rank + 1) * COMPLEX_PER_SITE])
    };
    write_sites(path, dims, volume, precision, lfn, &mut site)
}

/// The writer behind [`write_ildg`] and [`write_ildg_sites`]: `volume` sites of `dims`, each filled by
/// `site`.
fn write_sites(
    path: &Path,
    dims: [usize; 4],
    volume: usize,
    precision: Precision,
    lfn: Option<&str>,
    site: &mut dyn FnMut(usize, &mut [Complex64]),
) -> Result<()> {
    let real_bytes = precision.bytes_per_real();
    let site_len = COMPLEX_PER_SITE * 2 * real_bytes;
    let data_len = (volume * site_len) as u64;
    let format_xml = ildg_format_xml(dims, precision);

    Ok(write_atomically(path, |w| {
        write_lime_record(w, "ildg-format", format_xml.as_bytes(), true, false)?;
        w.write_all(&lime_header("ildg-binary-data", data_len, false, false)?)?;
        let mut checksum = ScidacChecksum::default();
        let mut bytes = vec![0u8; site_len];
        let mut links = [Complex64::new(0.0, 0.0); COMPLEX_PER_SITE];
        for rank in 0..volume {
            site(rank, &mut links);
            encode_site(&links, precision, &mut bytes);
            checksum.accumulate(rank as u64, &bytes);
            w.write_all(&bytes)?;
        }
        w.write_all(&[0u8; 8][..padding(data_len) as usize])?;
        write_lime_record(
            w,
            "scidac-checksum",
            checksum.to_xml().as_bytes(),
            false,
            lfn.is_none(),
        )?;
        if let Some(lfn) = lfn {
            write_lime_record(w, "ildg-data-lfn", lfn.as_bytes(), false, true)?;
        }
        Ok(())
    })?)
}

fn encode_site(site_links: &[Complex64], precision: Precision, out: &mut [u8]) {
    match precision {
        Precision::F64 => {
            for (c, b) in site_links.iter().zip(out.chunks_exact_mut(16)) {
                b[..8].copy_from_slice(&c.re.to_be_bytes());
                b[8..].copy_from_slice(&c.im.to_be_bytes());
            }
        }
        Precision::F32 => {
            for (c, b) in site_links.iter().zip(out.chunks_exact_mut(8)) {
                b[..4].copy_from_slice(&(c.re as f32).to_be_bytes());
                b[4..].copy_from_slice(&(c.im as f32).to_be_bytes());
            }
        }
    }
}

fn decode_site(bytes: &[u8], precision: Precision, out: &mut Vec<Complex64>) {
    match precision {
        Precision::F64 => out.extend(bytes.chunks_exact(16).map(|b| {
            let re = f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            let im = f64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
            Complex64::new(re, im)
        })),
        Precision::F32 => out.extend(bytes.chunks_exact(8).map(|b| {
            let re = f32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let im = f32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            Complex64::new(re as f64, im as f64)
        })),
    }
}

/// Reads an ILDG gauge configuration, checking its format record, data length and checksum.
pub fn read_ildg(path: &Path) -> Result<IldgConfig> {
    let reader = IldgReader::open(path)?;
    let (dims, precision) = (reader.dims, reader.precision);
    let n_links = usize::try_from(reader.volume())
        .ok()
        .and_then(|v| v.checked_mul(COMPLEX_PER_SITE))
        .ok_or_else(|| bad(path, "the lattice is too large for this machine's memory"))?;
    // The count equals the binary record's length, which lies within the file: the allocation is
    // bounded by the file's real size.
    let mut links = Vec::new();
    links.try_reserve_exact(n_links).map_err(|_| {
        bad(
            path,
            format!("cannot allocate memory for the {n_links} link entries of {dims:?}"),
        )
    })?;
    let checksum = reader.read_sites(|_, site| {
        links.extend_from_slice(site);
        Ok(())
    })?;
    Ok(IldgConfig {
        dims,
        precision,
        links,
        checksum,
    })
}

/// An ILDG file opened and checked up to its link data: its extents and precision are known, so a
/// caller can size (and refuse) the memory of the configuration before any link is read, and then
/// take the links site by site ([`read_sites`](Self::read_sites)) into its own layout, without a
/// second copy of the whole field.
#[derive(Debug)]
pub struct IldgReader {
    path: std::path::PathBuf,
    file: File,
    binary: LimeRecordInfo,
    stored: Option<ScidacChecksum>,
    /// Lattice extents `[X, Y, Z, T]` from the `ildg-format` record.
    pub dims: [usize; 4],
    /// Precision the file stores the links in.
    pub precision: Precision,
}

impl IldgReader {
    /// Opens `path`: walks its LIME records, reads the format and checksum records, and checks that
    /// the binary record holds exactly the links the format announces.
    pub fn open(path: &Path) -> Result<Self> {
        let (mut file, len) = open_for_read(path)?;
        let records = walk_lime(path, &mut file, len)?;
        let kinds = || {
            records
                .iter()
                .map(|r| r.kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let find = |kind: &str| records.iter().find(|r| r.kind == kind);

        let format = find("ildg-format").ok_or_else(|| {
            bad(
                path,
                format!(
                    "no ildg-format record (records present: [{}]); this LIME file is not an ILDG \
                     gauge configuration (a SciDAC propagator or another field?) -- an ILDG file \
                     needs ildg-format and ildg-binary-data records",
                    kinds()
                ),
            )
        })?;
        let binary = find("ildg-binary-data").ok_or_else(|| {
            bad(
                path,
                format!(
                    "no ildg-binary-data record (records present: [{}]); the file holds no gauge \
                     links -- it is incomplete or not an ILDG gauge configuration",
                    kinds()
                ),
            )
        })?;

        let format_xml = read_xml_record(path, &mut file, format)?;
        let (dims, precision) = parse_ildg_format(path, &format_xml)?;

        let stored = match find("scidac-checksum") {
            None => None,
            Some(rec) => {
                let xml = read_xml_record(path, &mut file, rec)?;
                Some(ScidacChecksum::from_xml(&xml).ok_or_else(|| {
                    bad(
                        path,
                        format!(
                            "the scidac-checksum record cannot be parsed (expected \
                             <suma>hex</suma><sumb>hex</sumb>, found {:?}); the file is damaged",
                            truncate_for_message(&xml)
                        ),
                    )
                })?)
            }
        };

        // Every size is computed checked, and must equal the record length, which walk_lime proved
        // lies within the file.
        let real_bytes = precision.bytes_per_real() as u64;
        let site_len = COMPLEX_PER_SITE as u64 * 2 * real_bytes;
        let volume = dims.iter().try_fold(1u64, |v, &d| v.checked_mul(d as u64));
        let expected = volume.and_then(|v| v.checked_mul(site_len));
        if expected != Some(binary.data_len) {
            let need = match expected {
                Some(e) => format!("{e} bytes (V * 4 * 9 * 2 * {real_bytes})"),
                None => "more bytes than any file can hold".to_string(),
            };
            return Err(bad(
                path,
                format!(
                    "the ildg-format dims {dims:?} do not match the data: ildg-binary-data holds {} \
                     bytes, but {dims:?} at {}-bit precision need {need}; the file is corrupt or \
                     its ildg-format record is wrong",
                    binary.data_len,
                    precision.bits()
                ),
            ));
        }
        let binary = binary.clone();
        Ok(Self {
            path: path.to_path_buf(),
            file,
            binary,
            stored,
            dims,
            precision,
        })
    }

    /// Number of lattice sites `X * Y * Z * T` (it fits: the file holds that many sites).
    pub fn volume(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product()
    }

    /// The SciDAC checksum the file carries, if any (verified by [`read_sites`](Self::read_sites)).
    pub fn stored_checksum(&self) -> Option<ScidacChecksum> {
        self.stored
    }

    /// Reads the links site after site (lexicographic order): `site(rank, links)` gets the site's
    /// `4 * 9` entries, `links[9 * mu + 3 * a + b]`, and may stop the read with an error. The SciDAC
    /// checksum, where the file has one, is verified once every site is read: a caller must not use
    /// what it took unless this returns `Ok` (the checksum, `None` without a record).
    pub fn read_sites(
        mut self,
        mut site: impl FnMut(u64, &[Complex64]) -> Result<()>,
    ) -> Result<Option<ScidacChecksum>> {
        let path = self.path.as_path();
        let site_len = COMPLEX_PER_SITE * 2 * self.precision.bytes_per_real();
        self.file
            .seek(SeekFrom::Start(self.binary.data_offset))
            .map_err(io_err(path))?;
        let (volume, precision) = (self.volume(), self.precision);
        let mut reader = BufReader::with_capacity(IO_BUFFER, &mut self.file);
        let mut bytes = vec![0u8; site_len];
        let mut links = Vec::with_capacity(COMPLEX_PER_SITE);
        let mut computed = ScidacChecksum::default();
        for rank in 0..volume {
            reader.read_exact(&mut bytes).map_err(io_err(path))?;
            computed.accumulate(rank, &bytes);
            links.clear();
            decode_site(&bytes, precision, &mut links);
            site(rank, &links)?;
        }
        if let Some(stored) = self.stored {
            if stored != computed {
                return Err(bad(
                    path,
                    format!(
                        "SciDAC checksum mismatch: the scidac-checksum record says {stored}, but \
                         the binary data gives {computed}; the link data is corrupt (bit rot, a bad \
                         or incomplete copy) -- re-copy the file from its source"
                    ),
                ));
            }
        }
        Ok(self.stored)
    }
}

fn read_xml_record(path: &Path, file: &mut File, rec: &LimeRecordInfo) -> Result<String> {
    if rec.data_len > MAX_XML_RECORD {
        return Err(bad(
            path,
            format!(
                "the {} record is {} bytes, far more than any ILDG XML record (limit {} bytes); \
                 the file is damaged",
                rec.kind, rec.data_len, MAX_XML_RECORD
            ),
        ));
    }
    let mut data = vec![0u8; rec.data_len as usize];
    file.seek(SeekFrom::Start(rec.data_offset))
        .and_then(|_| file.read_exact(&mut data))
        .map_err(io_err(path))?;
    // C writers sometimes count the string's terminating NUL in the record length.
    let text = String::from_utf8_lossy(&data);
    Ok(text.trim_end_matches('\0').to_string())
}

fn parse_ildg_format(path: &Path, xml: &str) -> Result<([usize; 4], Precision)> {
    let field = xml_text(xml, "field").ok_or_else(|| {
        bad(
            path,
            format!(
                "the ildg-format record has no <field> element ({:?}); the file is damaged or \
                 not ILDG",
                truncate_for_message(xml)
            ),
        )
    })?;
    if field != "su3gauge" {
        return Err(bad(
            path,
            format!(
                "unsupported ILDG field type '{field}': only su3gauge configurations (SU(3) gauge \
                 links) can be read"
            ),
        ));
    }
    let prec_text = xml_text(xml, "precision").ok_or_else(|| {
        bad(
            path,
            "the ildg-format record has no <precision> element; the file is damaged or not ILDG",
        )
    })?;
    let precision = prec_text
        .parse::<u32>()
        .ok()
        .and_then(Precision::from_bits)
        .ok_or_else(|| {
            bad(
                path,
                format!(
                    "unsupported ILDG precision '{prec_text}': only 32 (single) and 64 (double) \
                     are defined by ILDG"
                ),
            )
        })?;
    let mut dims = [0usize; 4];
    for (d, tag) in dims.iter_mut().zip(["lx", "ly", "lz", "lt"]) {
        let text = xml_text(xml, tag).ok_or_else(|| {
            bad(
                path,
                format!(
                    "the ildg-format record has no <{tag}> element; the file is damaged or not \
                     ILDG"
                ),
            )
        })?;
        *d = text
            .parse::<usize>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                bad(
                    path,
                    format!(
                        "invalid lattice extent <{tag}>{text}</{tag}> in ildg-format: it must be \
                         a positive integer"
                    ),
                )
            })?;
    }
    if dims.iter().any(|d| d % 2 != 0) {
        return Err(bad(
            path,
            format!(
                "odd lattice extent in dims {dims:?}: this code needs every extent even \
                 (even-odd preconditioning); use a configuration with even extents"
            ),
        ));
    }
    Ok((dims, precision))
}

/// The trimmed text inside the first element whose local name (namespace prefix dropped) is
/// `name`; enough XML for ILDG's flat records without pulling in a parser dependency.
fn xml_text<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let mut i = 0;
    while let Some(off) = xml[i..].find('<') {
        let start = i + off + 1;
        let rest = &xml[start..];
        i = start;
        if rest.starts_with(['/', '?', '!']) {
            continue;
        }
        let name_end = rest
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(rest.len());
        let qname = &rest[..name_end];
        let local = qname.rsplit(':').next().unwrap_or(qname);
        if local != name {
            continue;
        }
        let gt = rest.find('>')?;
        if rest[..gt].ends_with('/') {
            return Some("");
        }
        let content = &rest[gt + 1..];
        let end = content.find('<').unwrap_or(content.len());
        return Some(content[..end].trim());
    }
    None
}

fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn bad(path: &Path, problem: impl Into<String>) -> Error {
    Error::GaugeFile {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc32_bitwise(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn sliced_crc_matches_bitwise_on_all_lengths() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for n in 0..data.len() {
            assert_eq!(crc32(&data[..n]), crc32_bitwise(&data[..n]), "length {n}");
        }
        let (a, b) = data.split_at(123);
        assert_eq!(crc32_update(crc32(a), b), crc32(&data));
    }

    #[test]
    fn xml_text_tolerates_prefixes_and_whitespace() {
        let xml = "<?xml version=\"1.0\"?><i:ildgFormat xmlns:i=\"x\"><i:lx>\n 8 </i:lx><ly/></i:ildgFormat>";
        assert_eq!(xml_text(xml, "lx"), Some("8"));
        assert_eq!(xml_text(xml, "ly"), Some(""));
        assert_eq!(xml_text(xml, "version"), None);
        assert_eq!(xml_text("<a", "a"), None);
        assert_eq!(xml_text("<", "a"), None);
    }

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex_u32("0x0000abcd"), Some(0xabcd));
        assert_eq!(parse_hex_u32(" DEADBEEF "), Some(0xdeadbeef));
        assert_eq!(parse_hex_u32("123456789"), None);
        assert_eq!(parse_hex_u32(""), None);
        assert_eq!(parse_hex_u32("+1"), None);
    }
}
