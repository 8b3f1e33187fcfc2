//! Compiling kernels with NVRTC, once per process and, for real architectures, once per
//! machine: the process's cache of compiled sets ([`compile_cached`]), the cache folder
//! of machine code between processes ([`kernel_cache_dir`]), and the options every
//! kernel is compiled with ([`nvrtc_options`]).

use super::{DeviceError, imp};

/// A kernel compiled by NVRTC: the PTX, the cubin when the target was a real
/// architecture (`sm_90`), and the compiler's log (ptxas's register and spill report).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX text.
    pub ptx: String,
    /// Machine code for `sm_*` targets; empty for `compute_*` targets.
    pub cubin: Vec<u8>,
    /// The compiler's log.
    pub log: String,
}

type CompileKey = (String, String, String, bool);
/// A compiled set and how many times it was asked for.
type CompileCache = std::collections::HashMap<CompileKey, (std::sync::Arc<Compiled>, usize)>;

/// Kernel sets compiled through [`compile_cached`], with how many times each was asked for.
static COMPILED: std::sync::Mutex<Option<CompileCache>> = std::sync::Mutex::new(None);

/// [`compile`] through two caches: one in the process, keyed by the name, source,
/// architecture and flags, so a kernel set is compiled at most once per process whatever
/// the number of engines (its lock is held while compiling, so two engines asking for
/// the same set at once compile it once); and, for real architectures (`sm_90`), the
/// machine code on disk ([`kernel_cache_dir`]), so a later process loads it without
/// loading NVRTC at all (NVRTC's first compilation in a process costs about 0.4 s).
///
/// # Errors
/// As [`compile`] (a failure is not cached).
pub fn compile_cached(
    name: &str,
    src: &str,
    arch: &str,
    spills_as_errors: bool,
) -> Result<std::sync::Arc<Compiled>, DeviceError> {
    let mut guard = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cache = guard.get_or_insert_with(Default::default);
    let key = (
        name.to_owned(),
        src.to_owned(),
        arch.to_owned(),
        spills_as_errors,
    );
    if let Some((c, asked)) = cache.get_mut(&key) {
        *asked += 1;
        return Ok(std::sync::Arc::clone(c));
    }
    let dir = kernel_cache_dir();
    let compiled = std::sync::Arc::new(
        compile_through_disk(dir.as_deref(), name, src, arch, spills_as_errors)?.0,
    );
    cache.insert(key, (std::sync::Arc::clone(&compiled), 1));
    Ok(compiled)
}

/// The folder compiled kernels are kept in between processes: `TILESTREAM_KERNEL_CACHE`
/// (`off` or `0`: none), else `$XDG_CACHE_HOME/tilestream/kernels`, else
/// `~/.cache/tilestream/kernels`. `None` when there is none to use.
#[must_use]
pub fn kernel_cache_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    match std::env::var_os("TILESTREAM_KERNEL_CACHE") {
        Some(v) if v == "off" || v == "0" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("tilestream").join("kernels")),
    }
}

/// What starts a cached kernel file, before the source's hashes and the cubin.
const CUBIN_MAGIC: &[u8; 8] = b"TSCUBIN1";

