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
    /// `len` bytes of page-locked memory of CUDA device `n`'s driver for `what` (`the
    /// blocks`), or the one line refusing it: why, without a device error's advice,
    /// which is about `device=`.
    pub(crate) fn locked(n: usize, len: usize, what: &str) -> Result<Self> {
        use crate::device::DeviceError;
        crate::backend::cuda::page_locked(n, len)
            .map(HostBuf::Locked)
            .map_err(|e| {
                let why = match e {
                    Error::Device(DeviceError::NotBuilt) => {
                        "this tilestream was built without CUDA support".to_string()
                    }
                    Error::Device(DeviceError::NoDriver) => {
                        "no CUDA driver was found (libcuda.so could not be loaded)".to_string()
                    }
                    Error::Device(DeviceError::NoDevice { count: 0, .. }) => {
                        "the CUDA driver reports no GPU on this machine".to_string()
                    }
                    other => other.to_string(),
                };
                Error::invalid(format!(
                    "pinned=cuda:{n} asks for {what} in page-locked memory of CUDA device \
                     {n}, but {why}: leave `pinned` out where no GPU is used"
                ))
            })
    }

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
