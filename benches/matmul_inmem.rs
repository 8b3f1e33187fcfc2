//! The in-memory reference for the streamed matmul: X and W read whole into RAM, then
//! the same kernel (`tilestream::ops::matmul::matmul_tile`, matrixmultiply sgemm with rows
//! split across all cores) timed on the whole product. Compare with
//! `tilestream matmul X W OUT --json` on the same files.
//!
//! ```text
//! cargo bench --bench matmul_inmem -- X.npy W.npy
//! ```

use std::time::Instant;

use tilestream::TensorFile;
use tilestream::ops::matmul::{Resident, compute_dtype, matmul_tile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [xp, wp] = args.as_slice() else {
        eprintln!("usage: cargo bench --bench matmul_inmem -- X.npy W.npy");
        return Ok(());
    };
    let (x, w) = (TensorFile::open(xp)?, TensorFile::open(wp)?);
    let (r, k, n) = (x.shape()[0], x.shape()[1], w.shape()[1]);
    let c = compute_dtype(x.dtype(), w.dtype());
    let t = Instant::now();
    let xb = x.map_window(0, (r * k) as u64)?.bytes().to_vec();
    let load = t.elapsed().as_secs_f64();
    let wr = Resident::new(w.map_window(0, (k * n) as u64)?.bytes(), w.dtype(), c);
    let mut out = vec![0u8; r * n * c.size()];
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let t = Instant::now();
    matmul_tile(&xb, x.dtype(), &wr, k, n, &mut out, c, threads);
    let secs = t.elapsed().as_secs_f64();
    let flops = 2.0 * r as f64 * k as f64 * n as f64;
    println!(
        "in-memory {r}x{k} @ {k}x{n} ({c}): product {secs:.3} s ({:.1} GFLOP/s, {:.2} GB/s of X), after {load:.2} s loading X into RAM",
        flops / secs / 1e9,
        (r * k * x.dtype().size()) as f64 / secs / 1e9
    );
    Ok(())
}
