//! Outputs in object stores, the local side: the records an object output keeps in its
//! spool directory (`crate::io::own_files::spool_dir`) so that what a killed run left in
//! the bucket can be found again — a file's open multipart upload
//! (`.NAME.upload-id.tilestream-tmp`: its URL and upload id) and the chunk keys a Zarr
//! store uploaded (`.NAME.chunk-keys.tilestream-tmp`) — and the cleaning of them
//! (`tilestream clean URL`, and a new run to that URL). The requests themselves are
//! `crate::io::remote::upload`'s.
//!
//! A record is locked while its run lives; `clean` leaves a locked one alone and reads
//! the others through the descriptor it locked.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::own_files::{self, dir_and_name};
use crate::io::remote::upload::{Bucket, UploadRecord};
use crate::io::temp::{clean_stale, lock};

/// What a record of an open multipart upload starts with.
const RECORD_MAGIC: &str = "tilestream-upload 1";

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// Writes the record of upload `id` to `url` at `record`, flushed and locked while the
/// upload lives (a record locked by a live run is not aborted by `clean`).
fn write_record(record: &Path, url: &str, id: &str) -> Result<File> {
    use std::io::Write as _;
    let mut f = own_files::open_own(record, true)?;
    if !lock(&f) {
        return Err(Error::invalid(format!(
            "{}: another tilestream run is uploading this output",
            crate::error::shown_url(url)
        )));
    }
    f.set_len(0).map_err(|e| Error::io("write", record, e))?;
    writeln!(f, "{RECORD_MAGIC}\n{url}\n{id}")
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("write", record, e))?;
    Ok(f)
}

/// Aborts the multipart upload a killed run recorded at `record` and removes the
/// record; the URL it was to, or `None` when `record` is not such a record or a live
/// run holds it.
///
/// # Errors
/// [`Error::Io`] if the record cannot be read or the store refuses the abort.
pub fn abort_recorded(record: &Path) -> Result<Option<String>> {
    let Ok(f) = own_files::open_own(record, false) else {
        return Ok(None);
    };
    if !lock(&f) {
        return Ok(None);
    }
    // through the locked descriptor: the record this process holds, whatever the
    // path names now
    let text = read_locked(&f, record)?;
    let mut lines = text.lines();
    let (Some(RECORD_MAGIC), Some(url), Some(id)) = (lines.next(), lines.next(), lines.next())
    else {
        return Ok(None);
    };
    let bucket = Bucket::open(url)?;
    bucket.abort(id)?;
    std::fs::remove_file(record).map_err(|e| Error::io("remove", record, e))?;
    drop(f);
    Ok(Some(bucket.shown().to_string()))
}

/// What a record of a Zarr object output's uploaded chunks starts with.
const CHUNKS_MAGIC: &str = "tilestream-chunks 1";

/// The record of the chunk keys a Zarr object output at `url` uploaded (in its spool
/// directory).
fn chunks_record(url: &Path) -> Result<PathBuf> {
    own_files::object_record(url, "chunk-keys")
}

/// Opens (making it when missing) the record of the chunk keys the Zarr object output at
/// `url` uploads, locked while its run lives so that no `clean` deletes them meanwhile.
///
/// # Errors
/// [`Error::Io`] if it cannot be made or another run holds it.
pub fn hold_chunks_record(url: &Path) -> Result<File> {
    use std::io::Write as _;
    let path = chunks_record(url)?;
    let mut f = own_files::open_own(&path, true)?;
    if !lock(&f) {
        return Err(Error::invalid(format!(
            "{}: another tilestream run is writing this output",
            crate::error::shown_url(&url.to_string_lossy())
        )));
    }
    let len = f.metadata().map_or(0, |m| m.len());
    if len == 0 {
        writeln!(f, "{CHUNKS_MAGIC}\n{}", url_text(url))
            .map_err(|e| Error::io("write", &path, e))?;
    }
    Ok(f)
}

/// Logs `keys` (below the store's URL) in the record `f` ([`hold_chunks_record`]),
/// flushed, before they are uploaded.
///
/// # Errors
/// [`Error::Io`] if it cannot be written.
pub fn log_chunks(mut f: &File, keys: &[String]) -> Result<()> {
    use std::io::Write as _;
    let mut text = String::new();
    for k in keys {
        text.push_str(k);
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("write", Path::new("the record of uploaded chunks"), e))
}

