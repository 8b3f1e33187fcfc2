//! The parts of a JPEG 2000 file read here rather than by OpenJPEG: the JP2 boxes (to
//! find the codestream, the colour boxes that change what a pixel is, and the GeoJP2
//! georeferencing) and the codestream's main header (`SIZ`: the image and tile grid, the
//! components' precision, sign and sampling) and tile-part headers (`SOT`: how many
//! stored bytes each tile has, which bounds the memory decoding it takes).
//!
//! Every length is checked against the bytes left before anything is sized by it, so
//! that a damaged or hostile file is refused in one line, never followed past its end;
//! the parser is fuzzed (`fuzz/fuzz_targets/jp2_header.rs`).

/// The JP2 signature box, the first 12 bytes of a `.jp2` file.
pub const JP2_SIGNATURE: [u8; 12] = [0, 0, 0, 12, b'j', b'P', b' ', b' ', 13, 10, 0x87, 10];

/// The first four bytes of a raw codestream (`.j2k`, `.j2c`): `SOC` then `SIZ`.
pub const J2K_SIGNATURE: [u8; 4] = [0xff, 0x4f, 0xff, 0x51];

/// The UUID of a GeoJP2 box: a degenerate GeoTIFF holding the georeferencing.
const GEOJP2_UUID: [u8; 16] = [
    0xb1, 0x4b, 0xf8, 0xbd, 0x08, 0x3d, 0x4b, 0x43, 0xa5, 0xae, 0x8c, 0xd7, 0xd5, 0xa6, 0xce, 0x03,
];

/// Most tile-parts counted: a real file has one or a few per tile; the scan of tile-part
/// headers stops (and the file is refused) past this.
const MAX_TILE_PARTS: usize = 1 << 22;

/// One component of the codestream (`SIZ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Component {
    /// Bits a sample, 1 to 38.
    pub precision: u8,
    /// Samples are signed.
    pub signed: bool,
    /// Horizontal and vertical sub-sampling (1: one sample a pixel).
    pub sub: (u8, u8),
}

/// What the file holds, as far as tilestream needs to know before decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// A JP2 file (boxes around the codestream) rather than a raw codestream.
    pub jp2: bool,
    /// Byte offset and length of the codestream in the file.
    pub codestream: (u64, u64),
    /// The image area on the reference grid: `XOsiz, YOsiz, Xsiz, Ysiz`.
    pub image: (u32, u32, u32, u32),
    /// The tile grid: `XTOsiz, YTOsiz` and `XTsiz, YTsiz`.
    pub tile_origin: (u32, u32),
    /// Tile width and height.
    pub tile: (u32, u32),
    /// Components in codestream order.
    pub components: Vec<Component>,
    /// Stored bytes of the tile with the most, over all its tile-parts.
    pub max_tile_bytes: u64,
    /// The JP2 boxes that change what a decoded pixel is: `pclr` (a palette),
    /// `cmap`, `cdef` (channel definitions: alpha, reordering), as their four-letter
    /// names, in the order met.
    pub colour_boxes: Vec<[u8; 4]>,
    /// The `colr` box's enumerated colour space, when it gives one (16 sRGB, 17 grey,
    /// 18 sYCC, 12 CMYK).
    pub colour_space: Option<u32>,
    /// The GeoTIFF bytes of a GeoJP2 box.
    pub geojp2: Option<Vec<u8>>,
}

impl Header {
    /// Image width and height in pixels.
    #[must_use]
    pub fn size(&self) -> (u32, u32) {
        let (x0, y0, x1, y1) = self.image;
        (x1 - x0, y1 - y0)
    }

    /// Tiles across and down.
    #[must_use]
    pub fn tiles(&self) -> (u32, u32) {
        let (tx0, ty0) = self.tile_origin;
        let (_, _, x1, y1) = self.image;
        (
            (x1 - tx0).div_ceil(self.tile.0),
            (y1 - ty0).div_ceil(self.tile.1),
        )
    }

