//! Tiling satellite imagery: a synthetic 4-band u16 scene made on the fly, then NDVI by
//! expression, a gaussian smoothing with halos, and cutting the scene into 512 × 512
//! patches with 32 px overlap — all under a 256 MiB budget — and the seams check: a tiled
//! filter equals the same filter run on the whole image at once, bit for bit.
//!
//! ```text
//! cargo run --release --example satellite_tiles                 # 4 x 10000 x 10000 u16 (800 MB)
//! cargo run --release --example satellite_tiles -- --size 20000 # 4 x 20000 x 20000 (3.2 GB; ~12 GB of disk)
//! cargo run --release --example satellite_tiles -- --size 1500  # a quick one
//! ```
//!
//! Files go to a temporary directory (removed at the end), or to `TILESTREAM_DIR` (kept).

use std::time::Instant;

use tilestream::{
    Boundary, DType, Edge, Engine, Filter, MemoryBudget, PatchSpec, Stencil, TensorFile, fmt_bytes,
    peak_rss,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let size: usize = match args.iter().position(|a| a == "--size") {
        Some(i) => args.get(i + 1).ok_or("--size needs a number")?.parse()?,
        None => 10_000,
    };
    let tmp = tempfile::tempdir()?;
    let dir =
        std::env::var_os("TILESTREAM_DIR").map_or_else(|| tmp.path().to_path_buf(), Into::into);
    let budget = MemoryBudget::parse("256MiB")?;
    let engine = Engine::new(budget.clone())?;
    println!(
        "scene: 4 x {size} x {size} u16 ({}) in {}; budget {budget}",
        fmt_bytes((4 * size * size * 2) as u64),
        dir.display()
    );

    // 1. A synthetic scene: N(col/100, 1) noise scaled into u16 reflectances.
    let t = Instant::now();
    let raw = dir.join("noise_f32.npy");
    engine.generate(&raw, &[4, size, size], DType::F32, 3)?;
    let scene_path = dir.join("scene.npy");
    engine.map(
        "clip(2000 + 300 * x, 0, 65535)",
        &[("x", &TensorFile::open(&raw)?)],
        &scene_path,
        Some(DType::U16),
    )?;
    std::fs::remove_file(&raw)?;
    let scene = TensorFile::open(&scene_path)?;
    println!("scene made:    {:>6.2} s", t.elapsed().as_secs_f64());

    // 2. NDVI from two bands of the one file, in one pass.
    let ndvi_path = dir.join("ndvi.npy");
    let r = engine.map(
        "(s[3] - s[2]) / (s[3] + s[2])",
        &[("s", &scene)],
        &ndvi_path,
        Some(DType::F32),
    )?;
    println!(
        "NDVI:          {:>6.2} s  {:>5.2} GB/s  {} tiles",
        r.wall_s, r.gb_per_s, r.tiles
    );

    // 3. Gaussian smoothing, tiles overlapping by the filter's halo.
    let ndvi = TensorFile::open(&ndvi_path)?;
    let blur = Stencil::new(
        Filter::Gaussian {
            sigma: 2.0,
            truncate: 4.0,
        },
        Boundary::Reflect,
    )?;
    let r = engine.stencil(&ndvi, dir.join("ndvi_smooth.npy"), &blur, None)?;
    println!(
        "gaussian σ=2:  {:>6.2} s  {:>5.2} GB/s  {} tiles of {:?}",
        r.wall_s, r.gb_per_s, r.tiles, r.tile_shape
    );

    // 4. 512 x 512 patches with 32 px overlap, all four bands in each file.
    let spec = PatchSpec {
        size: 512.min(size),
        overlap: 32.min(size / 2),
        edge: Edge::Shift,
    };
    let (r, n) = engine.patches(&scene, dir.join("patches"), spec)?;
    println!(
        "patches:       {:>6.2} s  {n} files of 4 x {s} x {s} + index.csv",
        r.wall_s,
        s = spec.size
    );

    // 5. The seams check on a 1024 x 1024 crop of the NDVI: filtered in many small 2-D
    //    tiles (1 MiB budget) and in one piece (256 MiB): the bytes must be equal.
    let crop = 1024.min(size);
    let crops = dir.join("crop");
    engine.patches(
        &ndvi,
        &crops,
        PatchSpec {
            size: crop,
            overlap: 0,
            edge: Edge::Shift,
        },
    )?;
    let crop_file = TensorFile::open(crops.join("ndvi_r0_c0.npy"))?;
    let tiled = Engine::new(MemoryBudget::parse("1MiB")?)?;
    let rt = tiled.stencil(&crop_file, dir.join("crop_tiled.npy"), &blur, None)?;
    let rw = engine.stencil(&crop_file, dir.join("crop_whole.npy"), &blur, None)?;
    let same =
        std::fs::read(dir.join("crop_tiled.npy"))? == std::fs::read(dir.join("crop_whole.npy"))?;
    println!(
        "seams check:   {} tiles vs {} tile: {}",
        rt.tiles,
        rw.tiles,
        if same { "identical bytes" } else { "DIFFERENT" }
    );
    println!(
        "peak resident memory: {} (budget {budget}); the scene alone is {}",
        fmt_bytes(peak_rss()),
        fmt_bytes(scene.info().nbytes())
    );
    if !same {
        return Err("tiled and whole-image filtering differ".into());
    }
    Ok(())
}
