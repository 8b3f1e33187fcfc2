//! Resumable runs: a small journal beside a run's temporary output records what is done,
//! so that a run killed after hours of work continues where it stopped (`--resume`)
//! instead of starting over, and still yields a file byte-identical to an uninterrupted
//! run.
//!
//! # What is kept, and where
//! Beside the output `DIR/NAME` (all removed by `tilestream clean` or the next run of
//! the same output without `--resume`, and all locked while a run uses them):
//! - the temporary output `DIR/.NAME.XXXXXX.tilestream-tmp` (see [`OutputFile`]);
//! - the journal `DIR/.NAME.journal.tilestream-tmp`, a text file of one record a line;
//! - for passes without an output (reductions), two state slots
//!   `DIR/.NAME.state-{a,b}.tilestream-tmp` holding the accumulators after a tile.
//!
//! # Records
//! ```text
//! tilestream-journal 2                 *crc     format version
//! op <the operation, in words>         *crc     refused on resume if different
//! input <size> <mtime> <dev> <ino> <path>  *crc one per input, refused if changed
//! out <temporary output file name>     *crc
//! pass <k> <plan fingerprint>          *crc     refused if the plan differs
//! tile <k> <i> <crc32 of its bytes>    *crc     tile i of pass k is written
//! chunks <k> <c> <offset> <crc32> <len,len,...> *crc  chunks c, c+1, ... of a streamed
//!                                         GeoTIFF or Zarr output are written (lengths)
//! state <k> <i> <slot> <len> <crc32>   *crc     the slot holds the state after tile i
//! ```
//! Each line ends with the CRC-32 of its text, so a line torn by a crash is ignored, and
//! so is everything after it. Tiles are written in plan order, so the done tiles of a
//! pass are a prefix; on resume every journaled tile is read back from the temporary
//! output and its checksum compared, and the run restarts at the first tile that does
//! not match (a tile the page cache lost in a power failure is simply redone). Lines
//! are written without fsync: after a kill the page cache keeps them; after a power
//! failure the checksums catch what was lost.
//!
//! A GeoTIFF output encoded as the run writes it (see [`crate::format::tiff::stream`])
//! cannot be read back as raw tiles: its runs of chunks are checked instead (each
//! against its CRC-32, each starting where the last ended), the file is cut after the
//! last intact one, and the run restarts at the first tile that writes a chunk not
//! kept. (Version 1 recorded rows of tiles by their number: a `--resume` that finds such
//! a journal says so, removes what that run left and starts over.)
//!
//! Passes are numbered in the order the operation runs them (standardize: statistics,
//! then apply), so each resumes separately.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crate::budget::MemoryBudget;
use crate::error::{Error, Result};
use crate::format::chunk_assembly::ChunkRun;
use crate::format::{OutputFile, TEMP_SUFFIX, clean_stale, dir_and_name, lock};
use crate::io::own_files;
use crate::layout::Layout;

mod records;
mod resume;

use records::{HEADER, Prev, parse, seal};
use resume::{check_same_job, file_crc, first_needed, open_slot, verify};

/// What a run is: the operation in words and the identity of every input, as the caller
/// states them. A journal written for one key is refused by a run with another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobKey {
    op: String,
    inputs: Vec<(String, String)>,
}

impl JobKey {
    /// A key for the operation described by `op` (every parameter that changes the
    /// output bytes must appear in it; newlines are replaced by spaces).
    #[must_use]
    pub fn new(op: impl Into<String>) -> Self {
        JobKey {
            // a pre-signed URL's query is a credential: never written to the journal
            op: crate::error::redact_urls(&op.into().replace(['\n', '\r'], " ")),
            inputs: Vec::new(),
        }
    }

