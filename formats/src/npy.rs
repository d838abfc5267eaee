//! NumPy `.npy` files of float32 or float64 arrays, in C order, and masks of bool or uint8 ones.
//!
//! `.npy` is what `numpy.save` and `numpy.load` use, so fields written here open with one line of
//! Python, and initial conditions made in Python load here without converters. Files are written
//! as version 1.0, byte for byte as NumPy writes them; versions 1.0, 2.0 and 3.0 are read, in
//! either byte order.
//!
//! The format: the magic `\x93NUMPY`, a version, the header length, a header that is a Python
//! dict literal such as `{'descr': '<f8', 'fortran_order': False, 'shape': (4, 3, 2), }` padded
//! with spaces and a newline to a multiple of 64 bytes, then the raw array data.
//!
//! # What npyz does here, and what is written by hand
//!
//! [npyz](https://crates.io/crates/npyz) (0.9.1, the newest release; the fork that replaced the
//! outdated npy-rs, and the crate that reads every NumPy dtype and byte order) reads the data: it
//! decodes the elements in the file's byte order and element type, so big-endian files load too. It is handed a header this module has checked, not the file's own,
//! because on input that comes from people and other programs its header reader falls short of
//! what every reader here promises (never a panic, never an allocation the file does not justify,
//! an error naming the problem and the fix):
//! - a shape whose element count overflows 64 bits panics ("attempt to multiply with overflow") in
//!   builds with overflow checks, the fuzzer's among them;
//! - the header's declared length, up to 4 GiB, is allocated before it is compared with the file;
//! - its header parser (py_literal) refuses Python 2 headers (`(3L, 4L)`), which NumPy still reads;
//! - its errors are generic ("magic not found for NPY file") and name no file and no fix.
//!
//! So the preamble, the header dict (`Parser`, a small Python-literal reader with a depth
//! limit), the checks of dtype, order and length against the file, and every message are this
//! module's. The writer is too: npyz aligns the data to 16 bytes and spells the shape `(2, 3, )`,
//! while NumPy aligns to 64 (so the data can be memory-mapped aligned) and pads the header for
//! growth along the first axis; this module's files are identical to `numpy.save`'s.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use crate::{shape_repr, write_atomically, IoError};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// NumPy aligns the data to 64 bytes so that files can be memory-mapped.
const ARRAY_ALIGN: usize = 64;

/// NumPy (since 1.24) pads the header as if the first axis had this many digits, so that
/// appending along it can rewrite the header in place; matching it makes files identical.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// Bytes converted per step, so that huge fields need no second copy in memory.
const CHUNK_BYTES: usize = 1 << 20;

/// An element type that `.npy` files can hold: `f32` (`'<f4'`) or `f64` (`'<f8'`).
pub trait NpyElement: Copy + 'static {
    /// The dtype as `.npy` headers spell it.
    const DESCR: &'static str;
    /// Appends the value's little-endian bytes to `out`.
    fn extend_le_bytes(self, out: &mut Vec<u8>);
    /// The value of a float32 file's element.
    fn from_f32(value: f32) -> Self;
    /// The value of a float64 file's element, rounded if need be.
    fn from_f64(value: f64) -> Self;
}

