//! The `.npy` header: parsing versions 1.0, 2.0 and 3.0, and writing version 1.0 (2.0
//! when the header would not fit in 64 KiB).
//!
//! The header is a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3075200, 512), }`; the small
//! parser here accepts exactly what numpy writes (and reasonable variations in spacing
//! and quoting) and refuses anything else with a message.
//!
//! A file in Fortran order is read chunk by chunk through a chunk source (`chunks.rs`),
//! which puts its elements in C order; a big-endian one with positioned reads whose bytes
//! are swapped in place (`src/format/read.rs`).

pub(crate) mod chunks;

use crate::dtype::DType;

pub use crate::error::NpyError;

/// The magic bytes opening every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// What a `.npy` header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version (major, minor).
    pub version: (u8, u8),
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// Byte offset of the data (length of magic, version, length field and header).
    pub data_offset: u64,
    /// Elements stored in Fortran order (the first axis fastest); false where that is the
    /// C order too (at most one axis longer than 1).
    pub fortran: bool,
    /// Elements stored big-endian (`'>f4'`).
    pub big_endian: bool,
}

/// Bytes to read from the start of a file to be sure to have a v1 header's length field.
pub const PREAMBLE: usize = 12;

/// Parses a header from the first bytes of a file. `bytes` must hold the whole header:
/// call [`header_len`] on the first [`PREAMBLE`] bytes to know how many that is.
///
/// # Errors
/// [`NpyError`] saying what is wrong.
pub fn parse_header(bytes: &[u8]) -> Result<NpyHeader, NpyError> {
    let total = header_len(bytes)?;
    if bytes.len() < total {
        return Err(NpyError::Truncated {
            needed: total,
            has: bytes.len(),
        });
    }
    let version = (bytes[6], bytes[7]);
    let start = if version.0 == 1 { 10 } else { 12 };
    let text = &bytes[start..total];
    let text = if version.0 == 3 {
        std::str::from_utf8(text).map_err(|_| NpyError::Encoding("valid UTF-8"))?
    } else {
        if !text.is_ascii() {
            return Err(NpyError::Encoding("ASCII (required before format 3.0)"));
        }
        std::str::from_utf8(text).map_err(|_| NpyError::Encoding("ASCII"))?
    };
    let dict = parse_dict(text)?;
    let descr = dict.descr.ok_or(NpyError::MissingKey("descr"))?;
    let fortran = dict
        .fortran_order
        .ok_or(NpyError::MissingKey("fortran_order"))?;
    let shape = dict.shape.ok_or(NpyError::MissingKey("shape"))?;
    if shape.len() > crate::format::MAX_RANK {
        return Err(NpyError::TooManyDims(shape.len(), crate::format::MAX_RANK));
    }
    // with at most one axis longer than 1, Fortran order and C order are the same bytes
    let fortran = fortran && shape.iter().filter(|&&d| d > 1).count() > 1;
    let (dtype, big_endian) = DType::from_npy_descr_any_order(&descr).map_err(NpyError::Dtype)?;
    Ok(NpyHeader {
        version,
        dtype,
        shape,
        data_offset: total as u64,
        fortran,
        big_endian,
    })
}

/// Bytes of data a tensor of `shape` and `dtype` holds, or `None` if the element count
/// or the byte count overflows (or does not fit an `i64` file offset).
#[must_use]
pub fn data_bytes(shape: &[usize], dtype: DType) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))?
        .checked_mul(dtype.size() as u64)
        .filter(|&b| i64::try_from(b).is_ok())
}

/// Total header length (magic through the trailing newline) from the first
/// [`PREAMBLE`] bytes of a file.
///
/// # Errors
/// [`NpyError`] if the magic or version is wrong or the bytes are too few.
pub fn header_len(bytes: &[u8]) -> Result<usize, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(NpyError::NotNpy);
    }
    match bytes[6] {
        1 => Ok(10 + usize::from(u16::from_le_bytes([bytes[8], bytes[9]]))),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(NpyError::Truncated {
                    needed: 12,
                    has: bytes.len(),
                });
            }
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            Ok(12usize.saturating_add(n as usize))
        }
        v => Err(NpyError::Version(v, bytes[7])),
    }
}

pub(crate) use crate::error::shown;

#[derive(Default)]
struct Dict {
    descr: Option<String>,
    fortran_order: Option<bool>,
    shape: Option<Vec<usize>>,
}

struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), NpyError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(NpyError::Malformed(format!(
                "expected '{}' at column {}",
                c as char,
                self.pos + 1
            )))
        }
    }
    fn string(&mut self) -> Result<String, NpyError> {
        let q = self
            .peek()
            .ok_or_else(|| NpyError::Malformed("unexpected end".into()))?;
        if q != b'\'' && q != b'"' {
            return Err(NpyError::Malformed(format!(
                "expected a quoted string at column {}",
                self.pos + 1
            )));
        }
        self.pos += 1;
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos] != q {
            self.pos += 1;
        }
        if self.pos >= self.s.len() {
            return Err(NpyError::Malformed("unterminated string".into()));
        }
        let out = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(out)
    }
    fn word(&mut self) -> &[u8] {
        self.ws();
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_')
        {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }
}