    /// Adds an input file: its size, modification time and inode are recorded (an
    /// object's size, `ETag` and modification time), so an input changed since the
    /// interrupted run is detected.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be inspected.
    pub fn input(mut self, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if crate::io::remote::is_url(path) {
            // an object: its size, ETag and modification time
            crate::format::refuse_object(path)?;
            let url = path.to_string_lossy();
            // a Zarr store: its metadata object (as a local store's directory)
            let o = if crate::format::zarr::is_zarr_path(path) {
                crate::io::remote::Object::open(&path.join("zarr.json").to_string_lossy())?
            } else {
                crate::io::remote::Object::open(&url)?
            };
            self.inputs
                .push((crate::error::shown_url(&url), o.identity().to_string()));
            return Ok(self);
        }
        // `file.h5:/data`: the identity of the file it is in
        let file = crate::io::own_files::container_of(path);
        let m = std::fs::metadata(&file).map_err(|e| Error::io("open", &file, e))?;
        let id = format!(
            "{} {}.{:09} {} {}",
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.dev(),
            m.ino()
        );
        self.inputs
            .push((path.display().to_string().replace(['\n', '\r'], " "), id));
        Ok(self)
    }
}

/// Where a pass starts, as [`Journal::begin_pass`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassStart {
    /// Number of the pass within the run.
    pub pass: usize,
    /// First tile to compute: the ones before are done.
    pub start: usize,
}

/// The journal of one run writing one output; see the module documentation.
#[derive(Debug)]
pub struct Journal {
    dest: PathBuf,
    dir: PathBuf,
    path: PathBuf,
    file: Mutex<File>,
    slots: [PathBuf; 2],
    slot_files: Mutex<[Option<File>; 2]>,
    prev: Option<Prev>,
    adopted: AtomicBool,
    next_pass: AtomicUsize,
    last_slot: AtomicUsize,
    /// (slot, length) of the state the current pass resumes from, until restored.
    state: Mutex<Option<(usize, u64)>>,
    last_checkpoint: Mutex<Option<Instant>>,
    keep: AtomicBool,
}

pub use crate::fault::crash_point;

impl Journal {
    /// Opens the journal of a run writing `dest`. With `resume`, what an interrupted run
    /// of the same `key` left is taken up; without, anything left beside `dest` is
    /// removed first.
    ///
    /// # Errors
    /// [`Error::Invalid`] if another run is writing `dest`, or (resuming) if the
    /// interrupted run was another operation or an input changed since; [`Error::Io`] if
    /// the journal cannot be created.
    pub fn open(dest: &Path, key: &JobKey, resume: bool, max_bytes: u64) -> Result<Self> {
        let (dir, name) = dir_and_name(dest)?;
        if !resume {
            let _ = clean_stale(&dir, Some(&name));
        }
        let path = dir.join(format!(".{name}.journal{TEMP_SUFFIX}"));
        let mut file = own_files::open_own(&path, true)?;
        if !lock(&file) {
            return Err(Error::invalid(format!(
                "{}: another tilestream run is writing this output; wait for it to end or stop it",
                dest.display()
            )));
        }
        let slots = [
            dir.join(format!(".{name}.state-a{TEMP_SUFFIX}")),
            dir.join(format!(".{name}.state-b{TEMP_SUFFIX}")),
        ];
        let mut prev = None;
        if resume {
            let size = file.metadata().map_or(0, |m| m.len());
            if size > max_bytes {
                return Err(Error::invalid(format!(
                    "cannot resume {}: the interrupted run's journal is {}, more than this \
                     run reads of one (half of `memory`, {}); run without `resume` to start \
                     over, or give the `memory` of the interrupted run",
                    dest.display(),
                    crate::budget::fmt_bytes(size),
                    crate::budget::fmt_bytes(max_bytes)
                )));
            }
            let mut text = String::new();
            let _ = (&mut file).take(max_bytes).read_to_string(&mut text);
            if let Some(p) = parse(&text) {
                check_same_job(dest, key, &p)?;
                prev = Some(p);
            } else if text.starts_with(crate::format::JOURNAL_MAGIC) {
                // another version's journal: what its run left cannot be taken up
                eprintln!(
                    "note: {}: the interrupted run was made by another version of tilestream; \
                     starting over",
                    dest.display()
                );
                let _ = clean_stale(&dir, Some(&name));
            }
        }
        let mut slot_files = [None, None];
        if prev.is_some() {
            // the interrupted run's state slots: hold them so `clean` leaves them alone
            for (s, p) in slot_files.iter_mut().zip(&slots) {
                if let Ok(f) = own_files::open_own(p, false) {
                    let _ = lock(&f);
                    *s = Some(f);
                }
            }
        } else {
            file.set_len(0)
                .map_err(|e| Error::io("write the journal", &path, e))?;
            let mut head = seal(HEADER);
            head.push_str(&seal(&format!("op {}", key.op)));
            for (p, id) in &key.inputs {
                head.push_str(&seal(&format!("input {id} {p}")));
            }
            file.write_all_at(head.as_bytes(), 0)
                .map_err(|e| Error::io("write the journal", &path, e))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|e| Error::io("write the journal", &path, e))?;
        Ok(Journal {
            dest: dest.to_path_buf(),
            dir,
            path,
            file: Mutex::new(file),
            slots,
            slot_files: Mutex::new(slot_files),
            prev,
            adopted: AtomicBool::new(false),
            next_pass: AtomicUsize::new(0),
            last_slot: AtomicUsize::new(1),
            state: Mutex::new(None),
            last_checkpoint: Mutex::new(None),
            keep: AtomicBool::new(false),
        })
    }

