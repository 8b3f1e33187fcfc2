//! The rows of a Zarr store written by the runs of a job split over a cluster: the
//! store made beforehand ([`create_zarr_for_rows`]), each run's output the chunks of its
//! rows ([`OutputFile::zarr_region`]), and the store put in place once every run is done
//! ([`commit_zarr`]).

use std::path::{Path, PathBuf};

use super::ZarrWriteOptions;
use super::stream::ZarrStream;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::output::{OutRegion, OutputFile, Target, ZarrRows, is_temp_of};
use crate::format::{OutFormat, checked_nbytes};
use crate::io::own_files::{self, TEMP_SUFFIX, dir_and_name};
use crate::io::temp::temp_beside;

impl OutputFile {
    /// Writes a run's output of `shape` and `dtype` into rows of the existing Zarr store
    /// `dest` (made by [`create_zarr_for_rows`] with the same `opts`), as `region` says:
    /// made a stream ([`with_zarr_stream`](Self::with_zarr_stream)), it stores the chunks
    /// of those rows into it as the run completes them (the store's other chunks are not
    /// touched, its `zarr.json` is not rewritten). The rows must fall on the store's
    /// chunks.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `dest` is not a Zarr store of `dtype` whose rows are the
    /// output's rows and hold the region on its chunk grid; [`Error::Io`] if the
    /// temporary file naming the run's output cannot be made.
    pub fn zarr_region(
        dest: &Path,
        region: OutRegion,
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        memory: u64,
    ) -> Result<Self> {
        let store = crate::format::TensorFile::open_zarr(dest)?;
        let info = store.info();
        let run_rows = shape.first().map_or(1, |&n| n as u64);
        let rows = region
            .rows
            .unwrap_or(run_rows.saturating_sub(region.skip_rows));
        let store_rows = info.shape.first().map_or(1, |&n| n as u64);
        // the chunks these options make must be the store's (and fit the budget)
        let (inner, outer) = super::chunk_shapes(opts, &info.shape, dtype, memory)?;
        let compressor = match opts.compression {
            super::ZarrCompression::None => None,
            super::ZarrCompression::Zstd(_) => Some("zstd"),
            super::ZarrCompression::Gzip(_) => Some("gzip"),
            super::ZarrCompression::Blosc(_) => Some("blosc"),
        };
        if let Some(layout) = store.zarr() {
            let same = layout.chunk_shape == outer
                && layout.inner_chunks == opts.shard.as_ref().map(|_| inner.clone())
                && (opts.shard.is_some()
                    || compressor.is_none_or(|c| layout.codecs.iter().any(|n| n == c)));
            if !same {
                return Err(Error::invalid(format!(
                    "{}: its chunks ({}) or codecs ({}) are not what this run's Zarr options \
                     make ({}, {}): give every task the options the store was made with",
                    dest.display(),
                    crate::format::fmt_shape(&layout.chunk_shape),
                    layout.codecs.join(", "),
                    crate::format::fmt_shape(&outer),
                    compressor.unwrap_or("no compression")
                )));
            }
        }
        let chunk = outer.first().copied().unwrap_or(1) as u64;
        let end = region.at_row + rows;
        if info.dtype != dtype
            || info.shape.len() != shape.len()
            || info.shape.get(1..) != shape.get(1..)
            || region.skip_rows + rows > run_rows
            || end > store_rows
            || !region.at_row.is_multiple_of(chunk)
            || (!end.is_multiple_of(chunk) && end != store_rows)
        {
            return Err(Error::invalid(format!(
                "{}: cannot write rows {}..{} of a {} {dtype} output at row {} of it: it is \
                 {} {} in chunks of {chunk} rows",
                dest.display(),
                region.skip_rows,
                region.skip_rows + rows,
                crate::format::fmt_shape(shape),
                region.at_row,
                crate::format::fmt_shape(&info.shape),
                info.dtype
            )));
        }
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        // an empty file naming the run's output: the stream stores the rows' chunks
        let tmp = temp_beside(dest)?;
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: Target::Temp(tmp),
            keep: (0, nbytes / dtype.size().max(1) as u64),
            data_offset: 0,
            dtype,
            shape: shape.to_vec(),
            stream: None,
            adopted: false,
            finish_memory: 64 << 20,
            format: OutFormat::Zarr,
            zarr_rows: Some(ZarrRows {
                store_shape: info.shape.clone(),
                at_row: region.at_row,
                rows,
                skip_rows: region.skip_rows,
            }),
        })
    }

    /// Makes this output a Zarr v3 store encoded as the run writes it, chunk by chunk
    /// (see [`ZarrStream`]), in a temporary directory beside the destination renamed
    /// into place by [`finish`](Self::finish); for rows of an existing store
    /// ([`zarr_region`](Self::zarr_region)), straight into that store
    /// ([`ZarrStream::into_rows`]). The temporary file stays empty. `memory` pays for the chunks being filled and those in flight
    /// ([`ZarrStream::fit`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk shapes that do not fit; [`Error::Internal`] for rows
    /// of a `.npy`; [`Error::Io`] if the store cannot be made.
    pub fn with_zarr_stream(
        mut self,
        opts: &ZarrWriteOptions,
        memory: crate::budget::Reservation,
    ) -> Result<Self> {
        let Target::Temp(t) = &self.tmp else {
            return Err(Error::Internal(
                "rows of a .npy are written in place, not streamed".into(),
            ));
        };
        t.as_file()
            .set_len(0)
            .map_err(|e| Error::io("size", t.path(), e))?;
        let stream = match (self.zarr_rows.take(), self.stream_dir()) {
            (Some(z), _) => ZarrStream::into_rows(
                &self.dest,
                &z.store_shape,
                self.dtype,
                opts,
                Some(memory),
                z.at_row,
                z.skip_rows,
                z.rows,
            )?,
            (None, Some(dir)) => ZarrStream::create(
                &dir,
                &self.dest,
                &self.shape,
                self.dtype,
                opts,
                Some(memory),
                self.adopted,
            )?,
            (None, None) => {
                return Err(Error::Internal(
                    "a Zarr output without a temporary name cannot be streamed".into(),
                ));
            }
        };
        self.stream = Some(Box::new(stream));
        Ok(self)
    }
}