    /// Whether the tiles lie on a grid that starts at the image's first pixel, so that
    /// tile `(i, j)` holds pixels `i * XTsiz..` across and `j * YTsiz..` down.
    #[must_use]
    pub fn tiles_on_image_grid(&self) -> bool {
        self.tile_origin == (self.image.0, self.image.1)
    }
}

/// Big-endian reads that fail, with the field's name, past the end.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| format!("the file ends inside its {what}"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let s = self.take(2, what)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let s = self.take(4, what)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
}

/// Reads `len` bytes at `offset` of the file; fewer at its end.
pub trait ReadAt {
    /// The bytes at `offset`, at most `len` of them (fewer only at the file's end).
    ///
    /// # Errors
    /// A read error, as text.
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, String>;
    /// The file's length.
    fn size(&self) -> u64;
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let end = start.saturating_add(len).min(self.len());
        Ok(self[start..end].to_vec())
    }
    fn size(&self) -> u64 {
        self.len() as u64
    }
}

/// Most bytes of a box read whole (the `jp2h` header box, a GeoJP2 box); a larger one
/// is refused, where it would only be one when damaged.
const MAX_META_BOX: u64 = 16 << 20;

/// A box: its type, where its contents start, and their length.
struct BoxAt {
    kind: [u8; 4],
    body: u64,
    len: u64,
}

/// The box at `at` of a file (or superbox contents) ending at `end`.
fn box_at(f: &(impl ReadAt + ?Sized), at: u64, end: u64) -> Result<BoxAt, String> {
    let head = f.read_at(at, 16)?;
    let mut c = Cursor { b: &head, at: 0 };
    let lbox = c.u32("box header")?;
    let mut kind = [0u8; 4];
    kind.copy_from_slice(c.take(4, "box header")?);
    let (body, total) = match lbox {
        0 => (at + 8, end - at),
        1 => {
            let xl = c.u64("box header")?;
            (at + 16, xl)
        }
        n => (at + 8, u64::from(n)),
    };
    let head_len = body - at;
    if total < head_len || at.checked_add(total).is_none_or(|e| e > end) {
        return Err(format!(
            "its '{}' box at byte {at} says {total} bytes, more than the {} left",
            fourcc(kind),
            end - at
        ));
    }
    Ok(BoxAt {
        kind,
        body,
        len: total - head_len,
    })
}

