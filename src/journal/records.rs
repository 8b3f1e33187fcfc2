//! The journal file's records: one line each, sealed with its CRC-32 so that a record
//! torn by a crash is never read ([`seal`], [`records`]), and what an interrupted run
//! recorded read back ([`parse`]).

use std::collections::{BTreeMap, HashMap};

use crate::format::chunk_assembly::ChunkRun;

pub(super) const HEADER: &str = "tilestream-journal 2";

/// What the interrupted run recorded.
#[derive(Debug, Default)]
pub(super) struct Prev {
    pub(super) op: Option<String>,
    pub(super) inputs: Vec<(String, String)>,
    pub(super) out: Option<String>,
    pub(super) passes: HashMap<usize, PrevPass>,
}

#[derive(Debug, Default)]
pub(super) struct PrevPass {
    pub(super) fingerprint: String,
    pub(super) tiles: BTreeMap<usize, u32>,
    /// (tile, slot, length, crc) of the latest state checkpoint.
    pub(super) state: Option<(usize, usize, u64, u32)>,
    /// Runs of chunks of a streamed GeoTIFF output or Zarr store, in the order they were
    /// written.
    pub(super) runs: Vec<ChunkRun>,
}

pub(super) fn seal(text: &str) -> String {
    format!("{text} *{:08x}\n", crc32fast::hash(text.as_bytes()))
}

/// The records of a journal's text, up to the first torn or unreadable line.
pub(super) fn records(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            break; // the last line was cut short
        };
        let Some((body, crc)) = line.rsplit_once(" *") else {
            break;
        };
        if u32::from_str_radix(crc, 16).ok() != Some(crc32fast::hash(body.as_bytes())) {
            break;
        }
        out.push(body);
    }
    out
}

pub(super) fn parse(text: &str) -> Option<Prev> {
    let recs = records(text);
    if recs.first() != Some(&HEADER) {
        return None;
    }
    let mut p = Prev::default();
    for r in &recs[1..] {
        let (kind, rest) = r.split_once(' ').unwrap_or((r, ""));
        let mut f = rest.split(' ');
        let mut num = || f.next().and_then(|s| s.parse::<u64>().ok());
        match kind {
            "op" => p.op = Some(rest.to_string()),
            "input" => {
                // size mtime dev ino path (the path may hold spaces)
                let parts: Vec<&str> = rest.splitn(5, ' ').collect();
                if parts.len() == 5 {
                    p.inputs.push((parts[4].to_string(), parts[..4].join(" ")));
                }
            }
            "out" => p.out = Some(rest.to_string()),
            "pass" => {
                let (k, fp) = rest.split_once(' ')?;
                let k: usize = k.parse().ok()?;
                let e = p.passes.entry(k).or_default();
                e.fingerprint = fp.to_string();
            }
            "tile" => {
                let (k, i) = (num()? as usize, num()? as usize);
                let crc = u32::from_str_radix(f.next()?, 16).ok()?;
                p.passes.entry(k).or_default().tiles.insert(i, crc);
            }
            "chunks" => {
                let (k, first, offset) = (num()? as usize, num()? as usize, num()?);
                let crc = u32::from_str_radix(f.next()?, 16).ok()?;
                let counts = f
                    .next()?
                    .split(',')
                    .map(|c| c.parse::<u64>().ok())
                    .collect::<Option<Vec<u64>>>()?;
                // a resumed run records again from the first run of chunks it redid:
                // later records win over those they overlap and all after them
                let runs = &mut p.passes.entry(k).or_default().runs;
                let end = first.saturating_add(counts.len());
                if let Some(i) = runs
                    .iter()
                    .position(|d| d.first < end && first < d.first + d.counts.len())
                {
                    runs.truncate(i);
                }
                runs.push(ChunkRun {
                    first,
                    offset,
                    counts,
                    crc,
                });
            }
            "state" => {
                let (k, i, slot, len) = (num()? as usize, num()? as usize, num()?, num()?);
                let crc = u32::from_str_radix(f.next()?, 16).ok()?;
                if slot < 2 {
                    p.passes.entry(k).or_default().state = Some((i, slot as usize, len, crc));
                }
            }
            _ => return None,
        }
    }
    Some(p)
}
