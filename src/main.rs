//! The `tilestream` command: streams operations over on-disk arrays under a memory budget.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tilestream::fmt_bytes;
use tilestream::format::parse_shape;
use tilestream::format::tiff::TiffWriteOptions;
use tilestream::format::tiff::cog::CogOptions;
use tilestream::format::zarr::ZarrWriteOptions;
use tilestream::workflow::Workflow;
#[path = "main/args.rs"]
mod args;
#[path = "main/info.rs"]
mod info;

use args::{Cli, Cmd, Common, DEFAULT_MEMORY};
use tilestream::spec::Op;
use tilestream::spec::cli::RawSpec;
use tilestream::{Engine, Error, MemoryBudget, Progress, Result, TensorFile};

fn engine(c: &Common) -> Result<Engine> {
    let budget = MemoryBudget::parse(c.memory.as_deref().unwrap_or(DEFAULT_MEMORY))?;
    if c.tiff_tile < 16 || !c.tiff_tile.is_multiple_of(16) || c.tiff_tile > 65536 {
        return Err(Error::invalid(format!(
            "--tiff-tile {} is not a multiple of 16 between 16 and 65536 (TIFF tiles are)",
            c.tiff_tile
        )));
    }
    let tiff = TiffWriteOptions {
        tile: c.tiff_tile,
        compression: c.tiff_compress.parse()?,
        predictor: c.tiff_predictor.parse()?,
        pixel_interleave: c.tiff_interleave == "pixel",
        bigtiff: match c.tiff_bigtiff.as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        },
        cog: (c.cog
            || c.format
                .as_deref()
                .is_some_and(|f| f.eq_ignore_ascii_case("cog")))
        .then(|| -> Result<CogOptions> {
            Ok(CogOptions {
                overviews: c.overviews.parse()?,
                resampling: c.overview_resampling.parse()?,
            })
        })
        .transpose()?,
        ..TiffWriteOptions::default()
    };
    let format = match c.format.as_deref() {
        Some(f) if f.eq_ignore_ascii_case("cog") => Some("tif"),
        f => f,
    };
    let zarr = ZarrWriteOptions {
        chunks: c.zarr_chunks.as_deref().map(parse_shape).transpose()?,
        shard: c.zarr_shard.as_deref().map(parse_shape).transpose()?,
        compression: c.zarr_compress.parse()?,
        ..ZarrWriteOptions::default()
    };
    let mut e = Engine::new(budget)?;
    if let Some(t) = c.max_tile.as_deref() {
        e = e.with_max_tile_bytes(tilestream::parse_size(t)?);
    }
    let e = e
        .with_depth(c.depth)
        .with_durable(!c.no_sync)
        .with_tiff_output(tiff)
        .with_zarr_output(zarr)
        .with_out_format(format.map(str::parse).transpose()?)
        .with_gpu_memory(
            c.gpu_memory
                .as_deref()
                .map(tilestream::parse_size)
                .transpose()?,
        )
        .with_device(c.device.unwrap_or_default())?;
    match c.threads {
        Some(n) => {
            let max = tilestream::backend::max_threads();
            if n > max {
                eprintln!("note: --threads {n} lowered to {max} (four per core)");
            }
            e.with_threads(n)
        }
        None => Ok(e),
    }
}

/// Ctrl-C (or SIGTERM): the first stops the run after the tile in flight (the engine's
/// cancel token), which removes the unfinished output; a second exits at once.
fn stop_on_ctrl_c(e: &Engine) {
    let token = e.cancel_token();
    let _ = ctrlc::set_handler(move || {
        if token.swap(true, Ordering::SeqCst) {
            let _ = writeln!(
                std::io::stderr(),
                "tilestream: interrupted again: exiting now"
            );
            std::process::exit(130);
        }
        let _ = writeln!(
            std::io::stderr(),
            "tilestream: stopping after the tile in flight (Ctrl-C again to quit at once)"
        );
    });
}

/// One progress line: tiles, throughput, memory, ETA.
fn progress_line(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64().max(1e-9);
    let eta = if p.tiles_done > 0 && p.tiles_total >= p.tiles_done {
        secs / p.tiles_done as f64 * (p.tiles_total - p.tiles_done) as f64
    } else {
        0.0
    };
    format!(
        "{:.2} GB/s, memory {} of {}, ETA {eta:.0} s",
        p.bytes_done as f64 / secs / 1e9,
        fmt_bytes(p.reserved),
        fmt_bytes(p.budget)
    )
}