impl NpyElement for f32 {
    const DESCR: &'static str = "<f4";
    fn extend_le_bytes(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn from_f32(value: f32) -> Self {
        value
    }
    fn from_f64(value: f64) -> Self {
        value as f32
    }
}

impl NpyElement for f64 {
    const DESCR: &'static str = "<f8";
    fn extend_le_bytes(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn from_f32(value: f32) -> Self {
        f64::from(value)
    }
    fn from_f64(value: f64) -> Self {
        value
    }
}

/// Writes `data`, an array of `shape` in C order (last index fastest), to the `.npy` file `path`,
/// atomically (see [`write_atomically`]).
///
/// Fails with [`IoError::Npy`] if `data.len()` is not the product of `shape`.
pub fn write_npy<T: NpyElement>(path: &Path, shape: &[usize], data: &[T]) -> Result<(), IoError> {
    let count = element_count(shape);
    if count != Some(data.len()) {
        let holds = count.map_or("more than usize::MAX".to_string(), |n| n.to_string());
        return Err(IoError::Npy {
            path: path.to_path_buf(),
            problem: format!(
                "cannot save {} values as shape {}, which holds {holds}; pass the shape of the data",
                data.len(),
                shape_repr(shape)
            ),
        });
    }
    let header = header_bytes(T::DESCR, shape);
    let per_chunk = (CHUNK_BYTES / std::mem::size_of::<T>()).max(1);
    write_atomically(path, |out| {
        out.write_all(&header)?;
        let mut bytes = Vec::with_capacity(CHUNK_BYTES);
        for chunk in data.chunks(per_chunk) {
            bytes.clear();
            for &value in chunk {
                value.extend_le_bytes(&mut bytes);
            }
            out.write_all(&bytes)?;
        }
        Ok(())
    })
}

/// Reads the `.npy` file `path`: its shape and its data in C order, converted to `T`
/// (float32 to `f64` exactly, float64 to `f32` rounded to nearest).
///
/// Fails with [`IoError::Npy`], naming the problem and the fix, for anything but a float32 or
/// float64 C-order array whose data length matches its shape.
pub fn read_npy<T: NpyElement>(path: &Path) -> Result<(Vec<usize>, Vec<T>), IoError> {
    let file = NpyFile::open(path)?;
    let shape = file.shape.clone();
    Ok((shape, file.read_data(path)?))
}

/// Reads the `.npy` file `path` like [`read_npy`], and fails with [`IoError::Shape`] unless its
/// shape is `expected`; the shape is checked before the data is read.
pub fn read_npy_shaped<T: NpyElement>(path: &Path, expected: &[usize]) -> Result<Vec<T>, IoError> {
    let file = NpyFile::open(path)?;
    if file.shape != expected {
        return Err(IoError::Shape {
            path: path.to_path_buf(),
            expected: expected.to_vec(),
            found: file.shape,
        });
    }
    file.read_data(path)
}

/// Reads the `.npy` file `path` as a mask, one `bool` per element in C order (`true` where the
/// element is not 0), and fails with [`IoError::Shape`] unless its shape is `expected` (checked
/// before the data is read): a voxel mask, which NumPy writes as bool (`'|b1'`) or uint8 (`'|u1'`).
/// Any other dtype fails with [`IoError::Npy`], naming it and the conversion.
pub fn read_npy_mask(path: &Path, expected: &[usize]) -> Result<Vec<bool>, IoError> {
    let mut file = NpyFile::open_as(path, Want::Mask)?;
    if file.shape != expected {
        return Err(IoError::Shape {
            path: path.to_path_buf(),
            expected: expected.to_vec(),
            found: file.shape,
        });
    }
    let mut bytes = vec![0u8; file.count];
    let cut_off = || IoError::Npy {
        path: path.to_path_buf(),
        problem: "the file is truncated".to_string(),
    };
    read_or(&mut file.reader, &mut bytes, path, cut_off)?;
    Ok(bytes.into_iter().map(|b| b != 0).collect())
}

/// The shape of the `.npy` file `path`, from its header alone (the file is checked as [`read_npy`]
/// checks it, the data is not read): for a run whose grid is the input's shape.
pub fn read_npy_shape(path: &Path) -> Result<Vec<usize>, IoError> {
    Ok(NpyFile::open(path)?.shape)
}

/// The shape of the mask file `path`, from its header alone (checked as [`read_npy_mask`] checks
/// it): for a run whose grid is the mask's shape.
pub fn read_npy_mask_shape(path: &Path) -> Result<Vec<usize>, IoError> {
    Ok(NpyFile::open_as(path, Want::Mask)?.shape)
}

fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// The preamble and header exactly as `numpy.save` writes them.
fn header_bytes(descr: &str, shape: &[usize]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}",
        shape_repr(shape)
    );
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // Like NumPy: version 1.0 (u16 length) unless the header is too long for it. The padding is
    // never zero: NumPy adds a whole 64 bytes when the header is already aligned.
    let text_len = dict.len() + 1;
    let pad = |prefix: usize| ARRAY_ALIGN - (prefix + text_len) % ARRAY_ALIGN;
    let mut out = MAGIC.to_vec();
    let padding = match u16::try_from(text_len + pad(10)) {
        Ok(len) => {
            out.extend_from_slice(&[1, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            pad(10)
        }
        Err(_) => {
            out.extend_from_slice(&[2, 0]);
            // A header of 4 GiB would need a shape of 10^8 dimensions.
            let len = u32::try_from(text_len + pad(12)).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            pad(12)
        }
    };
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + padding, b' ');
    out.push(b'\n');
    out
}

/// The types a file may hold, in the byte order it holds them: floats, or the bytes of a mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dtype {
    /// Bytes per element: 4 or 8 (floats), 1 (a mask).
    size: usize,
    /// Big-endian (`'>f8'`) rather than little-endian.
    big: bool,
    /// A mask's bytes (bool or uint8) rather than floats.
    mask: bool,
}

impl Dtype {
    /// The dtype as a header spells it, `'<f8'` (a mask's as `'|u1'`).
    fn descr(self) -> String {
        match self.mask {
            true => "|u1".to_string(),
            false => format!("{}f{}", if self.big { '>' } else { '<' }, self.size),
        }
    }
}

/// What a reader accepts: float arrays, or masks (bool or uint8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Float,
    Mask,
}

/// A `.npy` file whose header has been read and checked against the file's length, positioned
/// at the start of the data.
struct NpyFile {
    reader: BufReader<File>,
    shape: Vec<usize>,
    dtype: Dtype,
    /// Number of elements, which the file's length has been checked to hold.
    count: usize,
}

impl NpyFile {
    fn open(path: &Path) -> Result<NpyFile, IoError> {
        Self::open_as(path, Want::Float)
    }

