//! A pipeline file run from code: `examples/pipeline.toml` (fused elementwise steps, a
//! cast, standardize → matmul through a temporary intermediate, a reduction) over data made
//! here, then the same file from the command line.
//!
//! ```text
//! cargo run --release --example pipeline                 # 200000 x 512 f32 (410 MB)
//! cargo run --release --example pipeline -- --rows 5000
//! ```
//!
//! The data goes to `examples/data/` beside the pipeline file (ignored by git), so that
//! `tilestream run examples/pipeline.toml` works afterwards as printed; `TILESTREAM_DIR`
//! puts the pipeline and its data somewhere else.

use tilestream::{DType, Engine, MemoryBudget, Workflow};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = match args.iter().position(|a| a == "--rows") {
        Some(i) => args.get(i + 1).ok_or("--rows needs a number")?.parse()?,
        None => 200_000,
    };
    let shipped = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"));
    let (dir, toml) = match std::env::var_os("TILESTREAM_DIR") {
        Some(d) => {
            let d = std::path::PathBuf::from(d);
            let toml = d.join("pipeline.toml");
            std::fs::copy(shipped.join("pipeline.toml"), &toml)?;
            (d, toml)
        }
        None => (shipped.to_path_buf(), shipped.join("pipeline.toml")),
    };
    std::fs::create_dir_all(dir.join("data"))?;
    let maker = Engine::new(MemoryBudget::parse("128MiB")?)?;
    maker.generate(dir.join("data/x.npy"), &[rows, 512], DType::F32, 1)?;
    maker.generate(dir.join("data/w.npy"), &[512, 16], DType::F32, 2)?;

    let wf = Workflow::load(&toml)?;
    let engine = Engine::new(MemoryBudget::parse(wf.memory().unwrap_or("128MiB"))?)?;
    println!("{}", wf.plan(&engine)?.trim_end());
    for r in wf.run(&engine)? {
        println!(
            "{} -> {:?} {}: {:.2} s",
            r.op, r.output_shape, r.output_dtype, r.wall_s
        );
    }
    println!(
        "\nthe same from the command line:\n  tilestream run {}",
        toml.display()
    );
    Ok(())
}