    fn record(&self, text: &str) -> Result<()> {
        let mut f = self
            .file
            .lock()
            .map_err(|_| Error::Internal("journal lock poisoned".into()))?;
        f.write_all(seal(text).as_bytes())
            .map_err(|e| Error::io("write the journal", &self.path, e))
    }

    /// The output file: the interrupted run's temporary output when it is still there
    /// and has the right size and header, else a new one.
    ///
    /// # Errors
    /// As [`OutputFile::create`].
    pub fn output(
        &self,
        shape: &[usize],
        dtype: crate::DType,
        durable: bool,
        format: crate::format::OutFormat,
    ) -> Result<OutputFile> {
        if let Some(name) = self.prev.as_ref().and_then(|p| p.out.as_ref()) {
            let (_, dest_name) = dir_and_name(&self.dest)?;
            if !own_files::temp_name_of(&dest_name, name) {
                return Err(Error::invalid(format!(
                    "{}: the journal of the interrupted run names `{name}` as its temporary \
                     output, which is not a name this output's runs make; run without \
                     `resume` (or clean the directory) to start over",
                    self.dest.display()
                )));
            }
            if let Ok(out) =
                OutputFile::adopt_as(&self.dest, &self.dir.join(name), shape, dtype, format)
            {
                self.adopted.store(true, Ordering::Relaxed);
                return Ok(out.durable(durable));
            }
        }
        let out = OutputFile::create_as(&self.dest, shape, dtype, format)?.durable(durable);
        let name = out
            .temp_path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.record(&format!("out {name}"))?;
        Ok(out)
    }