    fn open_as(path: &Path, want: Want) -> Result<NpyFile, IoError> {
        let read_error = |source| IoError::Read {
            path: path.to_path_buf(),
            source,
        };
        let bad = |problem: String| IoError::Npy {
            path: path.to_path_buf(),
            problem,
        };
        let file = File::open(path).map_err(read_error)?;
        let meta = file.metadata().map_err(read_error)?;
        // The data's length is checked against the header before anything is allocated, and only a
        // regular file has a length to check: a pipe or a device reads as empty or endless.
        if !meta.is_file() {
            return Err(bad(format!(
                "it is {}, not a regular file; .npy input is read from a file (save the array to one \
                 first, e.g. numpy.save)",
                crate::kind_of(&meta)
            )));
        }
        let file_len = meta.len();
        let mut reader = BufReader::new(file);

        let mut preamble = Vec::with_capacity(8);
        (&mut reader)
            .take(8)
            .read_to_end(&mut preamble)
            .map_err(read_error)?;
        if !preamble.starts_with(MAGIC) {
            return Err(bad(bad_magic(&preamble)));
        }
        let cut_off = || bad("the header is cut off: the file is truncated".to_string());
        let (major, minor) = match preamble[..] {
            [_, _, _, _, _, _, major, minor] => (major, minor),
            _ => return Err(cut_off()),
        };
        let len_size = match major {
            1 => 2,
            2 | 3 => 4,
            _ => {
                return Err(bad(format!(
                    "format version {major}.{minor} is not supported (only 1.0, 2.0 and 3.0); \
                     save it with numpy.save, which writes 1.0"
                )))
            }
        };
        let mut len_bytes = [0u8; 4];
        read_or(&mut reader, &mut len_bytes[..len_size], path, cut_off)?;
        let header_len = u32::from_le_bytes(len_bytes) as usize;
        let data_start = (8 + len_size + header_len) as u64;
        if data_start > file_len {
            return Err(cut_off());
        }
        let mut header = vec![0u8; header_len];
        read_or(&mut reader, &mut header, path, cut_off)?;
        let (shape, dtype) = parse_header(&header, want).map_err(bad)?;

        let count = element_count(&shape);
        let needed = count.and_then(|n| n.checked_mul(dtype.size));
        // Every partial product of the axes must be addressable too, not only the whole, which a zero
        // axis makes 0: npyz computes strides from the last axis, and (0, 2^40, 2^40)'s overflow.
        let partial = shape
            .iter()
            .filter(|&&d| d != 0)
            .try_fold(1usize, |n, &d| n.checked_mul(d));
        let (Some(count), Some(needed), Some(_)) = (count, needed, partial) else {
            return Err(bad(format!(
                "shape {} is too large to address",
                shape_repr(&shape)
            )));
        };
        let held = file_len - data_start;
        if held != needed as u64 {
            let problem = if held < needed as u64 {
                "the file is truncated"
            } else {
                "the file has trailing bytes; it was not written by numpy.save, or the header's shape is wrong"
            };
            return Err(bad(format!(
                "data section holds {held} bytes but shape {} of {} needs {needed}: {problem}",
                shape_repr(&shape),
                dtype.descr()
            )));
        }
        Ok(NpyFile {
            reader,
            shape,
            dtype,
            count,
        })
    }

    fn read_data<T: NpyElement>(self, path: &Path) -> Result<Vec<T>, IoError> {
        let read_error = |source| IoError::Read {
            path: path.to_path_buf(),
            source,
        };
        // npyz decodes the elements behind a header made from what was checked above (the module doc
        // says why it does not read the file's own); the file's length matches it, so collecting
        // allocates what the file holds and no more.
        let header =
            npyz::NpyHeader::from_reader(&header_bytes(&self.dtype.descr(), &self.shape)[..])
                .map_err(read_error)?;
        let file = npyz::NpyFile::with_header(header, self.reader);
        let invalid =
            |e: npyz::DTypeError| read_error(std::io::Error::new(ErrorKind::InvalidData, e));
        let data = match self.dtype.size {
            4 => file
                .data::<f32>()
                .map_err(invalid)?
                .map(|v| v.map(T::from_f32))
                .collect::<Result<Vec<T>, _>>(),
            _ => file
                .data::<f64>()
                .map_err(invalid)?
                .map(|v| v.map(T::from_f64))
                .collect::<Result<Vec<T>, _>>(),
        };
        let data = data.map_err(read_error)?;
        debug_assert_eq!(data.len(), self.count);
        Ok(data)
    }
}

