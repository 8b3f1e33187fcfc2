//! What flows through the scheduler, and what a backend plugs into it.
//!
//! A tile travels from stage to stage as a [`Morsel`]: its sequence number in plan order,
//! its inputs (mapped windows read in place, or a staging [`Slot`] the read stage filled),
//! its output slot and the reservations that pay for them. The compute stage hands the
//! morsel to a [`TileKernel`], which either computes it at once (the CPU: the returned
//! [`Pending`] is ready) or starts it and returns a handle that the write stage waits on
//! before it touches the output (a device backend: copy in, kernel and copy out queued on
//! a stream). Because the pending handle owns the morsel, a backend cannot lose a slot and
//! the scheduler cannot reuse one that is still in use.
//!
//! Slots are allocated by the kernel ([`TileKernel::alloc_slot`]), so each backend gets
//! memory of its own kind: plain aligned host memory on the CPU, page-locked memory for a
//! device's copies. Every slot carries the [`Reservation`] that pays for it.

use crate::budget::Reservation;
use crate::error::{Error, Result};
use crate::format::Window;

/// Memory a staging slot lives in, owned by the backend that allocated it.
pub trait SlotMemory: Send {
    /// The slot's bytes.
    fn as_bytes(&self) -> &[u8];
    /// The slot's bytes, writable.
    fn as_bytes_mut(&mut self) -> &mut [u8];
}

/// Plain host memory aligned for any element type: the CPU backend's staging memory.
pub struct HostMemory {
    words: Vec<u64>,
    len: usize,
}

impl HostMemory {
    /// `len` zeroed bytes, 8-byte aligned.
    #[must_use]
    pub fn new(len: usize) -> Self {
        HostMemory {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }
}

impl SlotMemory for HostMemory {
    fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// A staging slot: backend memory and the budget reservation that pays for it. Dropping
/// the slot frees both.
pub struct Slot {
    mem: Box<dyn SlotMemory>,
    _reservation: Reservation,
}

impl Slot {
    /// A slot over `mem`, paid for by `reservation`.
    #[must_use]
    pub fn new(mem: Box<dyn SlotMemory>, reservation: Reservation) -> Self {
        Slot {
            mem,
            _reservation: reservation,
        }
    }

    /// A slot of `len` bytes of plain host memory.
    #[must_use]
    pub fn host(len: usize, reservation: Reservation) -> Self {
        Slot::new(Box::new(HostMemory::new(len)), reservation)
    }

    /// The slot's bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        self.mem.as_bytes()
    }

    /// The slot's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.as_bytes_mut()
    }
}

/// Where a tile's inputs are.
pub(super) enum Inputs {
    /// The operation reads no input (`gen`).
    None,
    /// Mapped (or decoded) windows, read in place; the reservation pays for them.
    Mapped(Vec<Window>, Reservation),
    /// Copied into a staging slot: byte ranges of each read.
    Staged(Slot, Vec<(usize, usize)>),
}

/// What an input pool hands the read stage for one tile: the reservation its windows are
/// mapped under, or the staging slot its inputs are copied into.
pub(super) enum InputToken {
    Mapped(Reservation),
    Staged(Slot),
}

impl Inputs {
    /// The bytes of each read, in the layout's order.
    fn slices(&self) -> Vec<&[u8]> {
        match self {
            Inputs::None => Vec::new(),
            Inputs::Mapped(windows, _) => windows.iter().map(Window::bytes).collect(),
            Inputs::Staged(slot, ranges) => {
                ranges.iter().map(|&(a, b)| &slot.bytes()[a..b]).collect()
            }
        }
    }

    /// Releases the inputs, giving back what the next tile can reuse.
    pub(super) fn release(self) -> Option<InputToken> {
        match self {
            Inputs::None => None,
            // the windows are unmapped here: that is what keeps resident memory flat
            Inputs::Mapped(windows, r) => {
                drop(windows);
                Some(InputToken::Mapped(r))
            }
            Inputs::Staged(slot, _) => Some(InputToken::Staged(slot)),
        }
    }
}

/// One tile on its way through the stages (polars-stream's morsel): its sequence number
/// in plan order, its inputs and output slot, and the reservations that pay for them.
pub struct Morsel<T> {
    pub(super) seq: usize,
    pub(super) tile: T,
    pub(super) inputs: Inputs,
    pub(super) out: Option<Slot>,
    /// Bytes of the output slot this tile uses.
    pub(super) out_len: usize,
    /// Bytes the tile read from its inputs (touched elements), for progress reports.
    pub(super) in_bytes: u64,
}

impl<T: Copy> Morsel<T> {
    /// Index of the tile in plan order.
    #[must_use]
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// The tile.
    #[must_use]
    pub fn tile(&self) -> T {
        self.tile
    }

