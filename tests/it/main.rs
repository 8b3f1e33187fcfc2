//! The integration tests, as one test binary: each module was a binary of its own, and
//! linking the crate and its dependencies once per binary dominated the build (see the
//! README's build-time figures). The tests that measure the peak memory of the processes
//! they start live in binaries of their own (`tests/cli.rs`, `tests/hostile_params.rs`),
//! and measure through a relay (`tests/it/common/peak.rs`): a child starts with its
//! parent's resident-memory high-water mark, which this binary's in-process tests raise.

mod batches;
mod blocks;
mod cog;
mod common;
mod complex;
mod complex_map;
mod cuda_emulation;
// NVRTC is reached through the `cuda` feature: a CPU-only build has no kernels to compile
#[cfg(feature = "cuda")]
mod cuda_kernels;
mod cuda_matmul_emulation;
mod cuda_reduce_emulation;
mod cuda_stencil_emulation;
mod destinations;
mod examples;
mod fuzz_corpus;
mod geotiff;
mod gpu;
mod gpu_kit;
mod hdf5;
mod histogram;
mod hostile_outputs;
mod jp2;
mod layering;
mod map_oracle;
mod matmul;
mod newcomer;
mod nodata_reduce;
mod npy_orders;
mod numpy_interop;
// object stores are read through the `remote` feature
#[cfg(feature = "remote")]
mod object_outputs;
mod objects;
mod pipeline;
mod quantile;
mod readme;
mod reduce_oracle;
mod resume;
mod simulated_device;
mod split;
mod standardize;
mod stencil;
mod tiff_codecs;
mod tiff_jpeg;
mod tiff_matrix;
mod tiff_packed;
mod window;
mod zarr;
