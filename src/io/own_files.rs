//! The one gate every file tilestream writes goes through, so that nothing outside a
//! run's own output is ever opened for writing because a path on disk said so.
//!
//! - [`open_own`] opens a run's own temporary files (journal, state slots, an
//!   interrupted run's temporary output): never through a symbolic link, never a FIFO or
//!   device (opened non-blocking, then checked to be a regular file), never a file with a
//!   second hard link (which would make a write land in another name's data).
//! - [`temp_name_of`] says whether a name recorded in a journal is one this run's
//!   destination could have made; anything else is refused. The names themselves
//!   (`.NAME.MARK.tilestream-tmp`, [`own_temp_name`], [`dir_and_name`]) are defined here.
//! - [`check_destination`] refuses a destination that is not a regular file (or, for a
//!   Zarr output, a directory this tool recognises as a Zarr array store): renaming over
//!   `/dev/null` or a FIFO, or deleting a directory of other files, is never a way to
//!   finish a run.
//! - [`check_run_paths`] is the destination policy of a whole run, applied before
//!   anything is written: every path it writes passes [`check_destination`], none is any
//!   file the run reads (compared by file identity, not by name), and no two are one.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Suffix of every temporary output file.
pub const TEMP_SUFFIX: &str = ".tilestream-tmp";

/// The output name and the mark of one of tilestream's temporary names,
/// `.NAME.MARK.tilestream-tmp`, where MARK is `journal`, `state-a`, `state-b` or the
/// random letters and digits of a temporary output (at most 16); `None` for any other
/// name. The mark holds no dot, so the names of output `a` are never those of `a.npy`.
#[must_use]
pub fn own_temp_name(name: &str) -> Option<(&str, &str)> {
    let (dest, mark) = name
        .strip_prefix('.')?
        .strip_suffix(TEMP_SUFFIX)?
        .rsplit_once('.')?;
    let own_mark = is_random_part(mark) || matches!(mark, "state-a" | "state-b");
    (!dest.is_empty() && own_mark).then_some((dest, mark))
}

/// The directory of `dest` (`.` for a bare name) and the name its temporary files are
/// named after (`.NAME.MARK.tilestream-tmp`): its file name, or for a name too long to
/// take the 25 bytes more (a file name holds 255), its first 180 bytes, `~` and 16 hex
/// digits of checksums of the whole name.
/// An object output's (`s3://...`): its spool directory ([`spool_dir`]) and its key's
/// last segment.
pub(crate) fn dir_and_name(dest: &Path) -> Result<(PathBuf, String)> {
    if super::remote::is_url(dest) {
        let url = dest.to_string_lossy();
        let url = url.trim_end_matches('/');
        let name = url.rsplit('/').next().unwrap_or_default().to_string();
        return Ok((spool_dir(url)?, temp_stem(name)));
    }
    let name = dest
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: not a file name", dest.display())))?
        .to_string_lossy()
        .into_owned();
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, temp_stem(name)))
}

/// The local directory where the temporary file, journal and upload record of the object
/// output `url` lie while it is built: `objects/` and 16 hex digits of a hash of the URL
/// in the state directory, `$TILESTREAM_STATE_DIR`, else `$XDG_STATE_HOME/tilestream`,
/// else `~/.local/state/tilestream` (made, private to the user, when missing). It is
/// on the local disk, not in the temporary directory (often memory), since an output
/// file is built there whole before it is uploaded.
///
/// # Errors
/// [`Error::Io`] if it cannot be made.
pub fn spool_dir(url: &str) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let root = match std::env::var_os("TILESTREAM_STATE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
            (Some(x), _) if !x.is_empty() => PathBuf::from(x).join("tilestream"),
            (_, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".local/state/tilestream"),
            _ => std::env::temp_dir().join("tilestream-state"),
        },
    };
    // FNV-1a: stable across versions and machines, unlike std's hasher
    let hash = url
        .trim_end_matches('/')
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = root.join("objects").join(format!("{hash:016x}"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::io("create the spool directory", &dir, e))?;
    Ok(dir)
}