/// FNV-1a, 64 bits: with the CRC-32 and the length, what names and checks a cached set.
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// [`compile`] for `arch`, through the cache folder `dir` for real architectures: a
/// file there whose recorded source hashes and machine-code checksum match is loaded
/// instead of compiling (its `ptx` and `log` are then empty); otherwise the set is
/// compiled and the file written (atomically: a temporary file renamed into place; a
/// folder that cannot be written is no error). Returns the kernels and whether they came
/// from the disk.
///
/// # Errors
/// As [`compile`].
pub fn compile_through_disk(
    dir: Option<&std::path::Path>,
    name: &str,
    src: &str,
    arch: &str,
    spills_as_errors: bool,
) -> Result<(Compiled, bool), DeviceError> {
    let options = nvrtc_options(arch, spills_as_errors).join(" ");
    let ident: [&[u8]; 5] = [
        env!("CARGO_PKG_VERSION").as_bytes(),
        name.as_bytes(),
        arch.as_bytes(),
        options.as_bytes(),
        src.as_bytes(),
    ];
    let (h, crc) = (fnv64(&ident), crc32fast::hash(src.as_bytes()));
    let file = dir
        .filter(|_| arch.starts_with("sm_"))
        .map(|d| d.join(format!("{arch}-{h:016x}.cubin")));
    if let Some(f) = &file
        && owned_by_me(f)
        && let Ok(bytes) = std::fs::read(f)
        && let Some(cubin) = cached_cubin(&bytes, h, crc)
    {
        DISK_LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Ok((
            Compiled {
                ptx: String::new(),
                cubin: cubin.to_vec(),
                log: String::new(),
            },
            true,
        ));
    }
    let compiled = compile(name, src, arch, spills_as_errors)?;
    if let Some(f) = &file {
        let mut bytes = Vec::with_capacity(24 + compiled.cubin.len());
        bytes.extend_from_slice(CUBIN_MAGIC);
        bytes.extend_from_slice(&h.to_le_bytes());
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&compiled.cubin).to_le_bytes());
        bytes.extend_from_slice(&compiled.cubin);
        let _ = write_atomically(f, &bytes);
    }
    Ok((compiled, false))
}

/// Kernel sets loaded from the disk cache instead of compiled, in this process.
pub(super) static DISK_LOADS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Whether `path` is a plain file of this process's user: machine code another user
/// could have put in a shared cache folder is never loaded.
fn owned_by_me(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.uid() == me)
}

/// The cubin of a cached file, when its magic, source hashes and checksum all match.
fn cached_cubin(bytes: &[u8], h: u64, crc: u32) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(CUBIN_MAGIC)?;
    let (head, cubin) = rest.split_at_checked(16)?;
    let word = |r: std::ops::Range<usize>| head.get(r);
    let fh = u64::from_le_bytes(word(0..8)?.try_into().ok()?);
    let fcrc = u32::from_le_bytes(word(8..12)?.try_into().ok()?);
    let ccrc = u32::from_le_bytes(word(12..16)?.try_into().ok()?);
    (fh == h && fcrc == crc && !cubin.is_empty() && crc32fast::hash(cubin) == ccrc).then_some(cubin)
}

/// Writes `bytes` to `path` through a temporary file in its folder renamed into place,
/// so a reader sees the old file or the whole new one.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no folder"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("kernel"),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Every kernel set [`compile_cached`] compiled in this process: its name and how many
/// times it was asked for (each compiled once, the rest served from the cache).
#[must_use]
pub fn compiled_sets() -> Vec<(String, usize)> {
    let guard = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard
        .iter()
        .flatten()
        .map(|((name, ..), (_, asked))| (name.clone(), *asked))
        .collect()
}

/// Compiles `src` with NVRTC for `arch` (`sm_90`, `compute_80`), with tilestream's flags:
/// no contraction (`--fmad=false`: results match the CPU's), IEEE division and square
/// root, and with `spills_as_errors` a register spill reported as an error.
///
/// # Errors
/// [`DeviceError::NotBuilt`] without the `cuda` feature, [`DeviceError::NoNvrtc`] when NVRTC
/// cannot be loaded, [`DeviceError::Compile`] with the compiler's log.
pub fn compile(
    name: &str,
    src: &str,
    arch: &str,
    spills_as_errors: bool,
) -> Result<Compiled, DeviceError> {
    imp::compile(name, src, arch, spills_as_errors)
}

/// The NVRTC options tilestream compiles every kernel with.
#[must_use]
pub fn nvrtc_options(arch: &str, spills_as_errors: bool) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--std=c++17".into(),
    ];
    if spills_as_errors && arch.starts_with("sm_") {
        o.push("--ptxas-options=--warn-on-spills".into());
        o.push("--ptxas-options=--warning-as-error".into());
    }
    o
}
