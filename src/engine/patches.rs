//! `tilestream tiles`: cutting an image into patch files (`.npy`, `.tif` or one `.npz`)
//! with an `index.csv`, through the box planner, bands of a position kept together.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::boxed::BandsTogether;
use super::imagery::image_dims;
use super::{Engine, Ran, RunReport};
use crate::backend::Family;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::tiff::write_tiled;
use crate::format::{TensorFile, fmt_shape, npy};
use crate::scheduler::{self};
use crate::tiling::{Boundary, BoxPlan, BoxTile, Cuts, Halo, OutMap, Scratch};

/// The file format of patches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchFormat {
    /// `.npy` files.
    Npy,
    /// Tiled GeoTIFFs, each georeferenced at its own origin.
    GeoTiff,
}

impl std::str::FromStr for PatchFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "npy" => Ok(PatchFormat::Npy),
            "tif" | "tiff" | "geotiff" => Ok(PatchFormat::GeoTiff),
            _ => Err(Error::Invalid(format!(
                "unknown patch format `{s}`: use npy or tif"
            ))),
        }
    }
}

/// How `tiles` treats the right and bottom edges when the stride does not land on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// The last patch of each row and column is moved back to end at the edge, so every
    /// patch has the full size (it overlaps its neighbour more).
    Shift,
    /// Patches keep the stride and are padded with zeros past the edge.
    Pad,
}

impl std::str::FromStr for Edge {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shift" => Ok(Edge::Shift),
            "pad" => Ok(Edge::Pad),
            _ => Err(Error::Invalid(format!(
                "unknown edge mode `{s}`: use shift or pad"
            ))),
        }
    }
}

/// How to cut an image into patches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchSpec {
    /// Patch side in pixels.
    pub size: usize,
    /// Pixels shared by neighbouring patches (the stride is `size - overlap`).
    pub overlap: usize,
    /// What happens at the right and bottom edges.
    pub edge: Edge,
}

/// Patch starts along an axis of `n` pixels.
pub(super) fn patch_starts(n: usize, spec: PatchSpec, axis: &str) -> Result<Vec<(i64, usize)>> {
    let stride = spec.size - spec.overlap;
    if n < spec.size && spec.edge == Edge::Shift {
        return Err(Error::Invalid(format!(
            "the image has {n} {axis}, fewer than the patch size {}: use `edge=pad` or a \
             smaller `size`",
            spec.size
        )));
    }
    let count = n.saturating_sub(spec.overlap).max(1).div_ceil(stride);
    let mut starts: Vec<(i64, usize)> = (0..count)
        .map(|i| ((i * stride) as i64, spec.size))
        .collect();
    if spec.edge == Edge::Shift {
        for s in &mut starts {
            s.0 = s.0.min((n - spec.size) as i64);
        }
        starts.dedup();
    }
    Ok(starts)
}

/// The tile side of a GeoTIFF patch of `size`: no larger than the patch (rounded up to
/// TIFF's multiple of 16).
fn patch_tile(opts: &crate::format::tiff::TiffWriteOptions, size: usize) -> usize {
    opts.tile.min(size.div_ceil(16) * 16)
}

/// Bytes the encoder of a GeoTIFF patch of `size` (`bands` of `es` bytes) holds: twice
/// the patch (tiles raw and compressed, a batch at a time), at least two of its tiles,
/// every band deep.
fn patch_encoder_bytes(
    opts: &crate::format::tiff::TiffWriteOptions,
    size: usize,
    bands: usize,
    es: u64,
) -> u64 {
    let t = patch_tile(opts, size) as u64;
    let patch = (size * size * bands) as u64 * es;
    2 * patch.max(t * t * bands as u64 * es)
}

impl Engine {
    /// Plans cutting an image into patches.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad spec or input; [`Error::Budget`] if one patch does not
    /// fit.
    pub fn plan_patches(&self, input: &TensorFile, spec: PatchSpec) -> Result<BoxPlan> {
        self.plan_patches_as(input, spec, PatchFormat::Npy)
    }