/// A record an object output `url` keeps in its spool directory ([`spool_dir`]) while a
/// run writes it: `.NAME.KIND.tilestream-tmp`, `KIND` holding a `-` so that no temporary
/// output's name is one (`upload-id`: an open multipart upload; `chunk-keys`: the keys a
/// Zarr store uploaded; see `crate::format::output::objects`).
///
/// # Errors
/// As [`spool_dir`].
pub(crate) fn object_record(url: &Path, kind: &str) -> Result<PathBuf> {
    let (dir, name) = dir_and_name(url)?;
    Ok(dir.join(format!(".{name}.{kind}{TEMP_SUFFIX}")))
}

/// Refuses an object (`s3://...`) as the output of a job split over a cluster: its
/// tasks fill one file or store in place, which must be a path every worker reaches.
///
/// # Errors
/// [`Error::Invalid`] for a URL.
pub fn refuse_shared_object(dest: &Path) -> Result<()> {
    if super::remote::is_url(dest) {
        return Err(Error::invalid(format!(
            "{}: a job split over a cluster writes its output in place, at a path every \
             worker reaches (a shared file system), not to an object store; write it there \
             and upload it, or run it in one process",
            crate::error::shown_url(&dest.to_string_lossy())
        )));
    }
    Ok(())
}

/// The name temporary files of an output named `name` are named after (see
/// [`dir_and_name`]).
fn temp_stem(name: String) -> String {
    const MAX: usize = 200;
    if name.len() <= MAX {
        return name;
    }
    let mut cut = 180;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let reversed: Vec<u8> = name.bytes().rev().collect();
    format!(
        "{}~{:08x}{:08x}",
        &name[..cut],
        crc32fast::hash(name.as_bytes()),
        crc32fast::hash(&reversed)
    )
}

/// True if `a` and `b` are the same file on disk (same device and inode).
#[must_use]
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// What a destination is expected to be: what [`check_destination`] accepts there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A file (`.npy`, raw, GeoTIFF), or a symbolic link to one.
    File,
    /// A directory store (a Zarr array): a directory tilestream recognises as one.
    Store,
}

impl Dest {
    /// What a destination's name says it is: a store when it ends in `.zarr` (any case)
    /// or already holds a `zarr.json`, else a file (the rule of
    /// [`OutFormat::of`](crate::format::OutFormat::of)).
    #[must_use]
    pub fn of(path: &Path) -> Self {
        let store = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("zarr"))
            || path.join("zarr.json").is_file();
        if store { Dest::Store } else { Dest::File }
    }
}

/// Opens (and with `create`, creates) one of a run's own temporary files for reading and
/// writing: not through a symbolic link, not blocking on a FIFO, and only if it is a
/// regular file with one link.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened (a symbolic link is refused by the kernel);
/// [`Error::Invalid`] if it is not a regular file of its own.
pub fn open_own(path: &Path, create: bool) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::invalid(format!(
                    "{}: is a symbolic link where tilestream keeps its own temporary file; \
                     remove it",
                    path.display()
                ))
            } else if create {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                Error::io("create a temporary output file in", dir, e)
            } else {
                Error::io("open", path, e)
            }
        })?;
    let m = file.metadata().map_err(|e| Error::io("inspect", path, e))?;
    if !m.file_type().is_file() {
        return Err(Error::invalid(format!(
            "{}: is a {} where tilestream keeps its own temporary file; remove it",
            path.display(),
            kind_of(m.file_type())
        )));
    }
    if m.nlink() > 1 {
        return Err(Error::invalid(format!(
            "{}: has {} hard links, so writing it would change another file; remove it",
            path.display(),
            m.nlink()
        )));
    }
    Ok(file)
}

/// Whether `candidate`, a file name read from a journal, is one the temporary output of
/// the destination named `dest_name` could have: `.NAME.XXXXXX.tilestream-tmp`, a
/// single path component whose middle part is the random letters and digits of
/// `tempfile`.
#[must_use]
pub fn temp_name_of(dest_name: &str, candidate: &str) -> bool {
    own_temp_name(candidate).is_some_and(|(dest, mark)| dest == dest_name && is_random_part(mark))
}

