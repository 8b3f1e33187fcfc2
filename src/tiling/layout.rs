//! A box plan as the scheduler runs it ([`Layout`]): each tile's reads and writes, and
//! the plan as `tilestream plan` prints it.

use std::fmt;

use super::{BoxPlan, BoxTile, OutMap};
use crate::budget::fmt_bytes;
use crate::format::Touch;
use crate::format::fmt_shape;
use crate::layout::{Layout, Read, Write};

impl Layout for BoxPlan {
    type Tile = BoxTile;
    fn num_tiles(&self) -> usize {
        self.num_tiles
    }
    fn tile(&self, i: usize) -> BoxTile {
        self.box_tile(i)
    }
    fn reads(&self, t: &BoxTile, out: &mut Vec<Read>) {
        let [_, h, w] = self.dims;
        let src = self.sources(t);
        let full = src.cols.len() == 1 && src.cols[0] == (0, w);
        let mut touch = Touch::Rows {
            row: w as u64,
            runs: [(0, 0); 3],
            nruns: 0,
        };
        if let Touch::Rows { runs, nruns, .. } = &mut touch {
            for (k, &(a, b)) in src.cols.iter().take(3).enumerate() {
                runs[k] = (a as u64, (b - a) as u64);
                *nruns = k + 1;
            }
        }
        if full {
            touch = Touch::All;
        }
        for &(a, b) in &src.rows {
            out.push(Read {
                input: 0,
                start: ((t.band * h + a) * w) as u64,
                len: ((b - a) * w) as u64,
                touch,
            });
        }
    }
    fn out_elems(&self, t: &BoxTile) -> u64 {
        if self.out == OutMap::None {
            0
        } else {
            (t.rows() * t.cols()) as u64
        }
    }
    fn writes(&self, t: &BoxTile, out: &mut Vec<Write>) {
        let [_, h, w] = self.dims;
        let (th, tw) = (t.rows() as u64, t.cols() as u64);
        let (r0, c0) = (t.r0 as u64, t.c0 as u64);
        let band = t.band as u64;
        let (h, w) = (h as u64, w as u64);
        match self.out {
            OutMap::None => {}
            OutMap::Same if tw == w => out.push(Write {
                file_elem: (band * h + r0) * w,
                buf_elem: 0,
                len: th * w,
            }),
            OutMap::Same => out.extend((0..th).map(|i| Write {
                file_elem: (band * h + r0 + i) * w + c0,
                buf_elem: i * tw,
                len: tw,
            })),
            OutMap::Transposed if th == h => out.push(Write {
                file_elem: (band * w + c0) * h,
                buf_elem: 0,
                len: tw * h,
            }),
            OutMap::Transposed => out.extend((0..tw).map(|j| Write {
                file_elem: (band * w + c0 + j) * h + r0,
                buf_elem: j * th,
                len: th,
            })),
        }
    }
    fn depth(&self) -> usize {
        self.depth
    }
    fn window_bytes(&self) -> u64 {
        self.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        self.out_slot_elems
    }
}

impl fmt::Display for BoxPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "plan:           {}", self.what)?;
        if self.num_tiles == 0 {
            return writeln!(f, "tiles:          none (the image is empty)");
        }
        let [bands, h, w] = self.dims;
        let how = if self.tile.1 == w {
            "full-width row blocks"
        } else {
            "2-D blocks"
        };
        writeln!(
            f,
            "tiles:          {} of at most {}x{} ({how}; {} band{} of {})",
            self.num_tiles,
            self.tile.0,
            self.tile.1,
            bands,
            if bands == 1 { "" } else { "s" },
            fmt_shape(&[h, w])
        )?;
        writeln!(
            f,
            "halo:           {} rows, {} columns ({} boundary)",
            self.halo_rows.total(),
            self.halo_cols.total(),
            self.boundary
        )?;
        writeln!(
            f,
            "per stage:      read windows {} | compute scratch {} | write buffer {}",
            fmt_bytes(self.window_bytes),
            fmt_bytes(self.scratch_bytes),
            fmt_bytes(self.out_slot_elems * self.out_bytes)
        )?;
        if let Some(c) = &self.out_chunks {
            writeln!(
                f,
                "output:         {}: {} ({} chunk{} of {}x{} being filled across a box{})",
                c.what,
                fmt_bytes(self.out_chunk_bytes),
                self.open_out_chunks(),
                if self.open_out_chunks() == 1 { "" } else { "s" },
                c.rows,
                c.cols,
                match (self.cut_along_out_chunks(), self.boxes_within_chunks()) {
                    (true, true) => ", boxes cut within them, a chunk's boxes one after another",
                    (true, false) => ", boxes cut along them",
                    _ => "",
                }
            )?;
        }
        crate::plan::write_budget_lines(
            f,
            self.depth,
            (self.resident_bytes, &self.resident_what),
            self.reserved_bytes,
            self.budget,
        )?;
        crate::plan::write_after(f, self.after.as_deref())
    }
}
