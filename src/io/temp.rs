//! Temporary files beside a destination: how an output appears at its path only once
//! complete (written under a name of its own, locked while its run lives, then renamed),
//! and the cleaning of what killed runs left behind, which removes only the names
//! ([`own_files::own_temp_name`]) and contents this tool makes.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use crate::io::own_files::TEMP_SUFFIX;
use crate::io::own_files::{self, dir_and_name, own_temp_name};

/// A temporary file in the directory of `dest` (so that renaming it onto `dest` is
/// atomic), named `.{dest name}.XXXX.tilestream-tmp`, created 0666 less the umask.
///
/// # Errors
/// [`Error::Io`] if the directory is missing or not writable.
pub fn temp_beside(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let tmp = temp_beside_unlocked(dest)?;
    // Held until the file is renamed or removed: tells `clean_stale` it is in use.
    let _ = lock(tmp.as_file());
    Ok(tmp)
}

/// What every journal (`crate::journal`) of any version starts with: `tilestream clean`
/// removes a file under a journal's name only when it does.
pub const JOURNAL_MAGIC: &str = "tilestream-journal ";

/// Prefix of a pipeline file's directory of intermediates.
pub const PIPELINE_DIR_PREFIX: &str = ".tilestream-pipeline-";

/// Takes an exclusive advisory lock on `f` without waiting; true if taken.
#[must_use]
pub fn lock(f: &File) -> bool {
    // SAFETY: flock on an open descriptor has no memory-safety preconditions.
    unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(f),
            libc::LOCK_EX | libc::LOCK_NB,
        ) == 0
    }
}

/// Removes what killed runs left in `dir`: temporary outputs, journals and state slots
/// (`.NAME.MARK.tilestream-tmp`, see `own_temp_name`) and pipeline intermediate
/// directories (`.tilestream-pipeline-XXXXXX`) that no running process holds (each live
/// one is locked by its process). With `only_for`, just the temporary files of the output
/// named exactly that. Only what is provably tilestream's is removed: a name of that form
/// whose content is tilestream's too (a journal starts with its magic line; a directory
/// holds only what a Zarr output being built or a pipeline run holds, and is locked by
/// its run); a user's file or directory that merely ends in `.tilestream-tmp` is left
/// alone. Returns the paths removed.
///
/// # Errors
/// [`Error::Io`] if `dir` cannot be listed.
pub fn clean_stale(dir: &Path, only_for: Option<&str>) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let t = meta.file_type();
        if let Some((dest, mark)) = own_temp_name(&name) {
            if only_for.is_some_and(|n| n != dest) {
                continue;
            }
            let free = if t.is_file() {
                // never opened through a link or blocking on a FIFO; a regular file only
                // when no live run holds its lock, and a journal only with its magic line
                own_files::open_own_read(&path)
                    .is_ok_and(|f| (mark != "journal" || starts_with_journal_magic(&f)) && lock(&f))
            } else if t.is_dir() {
                // a Zarr output being encoded: its process holds `.lock` inside
                zarr_being_built(&path) && dir_unlocked(&path)
            } else {
                // a link or special file under one of tilestream's own names is removed as
                // it is (the name, not what it points to)
                true
            };
            if !free {
                continue;
            }
            let gone = if t.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if gone.is_ok() {
                removed.push(path);
            }
        } else if only_for.is_none()
            && t.is_dir()
            && is_pipeline_dir_name(&name)
            && pipeline_dir_contents(&path)
            && dir_unlocked(&path)
            && std::fs::remove_dir_all(&path).is_ok()
        {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Whether `f` starts with the journal's magic line.
fn starts_with_journal_magic(f: &File) -> bool {
    use std::os::unix::fs::FileExt as _;
    let magic = JOURNAL_MAGIC.as_bytes();
    let mut head = vec![0u8; magic.len()];
    f.read_exact_at(&mut head, 0).is_ok() && head == magic
}

/// Whether the lock file a run holds inside `dir` (`.lock`) is free: missing, or not
/// locked by a live process. Never follows a link.
fn dir_unlocked(dir: &Path) -> bool {
    match own_files::open_own_read(&dir.join(".lock")) {
        Ok(f) => lock(&f),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether `dir` holds only what a Zarr output being built does: `zarr.json`, `.lock`
/// and chunk keys (`c`, or digits and dots).
fn zarr_being_built(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().all(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n == "zarr.json" || n == ".lock" || own_files::is_chunk_key(&n)
        })
    })
}

/// `.tilestream-pipeline-` and the random letters and digits `tempfile` adds.
fn is_pipeline_dir_name(name: &str) -> bool {
    name.strip_prefix(PIPELINE_DIR_PREFIX)
        .is_some_and(own_files::is_random_part)
}

/// Whether `dir` holds only what a pipeline run keeps there: its `.lock`, intermediates
/// named by a step (`NAME.npy`, an identifier) and their temporary files; no directory
/// but a Zarr intermediate being built.
fn pipeline_dir_contents(dir: &Path) -> bool {
    let ident = |n: &str| {
        !n.is_empty()
            && n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().all(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            let file = e.file_type().is_ok_and(|t| t.is_file());
            n == ".lock"
                || (file && n.strip_suffix(".npy").is_some_and(ident))
                || own_temp_name(&n).is_some_and(|(d, _)| d.strip_suffix(".npy").is_some_and(ident))
        })
    })
}

fn temp_beside_unlocked(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let (dir, name) = dir_and_name(dest)?;
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        // like any new file: 0666 less the umask (tempfile's default is 0600)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create a temporary output file in", &dir, e))
}