/// `url` as records name it: without a trailing `/` (the spool directory is the same
/// either way).
fn url_text(url: &Path) -> String {
    url.to_string_lossy().trim_end_matches('/').to_string()
}

/// The text of the record `f` (opened from `path`), read through its descriptor.
fn read_locked(mut f: &File, path: &Path) -> Result<String> {
    use std::io::{Read as _, Seek as _};
    let mut text = String::new();
    f.seek(std::io::SeekFrom::Start(0))
        .and_then(|_| f.read_to_string(&mut text))
        .map_err(|e| Error::io("read", path, e))?;
    Ok(text)
}

/// Deletes the chunks the record `f` (held, [`hold_chunks_record`]) lists for the store
/// `bucket` at `url`, 64 requests at a time; how many it listed. A record of another URL
/// or not tilestream's deletes nothing.
///
/// # Errors
/// [`Error::Io`] if the record cannot be read or a delete fails.
pub fn delete_recorded_chunks(f: &File, url: &Path, bucket: &Bucket) -> Result<usize> {
    let path = chunks_record(url)?;
    let text = read_locked(f, &path)?;
    let mut lines = text.lines();
    if lines.next() != Some(CHUNKS_MAGIC) || lines.next() != Some(&*url_text(url)) {
        return Ok(0);
    }
    let keys: Vec<String> = lines.map(str::to_string).collect();
    for batch in keys.chunks(64) {
        bucket.delete_many(batch)?;
    }
    Ok(keys.len())
}

/// Removes the record of the Zarr object output at `url`'s chunks (its store is
/// finished, or its chunks deleted).
pub fn forget_chunks(url: &Path) {
    if let Ok(p) = chunks_record(url) {
        let _ = std::fs::remove_file(p);
    }
}

/// Removes what killed runs writing the object output `url` left: aborts its recorded
/// multipart upload, deletes the chunks a Zarr store's record lists when the store has
/// no `zarr.json` (never finished), and removes their records and the local spool's
/// temporary files. A record a live run holds is left alone. Returns what was done, a
/// line each.
///
/// # Errors
/// [`Error::Io`] if the store refuses a request or a record cannot be
/// read.
pub fn clean_leftovers(url: &Path) -> Result<Vec<String>> {
    let (dir, name) = dir_and_name(url)?;
    let mut done = Vec::new();
    if let Some(u) = abort_recorded(&own_files::object_record(url, "upload-id")?)? {
        done.push(format!("aborted the unfinished upload to {u}"));
    }
    let path = chunks_record(url)?;
    if let Ok(f) = own_files::open_own(&path, false) {
        if !lock(&f) {
            return Ok(done);
        }
        let bucket = Bucket::open(&url.to_string_lossy())?;
        // a finished store's chunks are its own: only its record goes
        if !bucket.exists("zarr.json")? {
            let n = delete_recorded_chunks(&f, url, &bucket)?;
            done.push(format!(
                "deleted {n} chunk(s) of the unfinished store {}",
                bucket.shown()
            ));
        }
        let _ = std::fs::remove_file(&path);
    }
    for p in clean_stale(&dir, Some(&name))? {
        done.push(format!("removed {}", p.display()));
    }
    Ok(done)
}

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// The record of a file output's open multipart upload: a file in the spool, written and
/// locked when the upload starts, unlinked (while still locked) when it ends.
struct FileRecord {
    path: PathBuf,
    held: Option<File>,
}

impl UploadRecord for FileRecord {
    fn started(&mut self, url: &str, id: &str) -> Result<()> {
        self.held = Some(write_record(&self.path, url, id)?);
        Ok(())
    }

    fn ended(&mut self) {
        // unlinked while still locked: `clean` never reads another run's record here
        let _ = std::fs::remove_file(&self.path);
        self.held = None;
    }
}

/// Uploads the finished local file `file` (of `len` bytes) to `url` within `memory`
/// ([`Bucket::upload_file`]), the id of a multipart upload kept in the spool of `url`
/// while it is open; an upload a killed run recorded there is aborted first.
///
/// # Errors
/// As [`Bucket::upload_file`]; [`Error::Invalid`] if another run is uploading to `url`.
pub fn upload_output(file: &File, len: u64, url: &Path, memory: u64) -> Result<()> {
    let path = own_files::object_record(url, "upload-id")?;
    // an upload a killed run left open for this key: aborted, not forgotten
    abort_recorded(&path)?;
    let bucket = Bucket::open(&url.to_string_lossy())?;
    bucket.upload_file(file, len, memory, &mut FileRecord { path, held: None })
}