/// A box type as text: its printable ASCII characters, `?` for any other byte (a damaged
/// file's type may hold a line break, and a refusal is one line).
fn fourcc(kind: [u8; 4]) -> String {
    kind.iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// Reads the header of a JP2 file or raw codestream `f`.
///
/// # Errors
/// One line saying why the file is not one tilestream reads: not JPEG 2000, truncated,
/// or inconsistent.
pub fn read(f: &(impl ReadAt + ?Sized)) -> Result<Header, String> {
    let len = f.size();
    let first = f.read_at(0, 12)?;
    if first.starts_with(&J2K_SIGNATURE) {
        return codestream(f, 0, len, false);
    }
    if first != JP2_SIGNATURE {
        return Err("it is not a JPEG 2000 file (no JP2 signature box or codestream)".into());
    }
    let mut at = 12;
    let mut colour_boxes = Vec::new();
    let mut colour_space = None;
    let mut geojp2 = None;
    let mut header_seen = false;
    while at < len {
        let b = box_at(f, at, len)?;
        match &b.kind {
            b"jp2h" => {
                if b.len > MAX_META_BOX {
                    return Err(format!("its header box is {} bytes", b.len));
                }
                header_seen = true;
                let end = b.body + b.len;
                let mut inner = b.body;
                while inner < end {
                    let ib = box_at(f, inner, end)?;
                    match &ib.kind {
                        k @ (b"pclr" | b"cmap" | b"cdef") => colour_boxes.push(*k),
                        b"colr" if colour_space.is_none() => {
                            let body = f.read_at(ib.body, 7)?;
                            // METH 1: an enumerated colour space follows
                            if body.len() == 7 && body[0] == 1 {
                                colour_space =
                                    Some(u32::from_be_bytes([body[3], body[4], body[5], body[6]]));
                            }
                        }
                        _ => {}
                    }
                    inner = ib.body + ib.len;
                }
            }
            b"uuid" if b.len >= 16 && b.len <= MAX_META_BOX => {
                let body = f.read_at(b.body, usize::try_from(b.len).unwrap_or(0))?;
                if body.len() as u64 == b.len && body[..16] == GEOJP2_UUID && geojp2.is_none() {
                    geojp2 = Some(body[16..].to_vec());
                }
            }
            b"jp2c" => {
                if !header_seen {
                    return Err("its codestream comes before its header box".into());
                }
                let mut h = codestream(f, b.body, b.len, true)?;
                h.colour_boxes = colour_boxes;
                h.colour_space = colour_space;
                // a GeoJP2 box may follow the codestream
                let mut after = b.body + b.len;
                while h.geojp2.is_none() && geojp2.is_none() && after < len {
                    let Ok(ab) = box_at(f, after, len) else {
                        break;
                    };
                    if &ab.kind == b"uuid" && ab.len >= 16 && ab.len <= MAX_META_BOX {
                        let body = f.read_at(ab.body, usize::try_from(ab.len).unwrap_or(0))?;
                        if body.len() as u64 == ab.len && body[..16] == GEOJP2_UUID {
                            geojp2 = Some(body[16..].to_vec());
                        }
                    }
                    after = ab.body + ab.len;
                }
                h.geojp2 = geojp2;
                return Ok(h);
            }
            _ => {}
        }
        at = b.body + b.len;
    }
    Err("it has no codestream box".into())
}

/// Reads the main header and tile-part headers of the codestream at `start`, `len`
/// bytes long.
fn codestream(
    f: &(impl ReadAt + ?Sized),
    start: u64,
    len: u64,
    jp2: bool,
) -> Result<Header, String> {
    // SOC, SIZ marker and length
    let head = f.read_at(start, 6)?;
    let mut c = Cursor { b: &head, at: 0 };
    if c.u16("codestream")? != 0xff4f || c.u16("codestream")? != 0xff51 {
        return Err("its codestream does not start with SOC and SIZ markers".into());
    }
    let lsiz = c.u16("SIZ marker")?;
    let siz = f.read_at(start + 6, usize::from(lsiz).saturating_sub(2))?;
    let mut c = Cursor { b: &siz, at: 0 };
    let _rsiz = c.u16("SIZ marker")?;
    let x1 = c.u32("SIZ marker")?;
    let y1 = c.u32("SIZ marker")?;
    let x0 = c.u32("SIZ marker")?;
    let y0 = c.u32("SIZ marker")?;
    let tw = c.u32("SIZ marker")?;
    let th = c.u32("SIZ marker")?;
    let tx0 = c.u32("SIZ marker")?;
    let ty0 = c.u32("SIZ marker")?;
    let ncomp = c.u16("SIZ marker")?;
    if x0 >= x1 || y0 >= y1 || tw == 0 || th == 0 || tx0 > x0 || ty0 > y0 {
        return Err(format!(
            "its SIZ marker is inconsistent: image {x0}..{x1} x {y0}..{y1}, tiles of \
             {tw} x {th} from ({tx0}, {ty0})"
        ));
    }
    if u64::from(tx0) + u64::from(tw) <= u64::from(x0)
        || u64::from(ty0) + u64::from(th) <= u64::from(y0)
    {
        return Err("its first tile does not hold the image's first pixel".into());
    }
    if ncomp == 0 || ncomp > 16384 {
        return Err(format!("its SIZ marker says {ncomp} components"));
    }
    if usize::from(lsiz) != 38 + 3 * usize::from(ncomp) {
        return Err(format!(
            "its SIZ marker is {lsiz} bytes long where {ncomp} components take {}",
            38 + 3 * usize::from(ncomp)
        ));
    }
    let mut components = Vec::with_capacity(usize::from(ncomp));
    for _ in 0..ncomp {
        let s = c.u8("SIZ marker")?;
        let sub = (c.u8("SIZ marker")?, c.u8("SIZ marker")?);
        let precision = (s & 0x7f) + 1;
        if precision > 38 || sub.0 == 0 || sub.1 == 0 {
            return Err(format!(
                "its SIZ marker gives a component of {precision} bits sampled every \
                 {} x {} pixels",
                sub.0, sub.1
            ));
        }
        components.push(Component {
            precision,
            signed: s & 0x80 != 0,
            sub,
        });
    }
    let mut h = Header {
        jp2,
        codestream: (start, len),
        image: (x0, y0, x1, y1),
        tile_origin: (tx0, ty0),
        tile: (tw, th),
        components,
        max_tile_bytes: 0,
        colour_boxes: Vec::new(),
        colour_space: None,
        geojp2: None,
    };
    let (ta, td) = h.tiles();
    let n_tiles = u64::from(ta) * u64::from(td);
    if n_tiles > 1 << 16 {
        // the standard's limit: a tile index is 16 bits
        return Err(format!(
            "it has {ta} x {td} tiles, more than the 65535 a codestream can index"
        ));
    }
    // the main header's marker segments, then the tile-parts
    let end = start + len;
    let mut at = start + 4 + u64::from(lsiz);
    loop {
        let m = f.read_at(at, 4)?;
        let mut c = Cursor { b: &m, at: 0 };
        let marker = c.u16("main header")?;
        if marker == 0xff90 {
            break;
        }
        if marker >> 8 != 0xff {
            return Err(format!("its main header has no marker at byte {at}"));
        }
        let l = c.u16("main header")?;
        at += 2 + u64::from(l);
        if at > end {
            return Err("its main header runs past the codestream's end".into());
        }
    }
    let mut per_tile = vec![0u64; usize::try_from(n_tiles).unwrap_or(0)];
    let mut parts = 0usize;
    while at + 12 <= end {
        let m = f.read_at(at, 12)?;
        let mut c = Cursor { b: &m, at: 0 };
        let marker = c.u16("tile-part header")?;
        if marker == 0xffd9 {
            break; // EOC
        }
        if marker != 0xff90 {
            return Err(format!("its tile-part at byte {at} has no SOT marker"));
        }
        let _lsot = c.u16("tile-part header")?;
        let isot = c.u16("tile-part header")?;
        let psot = c.u32("tile-part header")?;
        let part_len = if psot == 0 { end - at } else { u64::from(psot) };
        if part_len < 12 || at + part_len > end {
            return Err(format!(
                "its tile-part at byte {at} says {part_len} bytes, past the codestream's end"
            ));
        }
        let slot = per_tile
            .get_mut(usize::from(isot))
            .ok_or_else(|| format!("its tile-part at byte {at} names tile {isot} of {n_tiles}"))?;
        *slot += part_len;
        parts += 1;
        if parts > MAX_TILE_PARTS {
            return Err(format!("it has more than {MAX_TILE_PARTS} tile-parts"));
        }
        at += part_len;
    }
    h.max_tile_bytes = per_tile.iter().copied().max().unwrap_or(0);
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A codestream of one 8-bit component, `w x h` pixels in tiles of `tw x th`, with
    /// tile-parts of `part` bytes each (not decodable: only headers).
    fn codestream_bytes(w: u32, h: u32, tw: u32, th: u32, part: u32) -> Vec<u8> {
        let mut b = vec![0xff, 0x4f, 0xff, 0x51, 0, 41, 0, 0];
        for v in [w, h, 0, 0, tw, th, 0, 0] {
            b.extend(v.to_be_bytes());
        }
        b.extend([0, 1, 7, 1, 1]);
        // a COD-like segment of 4 bytes
        b.extend([0xff, 0x52, 0, 4, 0, 0]);
        let n = w.div_ceil(tw) * h.div_ceil(th);
        for t in 0..n {
            b.extend([0xff, 0x90, 0, 10]);
            b.extend((t as u16).to_be_bytes());
            b.extend(part.to_be_bytes());
            b.extend([0, 1]);
            b.resize(b.len() + part as usize - 12, 0);
        }
        b.extend([0xff, 0xd9]);
        b
    }

    #[test]
    fn a_codestream_gives_its_grid_and_largest_tile() {
        let b = codestream_bytes(100, 70, 32, 32, 40);
        let h = read(&b[..]).expect("header");
        assert!(!h.jp2);
        assert_eq!(h.size(), (100, 70));
        assert_eq!(h.tiles(), (4, 3));
        assert!(h.tiles_on_image_grid());
        assert_eq!(h.max_tile_bytes, 40);
        assert_eq!(
            h.components,
            vec![Component {
                precision: 8,
                signed: false,
                sub: (1, 1)
            }]
        );
    }

    #[test]
    fn damaged_headers_are_refused_in_one_line() {
        let good = codestream_bytes(64, 64, 32, 32, 20);
        // a tile-part longer than the codestream
        let mut b = good.clone();
        let sot = b.windows(2).position(|w| w == [0xff, 0x90]).expect("sot");
        b[sot + 6..sot + 10].copy_from_slice(&100_000u32.to_be_bytes());
        let e = read(&b[..]).expect_err("long part");
        assert!(e.contains("past the codestream's end"), "{e}");
        // a tile index past the grid
        let mut b = good.clone();
        b[sot + 4..sot + 6].copy_from_slice(&9u16.to_be_bytes());
        let e = read(&b[..]).expect_err("tile index");
        assert!(e.contains("names tile 9 of 4"), "{e}");
        // an empty image
        let mut b = good.clone();
        b[8..12].copy_from_slice(&0u32.to_be_bytes());
        let e = read(&b[..]).expect_err("empty");
        assert!(e.contains("inconsistent"), "{e}");
        // every truncation is refused or read, never a panic
        for n in 0..good.len() {
            let _ = read(&good[..n]);
        }
        assert!(read(&b"not a jpeg 2000 file"[..]).is_err());
    }

    #[test]
    fn a_jp2_file_gives_its_boxes() {
        let cs = codestream_bytes(16, 16, 16, 16, 30);
        let mut f = JP2_SIGNATURE.to_vec();
        let push = |f: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]| {
            f.extend(((body.len() + 8) as u32).to_be_bytes());
            f.extend(kind);
            f.extend(body);
        };
        let mut jp2h = Vec::new();
        push(&mut jp2h, b"ihdr", &[0; 14]);
        push(&mut jp2h, b"colr", &[1, 0, 0, 0, 0, 0, 17]);
        push(&mut jp2h, b"cdef", &[0, 0]);
        push(&mut f, b"ftyp", b"jp2 \0\0\0\0jp2 ");
        push(&mut f, b"jp2h", &jp2h);
        let mut geo = GEOJP2_UUID.to_vec();
        geo.extend(b"II*\0");
        push(&mut f, b"uuid", &geo);
        let at = f.len() as u64 + 8;
        push(&mut f, b"jp2c", &cs);
        let h = read(&f[..]).expect("jp2");
        assert!(h.jp2);
        assert_eq!(h.codestream, (at, cs.len() as u64));
        assert_eq!(h.colour_space, Some(17));
        assert_eq!(h.colour_boxes, vec![*b"cdef"]);
        assert_eq!(h.geojp2.as_deref(), Some(&b"II*\0"[..]));
    }
}