/// Reads exactly `buf.len()` bytes; a short read is the error `cut_off` makes.
fn read_or(
    reader: &mut impl Read,
    buf: &mut [u8],
    path: &Path,
    cut_off: impl Fn() -> IoError,
) -> Result<(), IoError> {
    reader.read_exact(buf).map_err(|source| {
        if source.kind() == ErrorKind::UnexpectedEof {
            cut_off()
        } else {
            IoError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

fn bad_magic(start: &[u8]) -> String {
    let what = if start.starts_with(b"PK\x03\x04") {
        "it is a zip archive, probably a .npz file of several arrays: extract one \
         (numpy: np.save('field.npy', np.load('file.npz')['name']))"
    } else {
        "save the array with numpy.save"
    };
    format!(
        "it does not start with the magic string \\x93NUMPY (it starts with b\"{}\"); {what}",
        start.escape_ascii()
    )
}

const STRUCTURED: &str = "the array has a structured dtype (named fields); save each field as \
    its own float array (numpy: np.save('x.npy', arr['x'].astype('<f8')))";

const FORTRAN: &str = "the array is in Fortran (column-major) order; only C order is supported: \
    save it in C order (numpy: np.save(path, np.ascontiguousarray(arr)))";

/// Checks the header dict and returns the shape and dtype, or the problem.
fn parse_header(header: &[u8], want: Want) -> Result<(Vec<usize>, Dtype), String> {
    let dict = Parser::parse(header)
        .map_err(|problem| format!("the header is not a Python dict literal: {problem}"))?;
    let Literal::Dict(entries) = dict else {
        return Err("the header is not a Python dict literal".to_string());
    };
    let get = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| matches!(k, Literal::Str(s) if s == key))
            .map(|(_, value)| value)
            .ok_or_else(|| format!("the header has no '{key}' key"))
    };
    let dtype = match get("descr")? {
        Literal::Str(descr) if want == Want::Mask => parse_mask_descr(descr)?,
        Literal::Str(descr) => parse_descr(descr)?,
        Literal::List(_) => return Err(STRUCTURED.to_string()),
        other => {
            return Err(format!(
                "'descr' is {other:?}, not a dtype string such as '<f8'"
            ))
        }
    };
    match get("fortran_order")? {
        Literal::Bool(false) => {}
        Literal::Bool(true) => return Err(FORTRAN.to_string()),
        other => return Err(format!("'fortran_order' is {other:?}, not True or False")),
    }
    let shape = match get("shape")? {
        Literal::Tuple(items) => items
            .iter()
            .map(|item| match item {
                Literal::Int(n) => usize::try_from(*n)
                    .map_err(|_| format!("shape dimension {n} is too large to address")),
                other => Err(format!(
                    "'shape' holds {other:?}, not a non-negative integer"
                )),
            })
            .collect::<Result<Vec<usize>, String>>()?,
        other => return Err(format!("'shape' is {other:?}, not a tuple of integers")),
    };
    Ok((shape, dtype))
}

/// The dtype of a `descr` string, or why it cannot be read; npyz's [`TypeChar`](npyz::TypeChar)
/// names the kind of its type character.
fn parse_descr(descr: &str) -> Result<Dtype, String> {
    let (order, rest) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '=' | '|')) => (Some(c), &descr[1..]),
        _ => (None, descr),
    };
    let convert = "save it as float (numpy: arr.astype('<f8'))";
    let not_float = |what: &str| {
        format!(
            "dtype '{descr}' is {what}; only float32 ('<f4') and float64 ('<f8') arrays \
             can be read: {convert}"
        )
    };
    let mut chars = rest.chars();
    use npyz::TypeChar;
    match chars.next().and_then(TypeChar::from_char) {
        Some(TypeChar::Float) => {}
        Some(TypeChar::Int | TypeChar::Uint) => return Err(not_float("an integer type")),
        Some(TypeChar::Bool) => return Err(not_float("boolean")),
        Some(TypeChar::Complex) => {
            return Err(format!(
                "dtype '{descr}' is complex; save the real and imaginary parts as two float \
                 arrays (numpy: arr.real.astype('<f8'), arr.imag.astype('<f8'))"
            ))
        }
        Some(TypeChar::Object) => return Err(not_float("an array of Python objects")),
        Some(TypeChar::ByteStr | TypeChar::UnicodeStr) => return Err(not_float("text")),
        Some(TypeChar::DateTime | TypeChar::TimeDelta) => {
            return Err(not_float("a date or time type"))
        }
        _ => return Err(not_float("not a float type")),
    }
    let size = match chars.as_str() {
        "4" => 4,
        "8" => 8,
        n => return Err(not_float(&format!("a {n}-byte float"))),
    };
    let big = match order {
        Some('<') => false,
        Some('>') => true,
        Some('|') => {
            return Err(format!(
                "dtype '{descr}' has byte order '|' (not applicable), which is wrong for a \
                 multi-byte float; save it with dtype '<f{size}' (numpy: arr.astype('<f{size}'))"
            ))
        }
        _ => cfg!(target_endian = "big"),
    };
    Ok(Dtype {
        size,
        big,
        mask: false,
    })
}

