//! Host buffers the engine fills and lends to code outside it (a user's function over
//! blocks, a training loop's batches): heap memory, or page-locked memory of a CUDA
//! device's driver for code that copies them to that GPU itself.

use crate::error::{Error, Result};
use crate::scheduler::SlotMemory;

/// Host memory the engine fills and lends out: a padded block a function reads, a batch a
/// training loop takes.
pub(crate) enum HostBuf {
    /// Heap memory grown to the largest block so far (8-byte words, so any element type
    /// is aligned).
    Heap(Vec<u64>),
    /// Page-locked memory (page-aligned) of the largest block, allocated up front.
    Locked(Box<dyn SlotMemory>),
    /// Left to Python for good ([`Block::keep_inputs`](crate::Block::keep_inputs)).
    Kept,
}

impl HostBuf {
    /// The first `len` bytes, to fill.
    pub(crate) fn bytes_mut(&mut self, len: usize) -> Result<&mut [u8]> {
        match self {
            HostBuf::Heap(words) => {
                if words.len() < len.div_ceil(8) {
                    words.resize(len.div_ceil(8), 0);
                }
                Ok(&mut bytemuck::cast_slice_mut::<u64, u8>(words)[..len])
            }
            HostBuf::Locked(mem) => mem
                .as_bytes_mut()
                .get_mut(..len)
                .ok_or_else(|| Error::Internal(format!("{len} bytes past a page-locked buffer"))),
            HostBuf::Kept => Err(Error::Internal("a buffer kept by Python for good".into())),
        }
    }

    /// The first `len` bytes, filled.
    pub(crate) fn bytes(&self, len: usize) -> &[u8] {
        match self {
            HostBuf::Heap(words) => &bytemuck::cast_slice::<u64, u8>(words)[..len],
            HostBuf::Locked(mem) => &mem.as_bytes()[..len],
            HostBuf::Kept => &[],
        }
    }

    /// Leaves the memory to whoever still points into it: it is never freed.
    pub(crate) fn leak(&mut self) {
        match std::mem::replace(self, HostBuf::Kept) {
            HostBuf::Heap(words) => {
                let _ = words.leak();
            }
            HostBuf::Locked(mem) => {
                let _ = Box::leak(mem);
            }
            HostBuf::Kept => {}
        }
    }
}
