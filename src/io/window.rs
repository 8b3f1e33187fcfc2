//! Windows of mapped files: the byte range one tile needs, page-aligned outward,
//! prefaulted by the read stage and unmapped when the tile is done; what makes resident
//! memory follow the tiles in flight rather than the file.

use memmap2::Mmap;

/// Faults in `len` bytes of `map` from `offset` (a page boundary) in one call where the
/// kernel has `MADV_POPULATE_READ` (5.14+), else by touching one byte per page.
pub(crate) fn populate(map: &Mmap, offset: usize, len: usize) {
    let len = len.min(map.len().saturating_sub(offset));
    if len == 0
        || map
            .advise_range(memmap2::Advice::PopulateRead, offset, len)
            .is_ok()
    {
        return;
    }
    let mut acc = 0u8;
    for b in map[offset..offset + len]
        .iter()
        .step_by(page_size() as usize)
    {
        acc ^= *b;
    }
    std::hint::black_box(acc);
}

/// True if every page of `map` is in the page cache (`mincore`). On error, false.
pub(crate) fn fully_resident(map: &Mmap) -> bool {
    let page = page_size() as usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes starting at a page boundary, and
    // `vec` has one byte per page of it, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    rc == 0 && vec.iter().all(|&v| v & 1 == 1)
}

/// Bytes that mapping `count` elements may cost beyond the data itself (page alignment at
/// both ends).
#[must_use]
pub fn window_slack() -> u64 {
    2 * page_size()
}

/// The system page size.
#[must_use]
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// The pages lying wholly inside the byte range `off .. off + len`, as a byte range
/// `lo .. hi` (empty, `hi <= lo`, when the range covers no whole page).
pub(crate) fn whole_pages(off: u64, len: u64) -> (u64, u64) {
    let page = page_size();
    (off.div_ceil(page) * page, (off + len) / page * page)
}

#[cfg(test)]
mod page_tests {
    use super::{page_size, whole_pages};

    #[test]
    fn whole_pages_keeps_only_pages_the_range_covers() {
        let p = page_size();
        assert_eq!(whole_pages(0, 3 * p), (0, 3 * p));
        assert_eq!(whole_pages(1, 3 * p), (p, 3 * p));
        assert_eq!(whole_pages(p - 1, p + 2), (p, 2 * p));
        // a few KiB inside one or two pages: nothing whole
        let (lo, hi) = whole_pages(p / 2, p);
        assert!(hi <= lo);
        let (lo, hi) = whole_pages(10, 100);
        assert!(hi <= lo);
    }
}

/// A byte range of an input file: mapped (unmapped on drop), or read into a compact
/// buffer for narrow windows (`Touch::Rows`).
#[derive(Debug)]
pub struct Window {
    map: Option<Mmap>,
    owned: Vec<u8>,
    skip: usize,
    len: usize,
}

impl Window {
    /// `len` bytes of `map` from byte `skip` (the map starts on a page boundary at or
    /// before the first byte wanted).
    pub(crate) fn mapped(map: Mmap, skip: usize, len: usize) -> Self {
        debug_assert!(skip + len <= map.len());
        Window {
            map: Some(map),
            owned: Vec::new(),
            skip,
            len,
        }
    }

    /// Bytes already read into memory (decoded chunks, column runs, an empty window).
    pub(crate) fn owned(owned: Vec<u8>) -> Self {
        Window {
            map: None,
            len: owned.len(),
            owned,
            skip: 0,
        }
    }

    /// The mapped data bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.skip..self.skip + self.len],
            None => &self.owned,
        }
    }
}