    /// [`Engine::plan_patches`] of patches written in `format`: a GeoTIFF patch's
    /// encoder (its tiles raw and compressed, `patch_encoder_bytes`) is held too.
    ///
    /// # Errors
    /// As [`Engine::plan_patches`].
    pub fn plan_patches_as(
        &self,
        input: &TensorFile,
        spec: PatchSpec,
        format: PatchFormat,
    ) -> Result<BoxPlan> {
        input.dtype().real_only("cutting patches (tiles)")?;
        let dims = image_dims(input, "tiles")?;
        if spec.size == 0 || spec.overlap >= spec.size {
            return Err(Error::Invalid(format!(
                "patch size {} with overlap {}: the overlap must be smaller than the size",
                spec.size, spec.overlap
            )));
        }
        if dims.contains(&0) {
            return Err(Error::Invalid(format!(
                "{} has shape {}: no pixels, so no patches to cut",
                input.path().display(),
                fmt_shape(input.shape())
            )));
        }
        // counted before the patch starts are listed: the index of every patch is held
        // until the end, so their number is bounded by the budget first
        let stride = spec.size - spec.overlap;
        let along = |n: usize| n.saturating_sub(spec.overlap).max(1).div_ceil(stride) as u64;
        let count = (dims[0] as u64)
            .checked_mul(along(dims[1]))
            .and_then(|n| n.checked_mul(along(dims[2])));
        if count.is_none_or(|n| n.saturating_mul(96) > self.budget.limit()) {
            return Err(Error::Invalid(format!(
                "{} patches of {}x{} from {}: their index alone (96 bytes a patch) passes the \
                 {} budget; use larger patches or a larger `memory`",
                count.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
                spec.size,
                spec.size,
                fmt_shape(input.shape()),
                crate::budget::fmt_bytes(self.budget.limit())
            )));
        }
        let rows = patch_starts(dims[1], spec, "rows")?;
        let cols = patch_starts(dims[2], spec, "columns")?;
        let patches = (dims[0] * rows.len() * cols.len()) as u64;
        let es = input.dtype().size() as u64;
        let mut req = self.box_request_at(
            self.budget.limit(),
            input,
            format!(
                "{}x{} patches (overlap {}) of {} {}",
                spec.size,
                spec.size,
                spec.overlap,
                fmt_shape(input.shape()),
                input.dtype()
            ),
            dims,
            (es, 0),
            (Halo::default(), Halo::default()),
            Boundary::Constant(0.0),
            Scratch {
                padded: 0,
                row_pass: 0,
                tile: es * dims[0] as u64,
            },
            Cuts::Given { rows, cols },
            OutMap::None,
        );
        // the index held until the end: one line per patch
        super::hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            patches * 96,
            "patch index".to_string(),
        );
        if format == PatchFormat::GeoTiff {
            super::hold(
                &mut req.resident_bytes,
                &mut req.resident_what,
                patch_encoder_bytes(&self.tiff_out, spec.size, dims[0], es),
                "GeoTIFF encoding of a patch (its tiles raw and compressed)".to_string(),
            );
        }
        Ok(BoxPlan::new(&req)?)
    }

    /// Cuts a rank-2 or rank-3 image into `size × size` patches (all bands of a patch in
    /// one file for rank 3), each written to `outdir` as `<stem>_r<row>_c<col>.npy`, and
    /// writes `index.csv` (`file,row,col,height,width` with the patch's offsets in the
    /// image) last: a directory with an `index.csv` is complete. Returns the report and
    /// the number of patches.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad spec or input; [`Error::Budget`]; I/O errors.
    pub fn patches(
        &self,
        input: &TensorFile,
        outdir: impl AsRef<Path>,
        spec: PatchSpec,
    ) -> Result<(RunReport, usize)> {
        self.patches_as(input, outdir, spec, PatchFormat::Npy)
    }

    /// [`Engine::patches`] writing each patch in `format`. GeoTIFF patches carry the
    /// input's georeferencing moved to the patch's origin (pixel size and CRS kept), so
    /// each lands in its place in a GIS; they are tiled and compressed as
    /// [`Engine::with_tiff_output`] says.
    ///
    /// # Errors
    /// As [`Engine::patches`]; [`Error::Invalid`] for a dtype a TIFF cannot hold.
    pub fn patches_as(
        &self,
        input: &TensorFile,
        outdir: impl AsRef<Path>,
        spec: PatchSpec,
        format: PatchFormat,
    ) -> Result<(RunReport, usize)> {
        let outdir = outdir.as_ref();
        if format == PatchFormat::GeoTiff {
            crate::format::tiff::tiff_sample(input.dtype())?;
            // refused before any patch is cleared or written
            self.tiff_out
                .predictor
                .tag(input.dtype(), self.tiff_out.compression)?;
        }
        if self.tiff_out.cog.is_some() {
            return Err(Error::invalid(
                "`cog` makes whole images Cloud-Optimized; patches are small tiled GeoTIFFs \
                 without overviews: leave `cog` out",
            ));
        }
        let plan = self.plan_patches_as(input, spec, format)?;
        let bands = plan.dims[0];
        std::fs::create_dir_all(outdir).map_err(|e| Error::io("create directory", outdir, e))?;
        let index_path = outdir.join("index.csv");
        // the earlier index and the names it lists are held before the run reserves
        // anything: at most a quarter of the budget each
        let index_max = INDEX_MAX.min(self.budget.limit() / 4);
        let removed = clear_earlier_patches(outdir, input.path(), index_max)?;
        if removed > 0 {
            eprintln!(
                "note: removed the {removed} patches of an earlier run listed in {}",
                index_path.display()
            );
        }
        let stem = input
            .path()
            .file_stem()
            .map_or_else(|| "patch".to_string(), |s| s.to_string_lossy().into_owned());
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "patch buffer and index",
            plan.resident_bytes + plan.scratch_bytes - input.read_scratch_bytes(),
        )?;
        let es = input.dtype().size();
        let mut index = String::from("file,row,col,height,width\n");
        let mut patch = vec![0u8; spec.size * spec.size * es * bands];
        let mut written = 0usize;
        let mut bytes = 0u64;
        let order = BandsTogether { plan: &plan };
        let shape_of = |r: usize| -> Vec<usize> {
            if input.shape().len() == 2 {
                vec![r, r]
            } else {
                vec![bands, r, r]
            }
        };
        let times = scheduler::run_layout(
            &order,
            &[input],
            &self.budget,
            None,
            self.hooks(),
            self.kernel(|tile: BoxTile, windows: &[&[u8]], _: &mut [u8]| {
                let band = tile.band;
                let plane = spec.size * spec.size * es;
                gather_bytes(
                    &plan,
                    &tile,
                    windows,
                    es,
                    &mut patch[band * plane..(band + 1) * plane],
                );
                if band + 1 < bands {
                    return Ok(());
                }
                let ext = match format {
                    PatchFormat::Npy => "npy",
                    PatchFormat::GeoTiff => "tif",
                };
                let name = format!("{stem}_r{}_c{}.{ext}", tile.r0, tile.c0);
                let path = outdir.join(&name);
                match format {
                    PatchFormat::Npy => {
                        write_npy(&path, input.dtype(), &shape_of(spec.size), &patch)?;
                    }
                    PatchFormat::GeoTiff => {
                        let mut opts = self.tiff_out.clone();
                        opts.tile = patch_tile(&opts, spec.size);
                        opts.georef = input
                            .georef()
                            .map(|g| g.shifted(tile.r0 as f64, tile.c0 as f64));
                        // what the plan holds for it
                        opts.memory = patch_encoder_bytes(&opts, spec.size, bands, es as u64);
                        let f = std::fs::File::create(&path)
                            .map_err(|e| Error::io("create", &path, e))?;
                        let read = |at: u64, buf: &mut [u8]| {
                            let at = at as usize;
                            buf.copy_from_slice(&patch[at..at + buf.len()]);
                            Ok(())
                        };
                        write_tiled(&f, &path, &shape_of(spec.size), input.dtype(), &opts, &read)?;
                    }
                }
                let _ = writeln!(
                    index,
                    "{name},{},{},{},{}",
                    tile.r0, tile.c0, spec.size, spec.size
                );
                written += 1;
                bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
                Ok(())
            }),
        )?;
        sync_dir(outdir)?;
        crate::engine::write_atomic(&index_path, index.as_bytes())?;
        let op = format!(
            "tiles {}x{} overlap {} of {}",
            spec.size,
            spec.size,
            spec.overlap,
            input.path().display()
        );
        let mut report = self.report_tiles(
            (plan.num_tiles, vec![spec.size, spec.size], plan.depth),
            Ran::cpu(Family::Patches, op),
            input.shape(),
            &shape_of(spec.size),
            input.dtype(),
            times,
        );
        // the patch files (and the index) are this run's output
        report.bytes_written = bytes + index.len() as u64;
        report.gb_per_s =
            (report.bytes_read + report.bytes_written) as f64 / report.wall_s.max(1e-9) / 1e9;
        Ok((report, written))
    }
}

