//! The CPU backend: the rayon kernels of every operation [`crate::ops`] describes, run on
//! a dedicated pool, so `--threads` is honoured without touching the global pool of an
//! embedding program. One module per operation, as `kernels/` has one CUDA file per
//! operation.

pub mod elementwise;
pub mod expr;
pub mod generate;
mod kernels;
pub mod matmul;
pub mod reduce;
pub mod transpose;

use std::sync::Arc;

use rayon::ThreadPool;

use super::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::expr::Program;
use crate::ops::generate::Dist;
use crate::ops::matmul::Resident;
use crate::ops::reduce::{Geometry, Reduce, TileReducer};

/// Runs kernels on a rayon pool of a fixed size.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    pool: Arc<ThreadPool>,
}

impl CpuBackend {
    /// A backend with `threads` workers (`None`: one per available core).
    ///
    /// # Errors
    /// [`Error::Invalid`] for zero threads; [`Error::Internal`] if the pool cannot start.
    pub fn new(threads: Option<usize>) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let n = match threads {
            Some(0) => return Err(Error::invalid("`threads` must be at least 1")),
            // more threads than this only queue behind each other (and thousands bring
            // a machine to a crawl)
            Some(n) => n.min(max_threads()),
            None => cores,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("tilestream-cpu-{i}"))
            .build()
            .map_err(|e| Error::Internal(format!("cannot start {n} worker threads: {e}")))?;
        Ok(CpuBackend {
            pool: Arc::new(pool),
        })
    }
}

/// Most CPU worker threads a backend starts: four per core. A larger `--threads` is
/// lowered to this.
#[must_use]
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Runs a reducer's tiles inside the backend's pool.
struct InPool {
    pool: Arc<ThreadPool>,
    inner: Box<dyn TileReducer>,
}

impl TileReducer for InPool {
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]) {
        let inner = &mut self.inner;
        self.pool.install(|| inner.feed_bytes(start, bytes));
    }
    fn into_bytes(self: Box<Self>) -> Vec<u8> {
        self.inner.into_bytes()
    }
    fn state_len(&self) -> u64 {
        self.inner.state_len()
    }
    fn state_parts(&self) -> Vec<&[u8]> {
        self.inner.state_parts()
    }
    fn state_parts_mut(&mut self) -> Vec<&mut [u8]> {
        self.inner.state_parts_mut()
    }
    fn finish_outers(&mut self, first: u64, totals: &[u8]) {
        self.inner.finish_outers(first, totals);
    }
    fn collect_blocks(&mut self, shift: Option<&[f64]>) {
        self.inner.collect_blocks(shift);
    }
    fn take_blocks(&mut self) -> Vec<u8> {
        self.inner.take_blocks()
    }
    fn fold_blocks(&mut self, blocks: &[u8]) {
        self.inner.fold_blocks(blocks);
    }
    fn finish_folded(&mut self) {
        self.inner.finish_folded();
    }
    fn takes_columns(&self) -> bool {
        self.inner.takes_columns()
    }
    fn feed_columns(&mut self, c0: usize, row: u64, runs: &[&[u8]]) {
        let inner = &mut self.inner;
        self.pool.install(|| inner.feed_columns(c0, row, runs));
    }
    fn finish_columns(&mut self) {
        self.inner.finish_columns();
    }
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        format!("cpu (rayon, {} threads)", self.threads())
    }

    fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    fn reducer(
        &self,
        op: Reduce,
        dtype: DType,
        geometry: Geometry,
        nodata: Option<f64>,
    ) -> Result<Box<dyn TileReducer>> {
        Ok(Box::new(InPool {
            pool: self.pool.clone(),
            inner: reduce::masked_reducer(op, dtype, geometry, self.threads(), nodata),
        }))
    }

    fn affine(
        &self,
        inp: &[u8],
        in_dtype: DType,
        out: &mut [u8],
        out_dtype: DType,
        scale: f64,
        offset: f64,
    ) -> Result<()> {
        self.pool
            .install(|| elementwise::affine_bytes(inp, in_dtype, out, out_dtype, scale, offset));
        Ok(())
    }

    fn cast(&self, inp: &[u8], in_dtype: DType, out: &mut [u8], out_dtype: DType) -> Result<()> {
        self.pool
            .install(|| elementwise::cast_bytes(inp, in_dtype, out, out_dtype));
        Ok(())
    }

    fn map(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        in_dtypes: &[DType],
        out: &mut [u8],
        out_dtype: DType,
    ) -> Result<()> {
        self.pool
            .install(|| expr::eval_tile(program, inputs, in_dtypes, out, out_dtype));
        Ok(())
    }

    fn matmul(
        &self,
        x: &[u8],
        xd: DType,
        w: &Resident,
        k: usize,
        n: usize,
        out: &mut [u8],
        od: DType,
    ) -> Result<()> {
        let threads = self.threads();
        self.pool
            .install(|| matmul::matmul_tile(x, xd, w, k, n, out, od, threads));
        Ok(())
    }

    fn standardize(
        &self,
        inp: &[u8],
        in_dtype: DType,
        start: u64,
        inner: u64,
        mean: &[f64],
        std: &[f64],
        out: &mut [u8],
        out_dtype: DType,
    ) -> Result<()> {
        self.pool.install(|| {
            elementwise::standardize_bytes(inp, in_dtype, start, inner, mean, std, out, out_dtype);
        });
        Ok(())
    }

    fn generate(
        &self,
        out: &mut [u8],
        dtype: DType,
        start: u64,
        last_dim: u64,
        seed: u64,
        dist: Dist,
    ) -> Result<()> {
        self.pool
            .install(|| generate::fill_bytes(out, dtype, start, last_dim, seed, dist));
        Ok(())
    }

    fn install(&self, f: &mut (dyn FnMut() -> Result<()> + Send)) -> Result<()> {
        self.pool.install(f)
    }

    fn transpose(
        &self,
        window: &[u8],
        row_len: usize,
        c0: usize,
        rows: usize,
        cols: usize,
        es: usize,
        out: &mut [u8],
    ) -> Result<()> {
        self.pool
            .install(|| transpose::transpose_block(window, row_len, c0, rows, cols, es, out))
    }
}