/// The dtype of a mask's `descr` string: bool (`'|b1'`) or uint8 (`'|u1'`), any byte order, or why
/// it is not one.
fn parse_mask_descr(descr: &str) -> Result<Dtype, String> {
    match descr.trim_start_matches(['<', '>', '=', '|']) {
        "b1" | "u1" | "?" | "B" => Ok(Dtype {
            size: 1,
            big: false,
            mask: true,
        }),
        _ => Err(format!(
            "dtype '{descr}' is not a mask's: a mask is bool ('|b1') or uint8 ('|u1'), nonzero \
             where solid; save it as one (numpy: (mask != 0).astype('u1'))"
        )),
    }
}

/// The Python literals a `.npy` header may contain.
#[derive(Debug, PartialEq)]
enum Literal {
    Str(String),
    Int(u64),
    Bool(bool),
    None,
    Tuple(Vec<Literal>),
    List(Vec<Literal>),
    Dict(Vec<(Literal, Literal)>),
}

/// A parser for Python literals, enough for `.npy` headers whatever wrote them: any whitespace
/// and key order, either quote, trailing commas, Python 2 longs (`3L`).
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

/// Deeper nesting than any real header; the limit keeps a corrupt file from overflowing the
/// stack.
const MAX_DEPTH: usize = 16;