/// The header line of a tiles run's `index.csv`.
const INDEX_HEADER: &str = "file,row,col,height,width";

/// Makes `outdir` ready for new patches: the patch files an earlier run listed in its
/// `index.csv` are removed with the index (returns how many); anything else in the
/// directory is refused, so new patches never sit beside stale ones unnoticed. Nothing is
/// removed unless the index is provably a tiles run's (its header line, and every line a
/// patch as tiles names it: `STEM_rROW_cCOL.npy` or `.tif` at that row and column), and
/// never `input`, the file the run reads.
fn clear_earlier_patches(outdir: &Path, input: &Path, index_max: u64) -> Result<usize> {
    let index_path = outdir.join("index.csv");
    if let Ok(m) = std::fs::symlink_metadata(&index_path)
        && m.is_file()
        && m.len() > index_max
    {
        return Err(Error::Invalid(format!(
            "{}: the index of an earlier run is {}, more than a quarter of `memory` ({}) \
             may hold to check it; give a new directory for the patches, or more `memory`",
            index_path.display(),
            crate::budget::fmt_bytes(m.len()),
            crate::budget::fmt_bytes(index_max)
        )));
    }
    let not_ours = |why: String| {
        Error::Invalid(format!(
            "{}: {why}, so it is not the index of an earlier tiles run; give an empty or \
             new directory for the patches",
            index_path.display()
        ))
    };
    let listed: Vec<String> = match crate::io::own_files::read_small_input(&index_path, index_max) {
        Ok(text) => {
            let mut lines = text.lines();
            if lines.next() != Some(INDEX_HEADER) {
                return Err(not_ours(format!("its first line is not `{INDEX_HEADER}`")));
            }
            let mut names = Vec::new();
            for (i, l) in lines.enumerate() {
                let name = patch_line(l).ok_or_else(|| {
                    not_ours(format!("line {} is not a patch tiles wrote", i + 2))
                })?;
                if crate::format::same_file(&outdir.join(name), input) {
                    return Err(Error::Invalid(format!(
                        "{}: lists {name}, the input of this run, as a patch of an earlier run; \
                         give another directory for the patches",
                        index_path.display()
                    )));
                }
                names.push(name.to_string());
            }
            names
        }
        Err(_) if std::fs::symlink_metadata(&index_path).is_err() => Vec::new(),
        Err(e) => return Err(not_ours(e.to_string())),
    };
    let entries = std::fs::read_dir(outdir).map_err(|e| Error::io("list", outdir, e))?;
    for e in entries {
        let e = e.map_err(|e| Error::io("list", outdir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "index.csv" && !listed.contains(&name) {
            return Err(Error::Invalid(format!(
                "{}: holds `{name}`, which no earlier tiles run listed in its index.csv; give \
                 an empty or new directory for the patches",
                outdir.display()
            )));
        }
    }
    let mut removed = 0;
    for n in &listed {
        let p = outdir.join(n);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_file()) {
            std::fs::remove_file(&p).map_err(|e| Error::io("remove the old patch", &p, e))?;
            removed += 1;
        }
    }
    match std::fs::remove_file(&index_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove the old", &index_path, e)),
    }
    Ok(removed)
}

/// Most bytes of an earlier run's `index.csv` read (about 40 bytes a patch: a million
/// patches), and never more than a quarter of the budget.
const INDEX_MAX: u64 = 64 << 20;

/// The patch file named by one line of a tiles run's index, if the line is one tiles
/// writes: `STEM_rROW_cCOL.EXT,ROW,COL,HEIGHT,WIDTH` with EXT `npy` or `tif`.
fn patch_line(line: &str) -> Option<&str> {
    let mut f = line.split(',');
    let (name, row, col, h, w) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    if f.next().is_some() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let number = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if ![row, col, h, w].into_iter().all(number) {
        return None;
    }
    let stem = name
        .strip_suffix(".npy")
        .or_else(|| name.strip_suffix(".tif"))?
        .strip_suffix(&format!("_r{row}_c{col}"))?;
    (!stem.is_empty()).then_some(name)
}

/// Copies a tile's box (no halo) out of its windows as raw elements, zeros where the box
/// extends past the image.
fn gather_bytes(plan: &BoxPlan, t: &BoxTile, windows: &[&[u8]], es: usize, out: &mut [u8]) {
    let [_, h, w] = plan.dims;
    let src = plan.sources(t);
    let tw = t.cols();
    let (ca, cb) = (t.c0.max(0), t.c1.min(w as i64));
    for (i, orow) in out.chunks_mut(tw * es).take(t.rows()).enumerate() {
        orow.fill(0);
        let r = t.r0 + i as i64;
        if r < 0 || r >= h as i64 || cb <= ca {
            continue;
        }
        let Some((k, off)) = src.locate(r as usize) else {
            continue;
        };
        let rl = src.row_len();
        let row = &windows[k][off * rl * es..(off + 1) * rl * es];
        let from = (ca - t.c0) as usize * es;
        let n = (cb - ca) as usize * es;
        let at = src.col_pos(ca as usize).unwrap_or(0) * es;
        orow[from..from + n].copy_from_slice(&row[at..at + n]);
    }
}

fn write_npy(path: &PathBuf, dtype: DType, shape: &[usize], data: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| Error::io("create", path, e))?;
    f.write_all(&npy::build_header(dtype, shape))
        .and_then(|()| f.write_all(data))
        .map_err(|e| Error::io("write", path, e))
}

