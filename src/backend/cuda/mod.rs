//! The CUDA backend's parts that need no GPU: the kernels' source, assembled for NVRTC
//! ([`source`]). Device discovery and compilation live in [`crate::device`]; the
//! backend that stages tiles through page-locked slots and runs the kernels on streams
//! builds on both.

pub mod source;