impl Parser<'_> {
    fn parse(text: &[u8]) -> Result<Literal, String> {
        let mut parser = Parser { text, pos: 0 };
        let value = parser.value(0)?;
        match parser.peek() {
            None => Ok(value),
            Some(_) => Err(parser.unexpected("the end of the header")),
        }
    }

    fn peek(&mut self) -> Option<u8> {
        while self.text.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
        self.text.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn unexpected(&mut self, wanted: &str) -> String {
        match self.peek() {
            Some(c) => format!(
                "expected {wanted} at byte {} but found '{}'",
                self.pos,
                c.escape_ascii()
            ),
            None => format!("expected {wanted} but the header ends"),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Literal, String> {
        if depth > MAX_DEPTH {
            return Err("the header is nested too deeply".to_string());
        }
        match self.peek() {
            Some(quote @ (b'\'' | b'"')) => self.string(quote),
            Some(b'(') => Ok(Literal::Tuple(self.sequence(b')', depth)?)),
            Some(b'[') => Ok(Literal::List(self.sequence(b']', depth)?)),
            Some(b'{') => self.dict(depth),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(c) if c.is_ascii_alphabetic() => self.word(),
            _ => Err(self.unexpected("a value")),
        }
    }

    fn string(&mut self, quote: u8) -> Result<Literal, String> {
        self.pos += 1;
        let mut value = String::new();
        loop {
            match self.text.get(self.pos) {
                None => return Err("a string in the header is not closed".to_string()),
                Some(&c) if c == quote => break,
                Some(b'\\') => {
                    self.pos += 1;
                    if let Some(&c) = self.text.get(self.pos) {
                        value.push(char::from(c));
                    }
                }
                // Latin-1, as the header of versions 1.0 and 2.0 is; dtype strings are ASCII.
                Some(&c) => value.push(char::from(c)),
            }
            self.pos += 1;
        }
        self.pos += 1;
        Ok(Literal::Str(value))
    }

    fn int(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        while self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        let digits = String::from_utf8_lossy(&self.text[start..self.pos]).into_owned();
        if matches!(self.text.get(self.pos), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        digits
            .parse()
            .map(Literal::Int)
            .map_err(|_| format!("the number {digits} is too large"))
    }

    fn word(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        while self
            .text
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.pos += 1;
        }
        match &self.text[start..self.pos] {
            b"True" => Ok(Literal::Bool(true)),
            b"False" => Ok(Literal::Bool(false)),
            b"None" => Ok(Literal::None),
            word => Err(format!(
                "unknown name '{}' at byte {start}",
                word.escape_ascii()
            )),
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Vec<Literal>, String> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            if !self.eat(b',') && self.peek() != Some(close) {
                return Err(self.unexpected(&format!("',' or '{}'", char::from(close))));
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Literal, String> {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            if self.eat(b'}') {
                return Ok(Literal::Dict(entries));
            }
            let key = self.value(depth + 1)?;
            if !self.eat(b':') {
                return Err(self.unexpected("':'"));
            }
            let value = self.value(depth + 1)?;
            entries.push((key, value));
            if !self.eat(b',') && self.peek() != Some(b'}') {
                return Err(self.unexpected("',' or '}'"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use std::fs;

    use crate::test_support::{entries, scratch_dir};

    /// A file with a hand-written header dict, padded as NumPy pads (version 1.0 or 2.0).
    fn raw_npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let prefix = if version == 1 { 10 } else { 12 };
        let padded = (prefix + dict.len() + 1).div_ceil(64) * 64 - prefix;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(padded as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(padded as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(prefix + padded - 1, b' ');
        out.push(b'\n');
        out.extend_from_slice(data);
        out
    }

    fn problem(err: IoError) -> String {
        match err {
            IoError::Npy { problem, .. } => problem,
            other => panic!("expected IoError::Npy, got {other:?}"),
        }
    }

    /// Random values with the awkward ones mixed in: bit-exactness must hold for them too.
    fn random_values<T: NpyElement>(n: usize, from: impl Fn(f64) -> T) -> Vec<T> {
        let mut rng = rand::rng();
        let special = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e-310,
        ];
        (0..n)
            .map(|i| {
                from(
                    special
                        .get(i)
                        .copied()
                        .unwrap_or_else(|| rng.random_range(-1e3..1e3)),
                )
            })
            .collect()
    }

    #[test]
    fn round_trip_f64_is_bit_exact() {
        let dir = scratch_dir("f64");
        let path = dir.join("field.npy");
        let data = random_values(4 * 5 * 6, |x| x);
        write_npy(&path, &[4, 5, 6], &data).unwrap();
        let (shape, back) = read_npy::<f64>(&path).unwrap();
        assert_eq!(shape, [4, 5, 6]);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&data));
        assert_eq!(entries(&dir), ["field.npy"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn round_trip_f32_is_bit_exact() {
        let dir = scratch_dir("f32");
        let path = dir.join("field.npy");
        let data = random_values(3 * 7 * 2, |x| x as f32);
        write_npy(&path, &[3, 7, 2], &data).unwrap();
        let back = read_npy_shaped::<f32>(&path, &[3, 7, 2]).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&data));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn header_is_byte_for_byte_numpys() {
        // numpy.save(f, np.zeros((2, 3))): 10 bytes of preamble, a 118-byte header, data at 128.
        let mut expected =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
                .to_vec();
        expected.resize(127, b' ');
        expected.push(b'\n');
        assert_eq!(header_bytes("<f8", &[2, 3]), expected);

        let mut expected =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"
                .to_vec();
        expected.resize(127, b' ');
        expected.push(b'\n');
        assert_eq!(header_bytes("<f4", &[5]), expected);

        // The growth padding pushes this one past 128 bytes, as in NumPy 2.4.
        let shape = [1, 1000, 1000, 1000, 1000, 1000, 1000, 1000];
        let header = header_bytes("<f8", &shape);
        assert_eq!(header.len(), 192);
        assert_eq!(&header[8..10], &182u16.to_le_bytes());

        let dir = scratch_dir("header");
        let path = dir.join("a.npy");
        write_npy(&path, &[2, 3], &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let file = fs::read(&path).unwrap();
        assert_eq!(file.len(), 128 + 6 * 8);
        assert_eq!(&file[..128], &header_bytes("<f8", &[2, 3])[..]);
        assert_eq!(&file[128..136], &1.0f64.to_le_bytes());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_f32_file_as_f64_and_f64_file_as_f32() {
        let dir = scratch_dir("convert");
        let path = dir.join("a.npy");
        let data = [0.1f32, -2.5, 3.0e-20, 7.0];
        write_npy(&path, &[4], &data).unwrap();
        let (shape, wide) = read_npy::<f64>(&path).unwrap();
        assert_eq!(shape, [4]);
        assert_eq!(wide, data.map(f64::from));

        let data = [0.1f64, -2.5, 1e300];
        write_npy(&path, &[3], &data).unwrap();
        let (_, narrow) = read_npy::<f32>(&path).unwrap();
        assert_eq!(narrow, [0.1f32, -2.5, f32::INFINITY]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tolerant_header_and_version_2() {
        let dir = scratch_dir("tolerant");
        let path = dir.join("a.npy");
        let data: Vec<u8> = [1.5f64, 2.5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let dict = "{ \"shape\" : ( 1L ,2 ) ,'fortran_order':False,\n'descr':'=f8' }";
        for version in [1, 2] {
            fs::write(&path, raw_npy(version, dict, &data)).unwrap();
            let (shape, back) = read_npy::<f64>(&path).unwrap();
            assert_eq!(shape, [1, 2]);
            assert_eq!(back, [1.5, 2.5]);
        }
        // A 0-d array holds one value.
        fs::write(
            &path,
            raw_npy(
                1,
                "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                &data[..8],
            ),
        )
        .unwrap();
        assert_eq!(read_npy::<f64>(&path).unwrap(), (vec![], vec![1.5]));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pipes_devices_and_directories_are_named_not_called_truncated() {
        let dir = scratch_dir("not-a-file");
        for (path, kind) in [
            (Path::new("/dev/zero"), "a device"),
            (dir.as_path(), "a directory"),
        ] {
            let msg = read_npy::<f32>(path).unwrap_err().to_string();
            assert!(
                msg.contains(kind)
                    && msg.contains("not a regular file")
                    && !msg.contains("truncated"),
                "{msg}"
            );
        }
        #[cfg(unix)]
        {
            let fifo = dir.join("pipe");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status();
            if made.is_ok_and(|s| s.success()) {
                // Opening a FIFO for reading waits for a writer: give it one.
                let f = fifo.clone();
                let writer = std::thread::spawn(move || std::fs::write(f, b"\x93NUMPY"));
                let msg = read_npy::<f32>(&fifo).unwrap_err().to_string();
                assert!(
                    msg.contains("a pipe") && !msg.contains("truncated"),
                    "{msg}"
                );
                let _ = writer.join();
            }
        }
    }

    #[test]
    fn the_shape_comes_from_the_header_alone() {
        let dir = scratch_dir("shape-only");
        let path = dir.join("a.npy");
        write_npy(&path, &[3, 5], &[0.5f32; 15]).unwrap();
        assert_eq!(read_npy_shape(&path).unwrap(), [3, 5]);
        std::fs::write(&path, b"junk").unwrap();
        assert!(read_npy_shape(&path).is_err());
    }

    #[test]
    fn truncated_and_overlong_data_are_named() {
        let dir = scratch_dir("truncated");
        let path = dir.join("a.npy");
        write_npy(&path, &[4, 5, 6], &vec![1.0f32; 120]).unwrap();
        let file = fs::read(&path).unwrap();
        fs::write(&path, &file[..128 + 100]).unwrap();
        let msg = problem(read_npy::<f32>(&path).unwrap_err());
        assert_eq!(
            msg,
            "data section holds 100 bytes but shape (4, 5, 6) of <f4 needs 480: the file is truncated"
        );

        let mut long = file.clone();
        long.extend_from_slice(b"junk");
        fs::write(&path, &long).unwrap();
        let msg = problem(read_npy::<f32>(&path).unwrap_err());
        assert!(
            msg.contains("holds 484 bytes") && msg.contains("trailing"),
            "{msg}"
        );

        fs::write(&path, &file[..50]).unwrap();
        let msg = problem(read_npy::<f32>(&path).unwrap_err());
        assert!(msg.contains("truncated"), "{msg}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A shape whose axes multiply beyond 64 bits is refused by name, also where a zero axis makes
    /// the array empty (the data reader's strides would overflow on the axes after it).
    #[test]
    fn shapes_beyond_addressing_are_refused() {
        let dir = scratch_dir("huge-shape");
        let path = dir.join("a.npy");
        for shape in [
            "(4294967296, 4294967296, 16)",
            "(0, 1099511627776, 1099511627776)",
        ] {
            let dict = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}");
            fs::write(&path, raw_npy(1, &dict, &[])).unwrap();
            let msg = problem(read_npy::<f64>(&path).unwrap_err());
            assert!(msg.contains("too large to address"), "{shape}: {msg}");
        }
        // An empty array with a small shape reads as empty.
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }";
        fs::write(&path, raw_npy(1, dict, &[])).unwrap();
        assert_eq!(read_npy::<f64>(&path).unwrap(), (vec![0, 3], vec![]));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_magic_is_named() {
        let dir = scratch_dir("magic");
        let path = dir.join("a.npy");
        fs::write(&path, b"1.0 2.0 3.0\n").unwrap();
        let err = read_npy::<f64>(&path).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("a.npy: not a valid .npy file"), "{msg}");
        assert!(msg.contains("magic") && msg.contains("numpy.save"), "{msg}");

        fs::write(&path, b"PK\x03\x04rest").unwrap();
        let msg = problem(read_npy::<f64>(&path).unwrap_err());
        assert!(msg.contains(".npz"), "{msg}");

        fs::write(&path, b"").unwrap();
        assert!(problem(read_npy::<f64>(&path).unwrap_err()).contains("magic"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unsupported_dtypes_and_orders_are_named() {
        let dir = scratch_dir("dtypes");
        let path = dir.join("a.npy");
        let check = |descr: &str, fortran: &str, wanted: &str| {
            let dict = format!("{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': (2,), }}");
            fs::write(&path, raw_npy(1, &dict, &[0; 16])).unwrap();
            let msg = problem(read_npy::<f64>(&path).unwrap_err());
            assert!(msg.contains(wanted), "{descr}: {msg}");
        };
        check("'<f8'", "True", "Fortran");
        check("'<i8'", "False", "integer");
        check("'|u1'", "False", "integer");
        check("'<c8'", "False", "complex");
        check("'|O'", "False", "Python objects");
        check("'<f2'", "False", "2-byte float");
        check("'|f8'", "False", "not applicable");
        check("[('x', '<f8')]", "False", "structured");
        check("'<f8'", "None", "not True or False");
        fs::write(
            &path,
            raw_npy(1, "{'descr': '<f8', 'shape': (2,)}", &[0; 16]),
        )
        .unwrap();
        let msg = problem(read_npy::<f64>(&path).unwrap_err());
        assert!(msg.contains("no 'fortran_order' key"), "{msg}");
        fs::write(&path, raw_npy(1, "{'descr': '<f8', 'shape': (2,", &[0; 16])).unwrap();
        let msg = problem(read_npy::<f64>(&path).unwrap_err());
        assert!(msg.contains("not a Python dict literal"), "{msg}");
        let mut v4 = raw_npy(1, "{}", &[]);
        v4[6] = 4;
        fs::write(&path, v4).unwrap();
        let msg = problem(read_npy::<f64>(&path).unwrap_err());
        assert!(msg.contains("version 4.0"), "{msg}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Big-endian files (`arr.astype('>f8')`, or written on a big-endian machine) read as the same
    /// values, in either precision.
    #[test]
    fn big_endian_files_are_read() {
        let dir = scratch_dir("big-endian");
        let path = dir.join("a.npy");
        let values = [1.5f64, -2.25, 1e-300, f64::INFINITY];
        let be8: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        let dict = "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }";
        fs::write(&path, raw_npy(1, dict, &be8)).unwrap();
        assert_eq!(
            read_npy::<f64>(&path).unwrap(),
            (vec![2, 2], values.to_vec())
        );
        let narrow = read_npy_shaped::<f32>(&path, &[2, 2]).unwrap();
        assert_eq!(narrow, values.map(|v| v as f32));

        let be4: Vec<u8> = values
            .iter()
            .flat_map(|&v| (v as f32).to_be_bytes())
            .collect();
        let dict = "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }";
        fs::write(&path, raw_npy(1, dict, &be4)).unwrap();
        let (_, wide) = read_npy::<f64>(&path).unwrap();
        assert_eq!(wide, values.map(|v| f64::from(v as f32)));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Masks of bool and uint8, nonzero where solid; floats and wider integers are refused with the
    /// conversion, a wrong shape names both, and a float reader still refuses a mask.
    #[test]
    fn masks_are_read_from_bool_and_uint8() {
        let dir = scratch_dir("mask");
        let path = dir.join("mask.npy");
        for descr in ["'|b1'", "'|u1'", "'<u1'"] {
            let dict = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': (2, 3), }}");
            fs::write(&path, raw_npy(1, &dict, &[0, 1, 0, 0, 7, 1])).unwrap();
            let mask = read_npy_mask(&path, &[2, 3]).unwrap();
            assert_eq!(mask, [false, true, false, false, true, true], "{descr}");
            let err = read_npy_mask(&path, &[3, 2]).unwrap_err().to_string();
            assert!(err.contains("(2, 3)") && err.contains("(3, 2)"), "{err}");
        }
        let msg = problem(read_npy::<f64>(&path).unwrap_err());
        assert!(msg.contains("integer"), "{msg}");
        write_npy(&path, &[2, 3], &[0.5f64; 6]).unwrap();
        let msg = problem(read_npy_mask(&path, &[2, 3]).unwrap_err());
        assert!(
            msg.contains("'<f8'") && msg.contains("astype('u1')"),
            "{msg}"
        );
        let dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }";
        fs::write(&path, raw_npy(1, dict, &[0; 6])).unwrap();
        let msg = problem(read_npy_mask(&path, &[3]).unwrap_err());
        assert!(msg.contains("not a mask's"), "{msg}");
        let dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }";
        fs::write(&path, raw_npy(1, dict, &[1, 0, 1])).unwrap();
        let msg = problem(read_npy_mask(&path, &[4]).unwrap_err());
        assert!(msg.contains("truncated"), "{msg}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shape_mismatch_names_both_shapes() {
        let dir = scratch_dir("shape");
        let path = dir.join("a.npy");
        write_npy(&path, &[2, 3], &[0.5f64; 6]).unwrap();
        let err = read_npy_shaped::<f64>(&path, &[3, 2]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, IoError::Shape { .. }), "{msg}");
        assert!(
            msg.contains("shape (2, 3)") && msg.contains("shape (3, 2)"),
            "{msg}"
        );
        assert!(msg.contains("must match the grid size"), "{msg}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_data_length_is_refused_and_writes_nothing() {
        let dir = scratch_dir("length");
        let path = dir.join("a.npy");
        let msg = problem(write_npy(&path, &[2, 3], &[0.0f32; 5]).unwrap_err());
        assert!(
            msg.contains("5 values") && msg.contains("(2, 3), which holds 6"),
            "{msg}"
        );
        assert!(entries(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_temp_file_after_success_or_failure() {
        let dir = scratch_dir("temp");
        write_npy(&dir.join("a.npy"), &[2], &[1.0f64, 2.0]).unwrap();
        assert_eq!(entries(&dir), ["a.npy"]);

        let missing = dir.join("missing");
        let err = write_npy(&missing.join("a.npy"), &[2], &[1.0f64, 2.0]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, IoError::Write { .. }), "{msg}");
        assert!(
            msg.contains(&format!("directory {} does not exist", missing.display())),
            "{msg}"
        );
        assert_eq!(entries(&dir), ["a.npy"]);

        // A directory in the way of the rename: the temporary file must go again.
        fs::create_dir(dir.join("b.npy")).unwrap();
        assert!(write_npy(&dir.join("b.npy"), &[1], &[1.0f64]).is_err());
        assert_eq!(entries(&dir), ["a.npy", "b.npy"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_file_is_a_read_error() {
        let dir = scratch_dir("missing-file");
        let err = read_npy::<f64>(&dir.join("nope.npy")).unwrap_err();
        assert!(matches!(err, IoError::Read { .. }), "{err}");
        assert!(err.to_string().contains("nope.npy"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