/// Flushes every file written in `dir` (one `syncfs` for the file system) before the
/// index that makes the directory complete is written.
fn sync_dir(dir: &Path) -> Result<()> {
    let d = std::fs::File::open(dir).map_err(|e| Error::io("open", dir, e))?;
    // SAFETY: `d` is an open file descriptor for the duration of the call.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) };
    if rc != 0 {
        return Err(Error::io("flush", dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn patch_positions() {
        let spec = PatchSpec {
            size: 4,
            overlap: 1,
            edge: Edge::Shift,
        };
        assert_eq!(
            patch_starts(10, spec, "rows").unwrap(),
            vec![(0, 4), (3, 4), (6, 4)]
        );
        assert_eq!(
            patch_starts(11, spec, "rows").unwrap(),
            vec![(0, 4), (3, 4), (6, 4), (7, 4)]
        );
        let pad = PatchSpec {
            edge: Edge::Pad,
            ..spec
        };
        assert_eq!(
            patch_starts(11, pad, "rows").unwrap(),
            vec![(0, 4), (3, 4), (6, 4), (9, 4)]
        );
        assert_eq!(patch_starts(2, pad, "rows").unwrap(), vec![(0, 4)]);
        assert!(patch_starts(2, spec, "rows").is_err());
    }
}
