//! How a plan's tiles map onto files: what each tile reads ([`Read`]) and where its
//! output goes ([`Write`]). Flat plans, box plans with halos and the patch order all
//! implement [`Layout`]; the stage scheduler streams any of them, and the resume journal
//! checks the tiles of any of them, without knowing which.

use crate::format::Touch;

/// One window a tile maps: elements `[start, start + len)` of input `input`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// Index of the input file.
    pub input: usize,
    /// First element (flat index into the file's data).
    pub start: u64,
    /// Elements mapped.
    pub len: u64,
    /// Which of the mapped pages the tile touches (and the read stage prefaults).
    pub touch: Touch,
}

/// One positioned write of a tile's output buffer: `len` elements from element
/// `buf_elem` of the buffer to element `file_elem` of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    /// Destination element in the output file.
    pub file_elem: u64,
    /// Source element in the staging buffer.
    pub buf_elem: u64,
    /// Elements.
    pub len: u64,
}

/// How a plan's tiles map onto files: what each tile reads and where its output goes.
/// [`crate::scheduler::run`] streams flat C-order tiles; box-shaped tiles with halos (filters, transpose)
/// use their own layout through [`crate::scheduler::run_layout`].
pub trait Layout: Sync {
    /// A tile of this layout, handed to the compute callback.
    type Tile: Copy + Send + Sync + std::fmt::Debug;
    /// Number of tiles.
    fn num_tiles(&self) -> usize;
    /// The `i`-th tile in plan order.
    fn tile(&self, i: usize) -> Self::Tile;
    /// The windows tile `t` maps, appended to `out` (in the order compute receives them).
    fn reads(&self, t: &Self::Tile, out: &mut Vec<Read>);
    /// Output elements of tile `t` (the used length of its staging buffer).
    fn out_elems(&self, t: &Self::Tile) -> u64;
    /// Where tile `t`'s output buffer goes, appended to `out`.
    fn writes(&self, t: &Self::Tile, out: &mut Vec<Write>);
    /// Staging slots.
    fn depth(&self) -> usize;
    /// Bytes reserved per slot for the input windows (page slack included).
    fn window_bytes(&self) -> u64;
    /// Output staging elements per slot (the largest tile's output).
    fn out_slot_elems(&self) -> u64;
}
