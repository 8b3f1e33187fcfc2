//! The library call with a memory budget argument, for people embedding tilestream.
//!
//! ```text
//! cargo run --release --example memory_budget                  # makes a 100000 x 256 demo file
//! cargo run --release --example memory_budget -- data.npy 64MiB   # your own file and budget
//! ```
//!
//! One call per operation; the budget bounds everything held in memory at once.

use tilestream::{Axis, DType, Engine, MemoryBudget, Reduce, TensorFile};

fn main() -> tilestream::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = tempfile::tempdir().map_err(|e| tilestream::Error::io("create", "a temp dir", e))?;
    let budget = MemoryBudget::parse(args.get(1).map_or("64MiB", String::as_str))?;
    let path = match args.first() {
        Some(p) => p.into(),
        None => {
            let p = dir.path().join("demo.npy");
            Engine::new(budget.clone())?.generate(&p, &[100_000, 256], DType::F32, 7)?;
            p
        }
    };

    // The everyday call: a path, an operation, an axis, a budget.
    let means = tilestream::reduce(&path, Reduce::Mean, Axis(0), budget.clone())?;
    println!("column means: {:?} ...", &means.to_f64()[..4]);

    // An engine for several operations under the same budget, with a report per run.
    let engine = Engine::new(budget)?;
    let x = TensorFile::open(&path)?;
    let out = dir.path().join("scaled_f16.npy");
    let report = engine.map(
        "where(x > 0, sqrt(x), 0)",
        &[("x", &x)],
        &out,
        Some(DType::F16),
    )?;
    println!("{report}");
    Ok(())
}
