//! The headline: a 3075200 × 512 float32 array (6.3 GB, the classic "out of memory
//! allocating tensor") processed from disk under a 512 MiB budget.
//!
//! ```text
//! cargo run --release --example oversized_array              # 6.3 GB in a temp dir (needs ~9.5 GB of disk)
//! cargo run --release --example oversized_array -- --rows 100000   # a 205 MB version
//! ```
//!
//! Steps: stream-generate the array (N(col/100, 1) values), compute column means and
//! standard deviations, standardize it and cast to f16 into a new file, and project it onto
//! 64 random directions (a 512 × 64 Gaussian matrix held in memory). Prints each result's
//! summary, its throughput, and the peak resident memory of the process next to the budget
//! and next to what `np.load` would need. Set `TILESTREAM_DIR` to choose where the files go
//! (kept there; default: a temporary directory, removed at the end).

use std::time::Instant;

use tilestream::{Axis, DType, Engine, MemoryBudget, Reduce, TensorFile, fmt_bytes, peak_rss};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = match args.iter().position(|a| a == "--rows") {
        Some(i) => args.get(i + 1).ok_or("--rows needs a number")?.parse()?,
        None => 3_075_200,
    };
    let cols = 512;
    let budget = MemoryBudget::parse("512MiB")?;
    let bytes = (rows * cols * 4) as u64;
    let tmp = tempfile::tempdir()?;
    let dir =
        std::env::var_os("TILESTREAM_DIR").map_or_else(|| tmp.path().to_path_buf(), Into::into);
    println!(
        "{rows} x {cols} f32 = {} on disk (plus {} of f16 output) in {}; budget {budget}",
        fmt_bytes(bytes),
        fmt_bytes(bytes / 2),
        dir.display()
    );
    let engine = Engine::new(budget.clone())?;
    let x_path = dir.join("x.npy");

    let t = Instant::now();
    let r = engine.generate(&x_path, &[rows, cols], DType::F32, 1)?;
    println!(
        "generate:     {:>7.2} s  {:>6.2} GB/s written",
        t.elapsed().as_secs_f64(),
        r.gb_per_s
    );

    let x = TensorFile::open(&x_path)?;
    let (mean, r) = engine.reduce(&x, Reduce::Mean, Axis(0))?;
    let m = mean.to_f64();
    println!(
        "column mean:  {:>7.2} s  {:>6.2} GB/s   mean[0] = {:.4}, mean[511] = {:.4} (expected 0 and 5.11)",
        r.wall_s, r.gb_per_s, m[0], m[511]
    );
    let (std, r) = engine.reduce(&x, Reduce::Std { ddof: 0 }, Axis(0))?;
    let s = std.to_f64();
    let (lo, hi) = s
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    println!(
        "column std:   {:>7.2} s  {:>6.2} GB/s   std in [{lo:.4}, {hi:.4}] (expected about 1)",
        r.wall_s, r.gb_per_s
    );

    let z_path = dir.join("z_f16.npy");
    let (stats, apply) = engine.standardize(&x, &z_path, Some(DType::F16), 0, None)?;
    let z = TensorFile::open(&z_path)?;
    println!(
        "standardize:  {:>7.2} s  {:>6.2} GB/s   (x - mean) / std -> {} {:?} {}",
        stats.wall_s + apply.wall_s,
        (stats.bytes_read + apply.bytes_read + apply.bytes_written) as f64
            / (stats.wall_s + apply.wall_s).max(1e-9)
            / 1e9,
        z_path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        z.shape(),
        z.dtype()
    );

    let w_path = dir.join("directions.npy");
    engine.generate(&w_path, &[cols, 64], DType::F32, 2)?;
    let p_path = dir.join("projection.npy");
    let r = engine.matmul(&x, &TensorFile::open(&w_path)?, &p_path, None)?;
    println!(
        "project:      {:>7.2} s  {:>6.2} GB/s   X @ W (512 x 64, resident) -> {:?}",
        r.wall_s, r.gb_per_s, r.output_shape
    );
    let rss = peak_rss();
    println!(
        "peak resident memory: {} (budget {budget}); np.load(\"x.npy\") would need {}",
        fmt_bytes(rss),
        fmt_bytes(bytes)
    );
    Ok(())
}