    /// Starts the next pass over `layout`, writing `output` if given, and returns where
    /// it starts: after the tiles the interrupted run completed (each read back from the
    /// output and checked), or after its last state checkpoint for a pass without output
    /// (the state is then restored by [`restore_state`](Self::restore_state)).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the interrupted run planned this pass with other tiles;
    /// [`Error::Io`] if reading back fails.
    pub fn begin_pass<L: Layout>(
        &self,
        layout: &L,
        output: Option<&OutputFile>,
        budget: &MemoryBudget,
    ) -> Result<PassStart> {
        let k = self.next_pass.fetch_add(1, Ordering::Relaxed);
        let n = layout.num_tiles();
        let fingerprint = if n == 0 {
            "0 tiles".to_string()
        } else {
            format!(
                "{n} tiles, first {:?}, last {:?}",
                layout.tile(0),
                layout.tile(n - 1)
            )
            .replace(['\n', '\r'], " ")
        };
        let mut start = 0;
        if let Some(pp) = self.prev.as_ref().and_then(|p| p.passes.get(&k)) {
            let fp = &pp.fingerprint;
            if *fp != fingerprint {
                // a refusal: what the interrupted run left stays for the right command
                self.keep();
                return Err(Error::invalid(format!(
                    "cannot resume {}: the interrupted run planned this pass as {fp}, now it is {fingerprint}; give the same `memory` and `depth`, or run without `resume` to start over",
                    self.dest.display()
                )));
            }
            match output {
                Some(out) if out.is_streaming() && out.is_adopted() => {
                    out.resume_stream(&pp.runs)?;
                    start = first_needed(layout, out);
                }
                Some(out) if self.adopted.load(Ordering::Relaxed) => {
                    start = verify(layout, out, &pp.tiles, budget)?;
                }
                Some(_) => {}
                None => {
                    if let Some((i, slot, len, crc)) = pp.state
                        && file_crc(&self.slots[slot], len).ok() == Some((len, crc))
                    {
                        start = i + 1;
                        self.last_slot.store(slot, Ordering::Relaxed);
                        *self
                            .state
                            .lock()
                            .map_err(|_| Error::Internal("journal lock poisoned".into()))? =
                            Some((slot, len));
                    }
                }
            }
        }
        if let Ok(mut t) = self.last_checkpoint.lock() {
            *t = Some(Instant::now());
        }
        self.record(&format!("pass {k} {fingerprint}"))?;
        tracing::info!(pass = k, start, tiles = n, "journal pass");
        Ok(PassStart { pass: k, start })
    }

    /// Number of the pass begun last.
    #[must_use]
    pub fn pass(&self) -> usize {
        self.next_pass.load(Ordering::Relaxed).saturating_sub(1)
    }

    /// Fills `parts` (in order) with the state the current pass without output resumes
    /// from, read straight from its slot (no copy is held in memory). Returns false when
    /// there is none, or when it was handed over already.
    ///
    /// # Errors
    /// [`Error::Internal`] if the saved state is not the size of `parts`; [`Error::Io`]
    /// if the slot cannot be read.
    pub fn restore_state(&self, parts: &mut [&mut [u8]]) -> Result<bool> {
        let taken = self.state.lock().ok().and_then(|mut s| s.take());
        let Some((slot, len)) = taken else {
            return Ok(false);
        };
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total as u64 != len {
            return Err(Error::Internal(format!(
                "the saved state of the interrupted run has {len} bytes, this reduction {total}"
            )));
        }
        let path = &self.slots[slot];
        let f = open_slot(path).map_err(|e| Error::io("read the state of", path, e))?;
        let mut at = 0u64;
        for p in parts.iter_mut() {
            f.read_exact_at(p, at)
                .map_err(|e| Error::io("read the state of", path, e))?;
            at += p.len() as u64;
        }
        Ok(true)
    }

    /// Records that tile `i` of pass `pass` is written, with the CRC-32 of its bytes.
    ///
    /// # Errors
    /// [`Error::Io`] if the journal cannot be written.
    pub fn tile_written(&self, pass: usize, i: usize, crc: u32) -> Result<()> {
        self.record(&format!("tile {pass} {i} {crc:08x}"))?;
        crash_point(|| format!("written:{pass}:{i}"));
        Ok(())
    }

    /// Records that the run of chunks `d` of a streamed GeoTIFF or Zarr output of pass
    /// `pass` is written.
    ///
    /// # Errors
    /// [`Error::Io`] if the journal cannot be written.
    pub fn chunks_written(&self, pass: usize, d: &ChunkRun) -> Result<()> {
        let counts: Vec<String> = d.counts.iter().map(u64::to_string).collect();
        self.record(&format!(
            "chunks {pass} {} {} {:08x} {}",
            d.first,
            d.offset,
            d.crc,
            counts.join(",")
        ))
    }