/// Whether `s` is the random part `tempfile` gives a temporary name: 1 to 16 letters
/// and digits.
pub(crate) fn is_random_part(s: &str) -> bool {
    !s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `name` is a chunk key of a Zarr store's top level: `c`, or digits and dots
/// as the v2 key encoding names chunks.
pub(crate) fn is_chunk_key(name: &str) -> bool {
    name == "c" || name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Opens one of tilestream's own files for reading only: never through a symbolic link,
/// never blocking on a FIFO (the caller checks what it is).
///
/// # Errors
/// What `open(2)` says; a symbolic link is `ELOOP`.
pub(crate) fn open_own_read(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Opens an input for reading, refusing anything that is not a regular file (a FIFO or
/// device would block the run or never end): opened non-blocking, then checked.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened; [`Error::Invalid`] if it is not a regular file.
pub fn open_input(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    let m = file.metadata().map_err(|e| Error::io("inspect", path, e))?;
    if !m.file_type().is_file() {
        return Err(Error::invalid(format!(
            "{}: is a {}, not a regular file; tilestream reads files (and Zarr store \
             directories)",
            path.display(),
            kind_of(m.file_type())
        )));
    }
    Ok(file)
}

/// Reads a small text input (a pipeline file, a kernel), at most `max` bytes, through
/// [`open_input`].
///
/// # Errors
/// As [`open_input`]; [`Error::Invalid`] if it is larger than `max` or not UTF-8.
pub fn read_small_input(path: &Path, max: u64) -> Result<String> {
    use std::io::Read as _;
    let too_large = || {
        Error::invalid(format!(
            "{}: larger than {max} bytes; this is not the small text file expected here",
            path.display()
        ))
    };
    if super::remote::is_url(path) {
        let url = path.to_str().unwrap_or_default();
        return match super::remote::fetch_whole(url, max)? {
            Some(super::remote::Whole::Bytes(b)) => String::from_utf8(b).map_err(|_| {
                Error::invalid(format!("{}: not UTF-8 text", crate::error::shown_url(url)))
            }),
            Some(super::remote::Whole::TooLarge(_)) => Err(too_large()),
            None => Err(Error::io(
                "open",
                crate::error::shown_url(url),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
            )),
        };
    }
    let file = open_input(path)?;
    let mut text = String::new();
    let n = file
        .take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::io("read", path, e))?;
    if n as u64 > max {
        return Err(too_large());
    }
    Ok(text)
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// Refuses an existing destination that finishing a run must not replace: anything but
/// a regular file (or a symbolic link, which the output replaces, leaving its target
/// alone) for a file output; anything but a Zarr v3 array store ([`zarr_array_store`])
/// for a Zarr output. A destination that does not exist is fine. A URL (`s3://...`) must
/// name a store that takes writes, and for a Zarr output hold no store yet.
///
/// # Errors
/// [`Error::Invalid`] naming what is there and what to do.
pub fn check_destination(dest: &Path, kind: Dest) -> Result<()> {
    if super::remote::is_url(dest) {
        use super::remote::upload;
        let bucket = upload::Bucket::open(&dest.to_string_lossy())?;
        if kind == Dest::File {
            // one request now, so that a bucket that is not there, or that the user may
            // not reach, fails before the run rather than after it
            bucket.is_empty_prefix()?;
            return Ok(());
        }
        if bucket.exists("zarr.json")? {
            // no atomic exchange of a store's keys: replacing it in place would leave a
            // mix of both arrays if the run failed
            return Err(Error::invalid(format!(
                "{}: a Zarr store is already there; tilestream does not replace a store in \
                 an object store (its chunks cannot be swapped at once): delete it or choose \
                 another prefix",
                bucket.shown()
            )));
        }
        let recorded = object_record(dest, "chunk-keys").is_ok_and(|p| p.is_file());
        if !recorded && !bucket.is_empty_prefix()? {
            return Err(upload::prefix_not_empty(&bucket));
        }
        return Ok(());
    }
    let Ok(m) = std::fs::symlink_metadata(dest) else {
        return Ok(());
    };
    let t = m.file_type();
    match kind {
        Dest::Store => {
            if t.is_dir() {
                return zarr_array_store(dest);
            }
            Err(Error::invalid(format!(
                "{}: exists and is a {}, not a Zarr store; not replacing it (remove it or \
                 choose another output)",
                dest.display(),
                if t.is_file() { "file" } else { kind_of(t) }
            )))
        }
        Dest::File if t.is_file() || t.is_symlink() => Ok(()),
        Dest::File if t.is_dir() => Err(Error::invalid(format!(
            "{}: is a directory; give an output file name",
            dest.display()
        ))),
        Dest::File => Err(Error::invalid(format!(
            "{}: is a {}; tilestream writes only regular files (and Zarr stores), so it will \
             not replace it",
            dest.display(),
            kind_of(t)
        ))),
    }
}

/// A path a run writes, for [`check_run_paths`].
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    /// What it is, in messages (`output`, `statistics`).
    pub role: &'a str,
    /// Where.
    pub path: &'a Path,
    /// A directory the run writes files into (`tiles`' patch directory), not a file or
    /// store it replaces.
    pub dir: bool,
}

/// The destination policy of a run, checked before anything is written: every path in
/// `writes` passes [`check_destination`] (never a device, FIFO, socket or directory
/// where a file goes), none is a file or store of `reads` (compared by file identity:
/// the same file by another name, or through a link, is the same file), and no two of
/// `writes` are one place.
///
/// # Errors
/// [`Error::Invalid`], one line naming both paths.
pub fn check_run_paths(writes: &[Written<'_>], reads: &[(&str, &Path)]) -> Result<()> {
    for (i, w) in writes.iter().enumerate() {
        if !w.dir {
            check_destination(w.path, Dest::of(w.path))?;
        }
        for (role, r) in reads {
            // `file.h5:/data` reads the file `file.h5`
            if same_place(w.path, &container_of(r)) {
                return Err(Error::invalid(format!(
                    "{}: the {} is also an input of this run (its {role} {}); write to another \
                     file",
                    w.path.display(),
                    w.role,
                    r.display()
                )));
            }
        }
        for other in &writes[..i] {
            if same_place(w.path, other.path) {
                return Err(Error::invalid(format!(
                    "{}: is both the {} and the {} of this run; give them different paths",
                    w.path.display(),
                    other.role,
                    w.role
                )));
            }
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one place: the same file or directory when both exist
/// (device and inode, through links), the same name in the same directory otherwise.
fn same_place(a: &Path, b: &Path) -> bool {
    if super::remote::is_url(a) || super::remote::is_url(b) {
        // objects: the same URL, or one within the other (a store and a key in it)
        let norm = |p: &Path| {
            let u = p.to_string_lossy();
            let u = u.trim_end_matches('/');
            match u.split_once("://") {
                Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
                None => u.to_string(),
            }
        };
        let (a, b) = (norm(a), norm(b));
        let within = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with('/'));
        return a == b || within(&a, &b) || within(&b, &a);
    }
    match (a.exists(), b.exists()) {
        (true, true) => same_file(a, b),
        (false, false) => place(a).is_some_and(|p| Some(p) == place(b)),
        _ => false,
    }
}

/// A path that does not exist as its directory's canonical path and its own name.
fn place(p: &Path) -> Option<std::path::PathBuf> {
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Puts the finished store `new` (a temporary directory beside `dest`) in place at
/// `dest`, replacing the Zarr store there, so that a kill at any instant leaves `dest`
/// either the old store or the new one, whole: the two are exchanged in one atomic
/// rename (`renameat2(RENAME_EXCHANGE)`), and only then is the old store, now under the
/// temporary name, removed (a kill during that removal leaves part of it under a name
/// `tilestream clean` removes). Where the file system cannot exchange, the old store is
/// renamed aside (`.NAME.aside.tilestream-tmp`) before the new one is renamed in; a run
/// killed between the two renames has its old store put back by the next replacement.
///
/// # Errors
/// [`Error::Invalid`] if `dest` is not a Zarr store tilestream may replace;
/// [`Error::Io`] if a rename fails.
pub fn replace_dir(new: &Path, dest: &Path) -> Result<()> {
    let renamed =
        |r: std::io::Result<()>| r.map_err(|e| Error::io("rename the finished output to", dest, e));
    // the store is renamed with the `.lock` its run holds (until then `clean` sees it
    // locked), which is removed as soon as it is in place, before any old store
    let unlock = || {
        let lock = dest.join(".lock");
        match std::fs::remove_file(&lock) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("remove", &lock, e))
            }
            _ => Ok(()),
        }
    };
    let aside = aside_of(dest);
    if let Some(aside) = &aside
        && std::fs::symlink_metadata(aside).is_ok_and(|m| m.is_dir())
    {
        // an earlier replacement killed between its two renames
        if std::fs::symlink_metadata(dest).is_err() {
            renamed(std::fs::rename(aside, dest))?;
        } else {
            std::fs::remove_dir_all(aside).map_err(|e| Error::io("remove", aside, e))?;
        }
    }
    if std::fs::symlink_metadata(dest).is_err() {
        renamed(std::fs::rename(new, dest))?;
        return unlock();
    }
    check_destination(dest, Dest::Store)?;
    match exchange(new, dest) {
        Ok(()) => {
            crate::fault::crash_point(|| "replace-exchanged".into());
            unlock()?;
            crate::fault::crash_point(|| "replace-unlocked".into());
            // `new` now holds the old store
            std::fs::remove_dir_all(new)
                .map_err(|e| Error::io("remove the replaced store at", new, e))
        }
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::ENOSYS | libc::ENOTSUP)
            ) =>
        {
            let Some(aside) = aside else {
                return Err(Error::io("rename the finished output to", dest, e));
            };
            renamed(std::fs::rename(dest, &aside))?;
            renamed(std::fs::rename(new, dest))?;
            unlock()?;
            std::fs::remove_dir_all(&aside).map_err(|e| Error::io("remove", &aside, e))
        }
        Err(e) => Err(Error::io("rename the finished output to", dest, e)),
    }
}

/// Where [`replace_dir`] moves an old store aside when it cannot exchange.
fn aside_of(dest: &Path) -> Option<std::path::PathBuf> {
    let (_, name) = dir_and_name(dest).ok()?;
    Some(dest.with_file_name(format!(".{name}.aside{TEMP_SUFFIX}")))
}

/// Exchanges two paths in one atomic rename.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt as _;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
        };
        let (ca, cb) = (c(a)?, c(b)?);
        // SAFETY: renameat2 reads two NUL-terminated strings that live across the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (a, b);
        Err(std::io::Error::from_raw_os_error(libc::ENOTSUP))
    }
}

