//! Checks before a run is resumed: that it is the same job over the same inputs, and
//! that what the interrupted run wrote is still there as it recorded it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read as _;
use std::path::Path;

use super::{JobKey, Prev};
use crate::budget::MemoryBudget;
use crate::error::{Error, Result};
use crate::format::OutputFile;
use crate::io::own_files;
use crate::layout::{Layout, Write};

/// The length and CRC-32 of a state slot, read in 1 MiB pieces and at most `max + 1`
/// bytes: the slot is opened as [`open_slot`] does, so a FIFO or a link to a device planted under its name
/// neither blocks the run nor feeds it without end.
pub(super) fn file_crc(path: &Path, max: u64) -> std::io::Result<(u64, u32)> {
    let mut f = open_slot(path)?.take(max + 1);
    let mut buf = vec![0u8; 1 << 20];
    let mut h = crc32fast::Hasher::new();
    let mut len = 0u64;
    loop {
        match f.read(&mut buf)? {
            0 => break,
            n => {
                h.update(&buf[..n]);
                len += n as u64;
            }
        }
    }
    Ok((len, h.finalize()))
}

/// Opens a state slot for reading: never through a symbolic link, never blocking on a
/// FIFO, and only if it is a regular file.
pub(super) fn open_slot(path: &Path) -> std::io::Result<File> {
    let f = own_files::open_own_read(path)?;
    if f.metadata()?.file_type().is_file() {
        Ok(f)
    } else {
        Err(std::io::Error::other("not a regular file"))
    }
}

pub(super) fn check_same_job(dest: &Path, key: &JobKey, p: &Prev) -> Result<()> {
    if p.op.as_deref() != Some(key.op.as_str()) {
        return Err(Error::invalid(format!(
            "cannot resume {}: the interrupted run was another operation ({}); run without `resume` to start over",
            dest.display(),
            p.op.as_deref().unwrap_or("unknown")
        )));
    }
    for (path, id) in &key.inputs {
        match p.inputs.iter().find(|(q, _)| q == path) {
            None => {
                return Err(Error::invalid(format!(
                    "cannot resume {}: the interrupted run did not read {path}; run without `resume` to start over",
                    dest.display()
                )));
            }
            Some((_, old)) if old != id => {
                return Err(Error::invalid(format!(
                    "cannot resume {}: input {path} changed since the interrupted run (size, time or inode differ); run without `resume` to start over",
                    dest.display()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The first tile of `layout` that writes an element of `out` not yet in a chunk the
/// stream kept (the number of tiles if none does): where a resumed streamed output
/// starts again. Every tile before it writes only kept chunks; every chunk not kept gets
/// all its elements from this tile on.
pub(super) fn first_needed<L: Layout>(layout: &L, out: &OutputFile) -> usize {
    let mut writes: Vec<Write> = Vec::new();
    (0..layout.num_tiles())
        .find(|&i| {
            writes.clear();
            layout.writes(&layout.tile(i), &mut writes);
            writes.iter().any(|w| !out.covered(w.file_elem, w.len))
        })
        .unwrap_or(layout.num_tiles())
}

/// Reads back the journaled tiles of a pass from `out`, in order, and returns how many
/// match their checksums (the first that does not ends the count).
pub(super) fn verify<L: Layout>(
    layout: &L,
    out: &OutputFile,
    tiles: &BTreeMap<usize, u32>,
    budget: &MemoryBudget,
) -> Result<usize> {
    let es = out.dtype().size() as u64;
    let cap = layout.out_slot_elems() * es;
    let _r = budget.reserve("reading back the tiles of an interrupted run", cap)?;
    let mut buf = vec![0u8; usize::try_from(cap).unwrap_or(usize::MAX)];
    let mut writes: Vec<Write> = Vec::new();
    let mut good = 0;
    for i in 0..layout.num_tiles() {
        let Some(&want) = tiles.get(&i) else { break };
        writes.clear();
        layout.writes(&layout.tile(i), &mut writes);
        let mut h = crc32fast::Hasher::new();
        for w in &writes {
            let n = (w.len * es) as usize;
            let b = &mut buf[..n];
            out.read_at(w.file_elem, b)?;
            h.update(b);
        }
        if h.finalize() != want {
            break;
        }
        good = i + 1;
    }
    Ok(good)
}