/// Creates the Zarr store the runs of a job split over a cluster fill, each the chunks
/// of its rows (see [`OutputFile::zarr_region`]): its `zarr.json` for an array of
/// `shape` and `dtype` written with `opts`, in a temporary directory beside `dest` named
/// as tilestream's temporary outputs are. Returns its path; [`commit_zarr`] puts it in
/// place. The caller should hold [`lock`](crate::format::lock) on its `.lock` file meanwhile (so that
/// `tilestream clean` leaves it alone).
///
/// # Errors
/// [`Error::Invalid`] for chunk shapes that do not fit the array or a destination
/// tilestream does not replace; [`Error::Io`] if the directory cannot be made.
pub fn create_zarr_for_rows(
    dest: &Path,
    shape: &[usize],
    dtype: DType,
    opts: &ZarrWriteOptions,
) -> Result<PathBuf> {
    own_files::refuse_shared_object(dest)?;
    own_files::check_destination(dest, own_files::Dest::Store)?;
    let (parent, name) = dir_and_name(dest)?;
    let dir = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        .tempdir_in(&parent)
        .map_err(|e| Error::io("create a directory in", &parent, e))?;
    own_files::open_own(&dir.path().join(".lock"), true)?;
    super::create_store(dir.path(), shape, dtype, opts)?;
    Ok(dir.keep())
}

/// Puts the store made by [`create_zarr_for_rows`] in place at `dest` (replacing a store
/// there): removes its `.lock` and renames it.
///
/// # Errors
/// [`Error::Invalid`] if `tmp` is not a temporary output of `dest`; [`Error::Io`] if the
/// rename fails.
pub fn commit_zarr(tmp: &Path, dest: &Path) -> Result<()> {
    if !is_temp_of(tmp, dest)? || !tmp.join("zarr.json").is_file() {
        return Err(Error::invalid(format!(
            "{}: not a temporary Zarr output of {}",
            tmp.display(),
            dest.display()
        )));
    }
    // an old store is replaced atomically; the `.lock` goes once the store is in place
    own_files::replace_dir(tmp, dest)
}