fn parse_dict(text: &str) -> Result<Dict, NpyError> {
    let mut c = Cursor {
        s: text.as_bytes(),
        pos: 0,
    };
    let mut d = Dict::default();
    c.expect(b'{')?;
    loop {
        if c.eat(b'}') {
            break;
        }
        let key = c.string()?;
        c.expect(b':')?;
        match key.as_str() {
            "descr" => {
                if c.peek() == Some(b'[') {
                    return Err(NpyError::Structured);
                }
                d.descr = Some(c.string()?);
            }
            "fortran_order" => {
                d.fortran_order = Some(match c.word() {
                    b"True" => true,
                    b"False" => false,
                    _ => {
                        return Err(NpyError::Malformed(
                            "fortran_order is not True or False".into(),
                        ));
                    }
                });
            }
            "shape" => {
                c.expect(b'(')?;
                let mut shape = Vec::new();
                loop {
                    if c.eat(b')') {
                        break;
                    }
                    let w = c.word();
                    let w = std::str::from_utf8(w).unwrap_or("");
                    let w = w.strip_suffix('L').unwrap_or(w);
                    let n: usize = w.parse().map_err(|_| {
                        NpyError::Malformed(format!(
                            "shape entry '{w}' is not a non-negative integer"
                        ))
                    })?;
                    shape.push(n);
                    if !c.eat(b',') {
                        c.expect(b')')?;
                        break;
                    }
                }
                d.shape = Some(shape);
            }
            other => {
                return Err(NpyError::Malformed(format!(
                    "unknown key '{}'",
                    shown(other)
                )));
            }
        }
        if !c.eat(b',') {
            c.expect(b'}')?;
            break;
        }
    }
    Ok(d)
}

/// Builds a header for `dtype` and `shape`, padded with spaces so that the data starts on
/// a 64-byte boundary, as numpy does. Uses version 1.0 unless the header needs 2.0.
#[must_use]
pub fn build_header(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let shape_txt = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        dtype.npy_descr(),
        shape_txt
    );
    for (version, prefix) in [(1u8, 10usize), (2u8, 12usize)] {
        let unpadded = prefix + dict.len() + 1;
        let total = unpadded.div_ceil(64) * 64;
        let hlen = total - prefix;
        if version == 1 && hlen > usize::from(u16::MAX) {
            continue;
        }
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(hlen as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(hlen as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(total - 1, b' ');
        out.push(b'\n');
        return out;
    }
    unreachable!("a v2 header holds 4 GiB of text")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips_headers() {
        for shape in [vec![7], vec![3, 4], vec![2, 3, 5, 7], vec![]] {
            for d in DType::ALL {
                let h = build_header(d, &shape);
                assert_eq!(h.len() % 64, 0);
                let p = parse_header(&h).unwrap();
                assert_eq!(p.dtype, d);
                assert_eq!(p.shape, shape);
                assert_eq!(p.data_offset as usize, h.len());
            }
        }
    }

    #[test]
    fn parses_numpy_written_header_v2_and_v3() {
        let dict = b"{'descr': '<f8', 'fortran_order': False, 'shape': (10, 3), }    \n";
        for v in [2u8, 3] {
            let mut h = MAGIC.to_vec();
            h.extend_from_slice(&[v, 0]);
            h.extend_from_slice(&(dict.len() as u32).to_le_bytes());
            h.extend_from_slice(dict);
            let p = parse_header(&h).unwrap();
            assert_eq!(p.version, (v, 0));
            assert_eq!(p.shape, vec![10, 3]);
            assert_eq!(p.dtype, DType::F64);
        }
    }

    #[test]
    fn refuses_bad_headers() {
        let mk = |dict: &str| {
            let mut h = MAGIC.to_vec();
            h.extend_from_slice(&[1, 0]);
            h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
            h.extend_from_slice(dict.as_bytes());
            parse_header(&h)
        };
        // Fortran order and big-endian elements are read (through `chunks`)
        let f = mk("{'descr': '>f4', 'fortran_order': True, 'shape': (3, 4), }").unwrap();
        assert!(f.fortran && f.big_endian && f.dtype == DType::F32);
        let c = mk("{'descr': '>u1', 'fortran_order': True, 'shape': (1, 4, 1), }").unwrap();
        assert!(!c.fortran && !c.big_endian, "{c:?}");
        assert!(matches!(
            mk("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }").unwrap_err(),
            NpyError::Dtype(m) if m.contains("object")
        ));
        assert_eq!(
            mk("{'descr': '<f4', 'shape': (3,), }").unwrap_err(),
            NpyError::MissingKey("fortran_order")
        );
        assert!(matches!(
            mk("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }").unwrap_err(),
            NpyError::Malformed(m) if m.contains("shape entry")
        ));
        assert!(matches!(
            mk("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)").unwrap_err(),
            NpyError::Malformed(_)
        ));
        assert!(matches!(
            mk("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }").unwrap_err(),
            NpyError::Structured
        ));
        assert_eq!(
            parse_header(b"PK\x03\x04 not numpy").unwrap_err(),
            NpyError::NotNpy
        );
        let mut v9 = MAGIC.to_vec();
        v9.extend_from_slice(&[9, 1, 0, 0]);
        assert_eq!(header_len(&v9).unwrap_err(), NpyError::Version(9, 1));
        // Fortran order of a 1-d array is the same bytes as C order: accepted
        assert!(mk("{'descr': '<f4', 'fortran_order': True, 'shape': (5,), }").is_ok());
    }
}