/// Most bytes of a `zarr.json` read to recognise a store.
const ZARR_JSON_MAX: u64 = 1 << 20;

/// Accepts a directory as a Zarr v3 array store tilestream may replace: its `zarr.json`
/// is a Zarr v3 array's metadata (`zarr_format` 3, `node_type` "array"), and every other
/// entry is a chunk key (`c`, or digits and dots as the v2 key encoding names chunks).
///
/// # Errors
/// [`Error::Invalid`] naming what makes it something else.
pub fn zarr_array_store(dir: &Path) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::invalid(format!(
            "{}: exists and {why}; not replacing it (remove it or choose another output)",
            dir.display()
        )))
    };
    let meta = dir.join("zarr.json");
    let m = match std::fs::symlink_metadata(&meta) {
        Ok(m) if m.file_type().is_file() && m.len() <= ZARR_JSON_MAX => m,
        Ok(_) => return refuse("its zarr.json is not a small regular file".into()),
        Err(_) => return refuse("is a directory that is not a Zarr store (no zarr.json)".into()),
    };
    let text = std::fs::read(&meta).map_err(|e| Error::io("read", &meta, e))?;
    let json: Option<serde_json::Value> = serde_json::from_slice(&text).ok();
    let is_array = json.as_ref().is_some_and(|j| {
        j.get("zarr_format").and_then(serde_json::Value::as_u64) == Some(3)
            && j.get("node_type").and_then(serde_json::Value::as_str) == Some("array")
    });
    if !is_array || m.len() == 0 {
        return refuse("its zarr.json is not the metadata of a Zarr v3 array".into());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // `.lock`: what a run killed just after putting its store in place leaves
        if name != "zarr.json" && name != ".lock" && !is_chunk_key(&name) {
            return refuse(format!("holds `{name}`, which is not part of a Zarr array"));
        }
    }
    Ok(())
}

/// `file.h5:/group/data` (an array inside a file) split into the file and the array's
/// name, when `path` itself is no
/// file but what comes before one of its colons is. `None` otherwise.
#[must_use]
pub fn split_dataset(path: &Path) -> Option<(PathBuf, String)> {
    if path.exists() {
        return None;
    }
    let s = path.to_str()?;
    s.match_indices(':').find_map(|(i, _)| {
        let file = Path::new(&s[..i]);
        file.is_file()
            .then(|| (file.to_path_buf(), s[i + 1..].to_string()))
    })
}

/// The file an input path reads: the HDF5 or NetCDF file of `file.h5:/dataset`, else
/// the path (the file whose identity the destination policy and `--resume` compare).
#[must_use]
pub fn container_of(path: &Path) -> PathBuf {
    split_dataset(path).map_or_else(|| path.to_path_buf(), |(f, _)| f)
}

#[cfg(test)]
mod tests;