    /// The tile's inputs and its output bytes (the used part of the output slot; empty
    /// when the run writes no output).
    pub fn io(&mut self) -> (Vec<&[u8]>, &mut [u8]) {
        let ins = self.inputs.slices();
        let out = match self.out.as_mut() {
            Some(s) => &mut s.bytes_mut()[..self.out_len],
            None => &mut [],
        };
        (ins, out)
    }
}

/// A tile the kernel has been given: either done, or in progress on the backend. The
/// scheduler waits for every pending tile it was given, even after another tile failed,
/// before it frees the tile's slots: a device may still be copying into them.
pub enum Pending<T> {
    /// Computed; the output slot holds the result.
    Ready(Morsel<T>),
    /// In progress: waiting returns the morsel once its output slot holds the result
    /// (a device backend waits on the tile's event here).
    Later(Box<dyn FnOnce() -> Result<Morsel<T>> + Send>),
}

impl<T> Pending<T> {
    /// Waits for the tile (at once if ready).
    ///
    /// # Errors
    /// The error the backend reports for the tile.
    pub fn wait(self) -> Result<Morsel<T>> {
        match self {
            Pending::Ready(m) => Ok(m),
            Pending::Later(f) => f(),
        }
    }
}

/// What the compute stage runs: a backend's kernel for one operation, prepared once per
/// run (resident operands uploaded, kernels compiled) and then given tile after tile in
/// plan order.
pub trait TileKernel<T>: Send {
    /// Whether the read stage copies each tile's inputs into a staging slot of this
    /// kernel's memory (a device backend copying from page-locked memory) rather than
    /// handing over the mapped windows to be read in place (the CPU's zero-copy path).
    fn staged_inputs(&self) -> bool {
        false
    }

    /// Allocates a staging slot of `len` bytes, paid for by `reservation`.
    ///
    /// # Errors
    /// If the backend cannot allocate the memory.
    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        Ok(Slot::host(len, reservation))
    }

    /// Computes tile `m`, or starts it and returns the handle to wait on. Tiles arrive
    /// in plan order, so a kernel may carry state from one to the next.
    ///
    /// # Errors
    /// If the tile cannot be computed (or started).
    fn submit(&mut self, m: Morsel<T>) -> Result<Pending<T>>;
}

/// A synchronous kernel from a closure `compute(tile, inputs, output)`, computing each
/// tile where it lies (inputs in place, output in a host slot).
pub struct InPlace<F>(pub F);

impl<T, F> TileKernel<T> for InPlace<F>
where
    T: Copy,
    F: FnMut(T, &[&[u8]], &mut [u8]) -> Result<()> + Send,
{
    fn submit(&mut self, mut m: Morsel<T>) -> Result<Pending<T>> {
        let tile = m.tile;
        let (ins, out) = m.io();
        (self.0)(tile, &ins, out)?;
        Ok(Pending::Ready(m))
    }
}

/// Copies a tile's windows into a staging slot, each at an offset aligned for any
/// element type; returns the byte range of each.
pub(super) fn stage_windows(windows: &[Window], slot: &mut Slot) -> Result<Vec<(usize, usize)>> {
    let dst = slot.bytes_mut();
    let mut ranges = Vec::with_capacity(windows.len());
    let mut at = 0usize;
    for w in windows {
        let src = w.bytes();
        let end = at + src.len();
        if end > dst.len() {
            return Err(Error::Internal(format!(
                "a tile's inputs ({end} bytes) overflow their staging slot ({} bytes)",
                dst.len()
            )));
        }
        dst[at..end].copy_from_slice(src);
        ranges.push((at, end));
        at = end.next_multiple_of(64);
    }
    Ok(ranges)
}

/// Reads a tile's inputs straight into a staging slot with positioned reads (plain
/// `.npy` and raw inputs: no mapping, one copy from the page cache), each at an offset
/// aligned for any element type, laid out as [`stage_windows`] lays them out; returns
/// the byte range of each read, or `None` if an input is compressed (its chunks are
/// decoded into windows, then staged).
pub(super) fn stage_reads(
    files: &[&crate::format::TensorFile],
    reads: &[crate::layout::Read],
    slot: &mut Slot,
) -> Result<Option<Vec<(usize, usize)>>> {
    if reads.iter().any(|r| files[r.input].chunked().is_some()) {
        return Ok(None);
    }
    let dst = slot.bytes_mut();
    let mut ranges = Vec::with_capacity(reads.len());
    let mut at = 0usize;
    for r in reads {
        let f = files[r.input];
        let want = (r.touch.touched(r.len) * f.dtype().size() as u64) as usize;
        let end = at + want;
        if end > dst.len() {
            return Err(Error::Internal(format!(
                "a tile's inputs ({end} bytes) overflow their staging slot ({} bytes)",
                dst.len()
            )));
        }
        let Some(n) = f.read_into(r.start, r.len, r.touch, &mut dst[at..end])? else {
            return Err(Error::Internal("a plain input read as compressed".into()));
        };
        ranges.push((at, at + n));
        at = (at + n).next_multiple_of(64);
    }
    Ok(Some(ranges))
}