/// Progress for `--progress`: an indicatif bar when stderr is a terminal; with `always`
/// and no terminal, a plain line at most once a second (and at the last tile), for logs.
fn with_progress_bar(e: Engine, mode: &str) -> (Engine, Option<ProgressBar>) {
    let tty = std::io::stderr().is_terminal();
    if mode == "never" || (mode == "auto" && !tty) {
        return (e, None);
    }
    if !tty {
        let last = Mutex::new(None::<Instant>);
        let e = e.with_progress(Arc::new(move |p: &Progress| {
            let Ok(mut last) = last.lock() else { return };
            let due = last.is_none_or(|t| t.elapsed().as_secs_f64() >= 1.0);
            if due || p.tiles_done == p.tiles_total {
                *last = Some(Instant::now());
                let _ = writeln!(
                    std::io::stderr(),
                    "tilestream: {}/{} tiles, {}",
                    p.tiles_done,
                    p.tiles_total,
                    progress_line(p)
                );
            }
        }));
        return (e, None);
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} tiles, {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    let e = e.with_progress(Arc::new(move |p: &Progress| {
        b.set_length(p.tiles_total as u64);
        b.set_position(p.tiles_done as u64);
        b.set_message(progress_line(p));
    }));
    (e, Some(bar))
}

/// An input given on the command line: a file, raw when `--shape` and `--in-dtype` say so.
fn open(path: &Path, raw: &RawSpec) -> Result<TensorFile> {
    tilestream::spec::cli::source(path, raw)?.open()
}

/// A note when an output's extension names no format tilestream writes (`o.jpg`): the
/// data is written raw, which the name would not suggest.
fn warn_unknown_extension(out: &Path) {
    let Some(ext) = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
    else {
        return;
    };
    if !matches!(
        ext.as_str(),
        "npy" | "tif" | "tiff" | "zarr" | "raw" | "bin" | "dat" | "f32" | "f64"
    ) {
        eprintln!(
            "note: {}: .{ext} is not a format tilestream writes, so the data is written raw \
             (headerless); choose one with --format npy|raw|tif|zarr",
            out.display()
        );
    }
}

/// `tilestream devices`: the driver's and NVRTC's versions and every GPU the driver
/// reports (or why none can be used). Never fails: a machine without CUDA says so.
fn devices(json: bool) {
    let v = tilestream::device::versions();
    let mut gpus = Vec::new();
    let mut why = None;
    // what a run on one device takes from --memory: read when the first context exists
    // (probing the others opens theirs too, which a run does not)
    let mut driver = 0;
    for n in 0.. {
        match tilestream::device::probe(n) {
            Ok(g) => {
                if n == 0 {
                    driver = tilestream::device::driver_host_bytes();
                }
                gpus.push(g);
            }
            Err(tilestream::device::DeviceError::NoDevice { .. }) if n > 0 => break,
            Err(e) => {
                // the library's argument names as this command line's flags
                why = Some(tilestream::error::render_arguments(
                    &e.to_string(),
                    |name, _, value| Some(tilestream::error::command_line_flag(name, value)),
                ));
                break;
            }
        }
    }
    let cache = tilestream::device::kernel_cache_dir().map(|d| d.display().to_string());
    if json {
        let j = serde_json::json!({
            "driver": v.driver, "nvrtc": v.nvrtc, "nvrtc_path": v.nvrtc_path,
            "kernel_cache": cache, "gpus": gpus, "unavailable": why,
            "driver_host_bytes": driver,
        });
        println!("{j}");
        return;
    }
    let or_none = |o: &Option<String>| o.clone().unwrap_or_else(|| "not found".into());
    println!("CUDA driver: {}", or_none(&v.driver));
    match &v.nvrtc_path {
        Some(p) => println!("NVRTC:       {} ({p})", or_none(&v.nvrtc)),
        None => println!("NVRTC:       {}", or_none(&v.nvrtc)),
    }
    println!(
        "kernel cache: {}",
        cache.as_deref().unwrap_or("off (TILESTREAM_KERNEL_CACHE)")
    );
    for g in &gpus {
        println!(
            "cuda:{}      {} (sm_{}{}), {} of {} free",
            g.ordinal,
            g.name,
            g.compute_capability.0,
            g.compute_capability.1,
            tilestream::fmt_bytes(g.free_bytes),
            tilestream::fmt_bytes(g.total_bytes)
        );
    }
    if !gpus.is_empty() {
        println!(
            "driver host memory: {} for one device (a GPU run counts it in --memory)",
            tilestream::fmt_bytes(driver)
        );
    }
    if let Some(w) = why {
        println!("no GPU: {w}");
    }
}

fn main_inner(cli: Cli) -> Result<()> {
    let common = &cli.common;
    match cli.cmd {
        Cmd::Info { input, raw, json } => info::info(&input, &raw, json),
        Cmd::Devices { json } => {
            devices(json);
            Ok(())
        }
        Cmd::Clean { dir } if tilestream::format::is_url(&dir) => {
            let done = tilestream::format::clean_object_leftovers(&dir)?;
            for d in &done {
                println!("{d}");
            }
            println!(
                "{} left-over(s) of killed runs to {} removed",
                done.len(),
                tilestream::error::shown_url(&dir.to_string_lossy())
            );
            Ok(())
        }
        Cmd::Clean { dir } => {
            let removed = tilestream::format::clean_stale(&dir, None)?;
            for p in &removed {
                println!("removed {}", p.display());
            }
            println!(
                "{} left-over file(s) removed from {}",
                removed.len(),
                dir.display()
            );
            Ok(())
        }
        Cmd::Run { .. } if common.resume => Err(Error::invalid(
            "--resume is not available for pipeline files yet: run the steps as subcommands to resume them one by one",
        )),
        Cmd::Run { file, dry_run } => {
            let wf = Workflow::load(&file)?;
            let mut c = common.clone();
            if c.device.is_none() {
                c.device = wf.device();
            }
            if c.memory.is_none() {
                c.memory = wf.memory().map(str::to_string);
            }
            if dry_run {
                println!("{}", wf.plan(&engine(&c)?)?.trim_end());
                return Ok(());
            }
            let (e, bar) = with_progress_bar(engine(&c)?, &c.progress);
            stop_on_ctrl_c(&e);
            let r = wf.run(&e);
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let reports = r?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string(&reports).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else {
                for r in reports {
                    println!("{r}");
                }
            }
            Ok(())
        }
        Cmd::Plan { op } => {
            let e = engine(common)?;
            let p = e.plan_spec(&op.spec()?)?;
            if common.json {
                println!("{}", p.json());
            } else {
                println!("{p}");
            }
            Ok(())
        }
        Cmd::Op(op) => {
            let mut e = engine(common)?;
            let spec = op.spec()?;
            if common.format.is_none() && !matches!(op, Op::Tiles(_) | Op::Histogram(_)) {
                warn_unknown_extension(spec.output());
            }
            match spec.job_key()? {
                Some(key) => e = e.with_journal(key, common.resume),
                None if common.resume => {
                    return Err(Error::invalid(
                        "--resume is not available for tiles (each patch file is written whole) nor histogram (a pass of counts): run it again without --resume",
                    ));
                }
                None => {}
            }
            let (e, bar) = with_progress_bar(e, &common.progress);
            stop_on_ctrl_c(&e);
            let r = e.run_spec(&spec);
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let r = r?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string(&r).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else {
                println!("{r}");
            }
            Ok(())
        }
    }
}

/// An input truncated by another program while one of its windows is mapped makes the
/// next access to the lost pages raise SIGBUS. Windows are mapped only after the file's
/// size is checked again, so this needs the file to shrink during the few milliseconds a
/// tile is in flight; should it happen, the run ends with a one-line error and exit
/// code 1, like any other I/O failure, instead of a crash. The temporary output and the
/// journal stay for `--resume` or `tilestream clean`.
fn on_sigbus_exit_cleanly() {
    extern "C" fn handler(_: libc::c_int) {
        const MSG: &[u8] = b"tilestream: error: an input file changed size while in use (another program truncated it while it was mapped): the output was not written\n";
        // Several threads can fault on the lost pages at once: the first one says it and
        // ends the process, the others wait for that (one line, not one per thread).
        static FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
        if !FIRST.swap(false, std::sync::atomic::Ordering::SeqCst) {
            loop {
                // SAFETY: pause is async-signal-safe; _exit from the first thread ends us.
                unsafe { libc::pause() };
            }
        }
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(1);
        }
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&raw mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &raw const sa, std::ptr::null_mut());
    }
}