    /// After tile `i` of a pass without output: saves the state that `parts()` lends
    /// (written straight from the accumulators, no copy), when a checkpoint is due:
    /// after every tile while the state is at most 64 KiB, else once a second at most,
    /// so a large state costs a small fraction of the run.
    ///
    /// # Errors
    /// [`Error::Io`] if the state or the journal cannot be written.
    pub fn checkpoint<'p>(
        &self,
        pass: usize,
        i: usize,
        size: u64,
        parts: impl FnOnce() -> Vec<&'p [u8]>,
    ) -> Result<()> {
        if self.checkpoint_due(size, 0.0)? {
            self.save_checkpoint(pass, i, &parts())?;
        }
        self.tile_passed(pass, i);
        Ok(())
    }

    /// Whether a checkpoint of a state of `size` bytes is due now: with `min_secs` 0,
    /// after every tile for a state of at most 64 KiB and once a second for a larger
    /// one; otherwise at most once per `min_secs` (a device's state must be brought back
    /// to be saved, which stops its pipeline: once a second costs little, every tile
    /// most of the overlap). When it answers yes it counts the checkpoint as taken: the
    /// caller saves it with [`Journal::save_checkpoint`].
    ///
    /// # Errors
    /// [`Error::Internal`] if the journal's lock was poisoned.
    pub fn checkpoint_due(&self, size: u64, min_secs: f64) -> Result<bool> {
        let mut last = self
            .last_checkpoint
            .lock()
            .map_err(|_| Error::Internal("journal lock poisoned".into()))?;
        let every = if min_secs > 0.0 { min_secs } else { 1.0 };
        let due = (min_secs <= 0.0 && size <= 64 << 10)
            || last.is_none_or(|t| t.elapsed().as_secs_f64() >= every);
        if due {
            *last = Some(Instant::now());
        }
        Ok(due)
    }

    /// Marks tile `i` of pass `pass` as passed, checkpointed or not: a fault-injection
    /// point (`written:PASS:TILE`) for the kill tests.
    #[allow(clippy::unused_self)] // a method so that only a run holding a journal marks tiles
    pub fn tile_passed(&self, pass: usize, i: usize) {
        crash_point(|| format!("written:{pass}:{i}"));
    }

    /// Saves the state `parts` reached after tile `i` of pass `pass` (a checkpoint
    /// [`Journal::checkpoint_due`] said was due).
    ///
    /// # Errors
    /// I/O errors writing the state.
    pub fn save_checkpoint(&self, pass: usize, i: usize, parts: &[&[u8]]) -> Result<()> {
        let poisoned = || Error::Internal("journal lock poisoned".into());
        let slot = 1 - self.last_slot.load(Ordering::Relaxed);
        let mut files = self.slot_files.lock().map_err(|_| poisoned())?;
        if files[slot].is_none() {
            let f = own_files::open_own(&self.slots[slot], true)?;
            let _ = lock(&f);
            files[slot] = Some(f);
        }
        let mut h = crc32fast::Hasher::new();
        let mut at = 0u64;
        if let Some(f) = &files[slot] {
            f.set_len(0)
                .map_err(|e| Error::io("write the state of", &self.slots[slot], e))?;
            for p in parts {
                f.write_all_at(p, at)
                    .map_err(|e| Error::io("write the state of", &self.slots[slot], e))?;
                h.update(p);
                at += p.len() as u64;
            }
        }
        drop(files);
        self.record(&format!(
            "state {pass} {i} {slot} {at} {:08x}",
            h.finalize()
        ))?;
        self.last_slot.store(slot, Ordering::Relaxed);
        Ok(())
    }

    /// Keeps the journal, its state and the temporary output when dropped (an
    /// interrupted run that can be resumed).
    pub fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }

    /// True once [`keep`](Self::keep) was called.
    #[must_use]
    pub fn kept(&self) -> bool {
        self.keep.load(Ordering::Relaxed)
    }

    /// The run is complete: removes the journal and its state slots.
    pub fn finish(self) {
        self.keep.store(false, Ordering::Relaxed);
        // dropped here: removes the files
    }

    fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.path);
        for s in &self.slots {
            let _ = std::fs::remove_file(s);
        }
        if crate::io::remote::is_url(&self.dest)
            && let Some(spool) = self.path.parent()
        {
            // an object output's spool directory, once nothing is left in it
            let _ = std::fs::remove_dir(spool);
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::Relaxed) {
            self.remove_files();
        }
    }
}
