//! The CUDA backend. [`source`] assembles the kernels' CUDA C for NVRTC (pure text,
//! tested everywhere); [`CudaDevice`] opens a device once per engine and prepares
//! [`TileKernel`](crate::scheduler::TileKernel)s that stage tiles through page-locked
//! slots and run them on a ring of streams (`runtime.rs`, with the `cuda` feature). A
//! build without the feature has the same types, uninhabited: nothing can construct
//! them and no method can panic (memmap2's stub pattern). Device discovery and NVRTC
//! live in [`crate::device`].

mod kernels;
pub mod source;

pub use crate::backend::{BlockAt, ElementwiseParams};

#[cfg(feature = "cuda")]
pub(crate) mod queue;
#[cfg(feature = "cuda")]
mod reduce;
#[cfg(feature = "cuda")]
mod runtime;
#[cfg(feature = "cuda")]
mod transpose;
#[cfg(feature = "cuda")]
pub use reduce::CudaReduce;
#[cfg(feature = "cuda")]
pub use runtime::{CudaDevice, CudaElementwise, page_locked};
#[cfg(feature = "cuda")]
pub use transpose::CudaTranspose;

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaDevice, CudaElementwise, CudaReduce, CudaTranspose, page_locked};

/// Whether the CUDA backend has a kernel for `family`: every family but patches and the
/// column statistics of `standardize` (its first pass), and the operations with kernels
/// of their own that say they have one ([`Family::Op`](crate::backend::Family::Op)). The
/// same answer in a build without the `cuda` feature, where no device can be opened to
/// run them.
#[must_use]
pub fn has_kernel(family: crate::backend::Family) -> bool {
    use crate::backend::Family;
    match family {
        Family::Patches | Family::ColumnStats | Family::Blocks => false,
        Family::Op { cuda, .. } => cuda,
        Family::Affine
        | Family::Cast
        | Family::Generate
        | Family::Map
        | Family::Matmul
        | Family::Reduce
        | Family::Standardize
        | Family::Transpose => true,
    }
}