/// Prints a command-line parsing error as one line (help and version as they are) and
/// returns its exit code: 2 for usage errors, like every other one-line error.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut first = lines
        .next()
        .unwrap_or("bad arguments")
        .trim_start_matches("error: ")
        .to_string();
    let rest: Vec<&str> = lines.collect();
    if first.ends_with(':') {
        // the list that follows (missing arguments): onto the same line
        let items: Vec<&str> = rest
            .iter()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"))
            .copied()
            .collect();
        first = format!("{} {}", first, items.join(", "));
    }
    let tip = rest
        .iter()
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!(" ({t})"))
        .unwrap_or_default();
    eprintln!("tilestream: error: {first}{tip}; see tilestream --help");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    // A file-size limit (ulimit -f) must fail the write with EFBIG, not kill the process
    // before it can remove its temporary output.
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    on_sigbus_exit_cleanly();
    // RUST_LOG=info (or debug: every tile) turns on logging to stderr.
    // Directives are `level` or `target=level`, comma-separated (tracing-subscriber's
    // `Targets`, which needs no regex engine in the build).
    if let Some(spec) = std::env::var_os("RUST_LOG") {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let spec = spec.to_string_lossy();
        match spec.parse::<tracing_subscriber::filter::Targets>() {
            Ok(targets) => tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(std::io::stderr().is_terminal()),
                )
                .with(targets)
                .init(),
            Err(e) => eprintln!(
                "tilestream: warning: RUST_LOG={spec} not understood ({e}): logging stays off; \
                 give a level (info, debug) or target=level pairs, comma-separated"
            ),
        }
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    // a pipeline file's errors speak of its keys, which are the library's names
    let pipeline = matches!(cli.cmd, Cmd::Run { .. });
    match main_inner(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.one_line();
            let msg = if pipeline {
                msg
            } else {
                tilestream::error::render_arguments(&msg, |name, _, value| {
                    Some(tilestream::error::command_line_flag(name, value))
                })
            };
            eprintln!("tilestream: error: {msg}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
