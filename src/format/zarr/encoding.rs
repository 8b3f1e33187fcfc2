//! A Zarr output encoded as the run writes it ([`ZarrStream`]): as the engine plans it
//! ([`Encoding`]) and as an output writes it ([`StreamWriter`]).

use std::fs::File;
use std::path::Path;

use tempfile::NamedTempFile;

use super::ZarrWriteOptions;
use super::stream::ZarrStream;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::chunk_assembly::ChunkRun;
use crate::format::encoding::{BoxChunks, Encoding, Fitted, Least, Room};
use crate::format::output::StreamWriter;

/// Zarr outputs written with these options.
pub(crate) struct ZarrEncoding<'a>(pub &'a ZarrWriteOptions);

impl Encoding for ZarrEncoding<'_> {
    fn kind(&self) -> &'static str {
        "Zarr store"
    }

    fn check_shape(&self, dest: &Path, shape: &[usize], _dtype: DType) -> Result<()> {
        if shape.is_empty() {
            return Err(crate::Error::invalid(format!(
                "{}: a Zarr output needs at least one dimension",
                dest.display()
            )));
        }
        Ok(())
    }

    fn check(&self, shape: &[usize], dtype: DType, limit: u64) -> Result<()> {
        // refused before the run, not after it: chunks the budget cannot encode
        super::chunk_shapes(self.0, shape, dtype, limit).map(|_| ())
    }

    fn fit(&self, shape: &[usize], dtype: DType, room: Room) -> Result<Option<Fitted>> {
        let fit = ZarrStream::fit(shape, dtype, self.0, room.bytes, room.open)?;
        Ok(fit.map(|(need, opts)| {
            Fitted::new(
                need,
                "Zarr encoding (chunks being filled and in flight)",
                move |output, memory| output.with_zarr_stream(&opts, memory),
            )
        }))
    }

    fn least(&self, shape: &[usize], dtype: DType, open: Option<usize>) -> Result<Option<Least>> {
        Ok(
            ZarrStream::least(shape, dtype, self.0, open)?.map(|(filling, one)| Least {
                filling,
                one,
                unit: "chunk".to_string(),
                chunks: "chunks (`zarr_chunks`)",
            }),
        )
    }

    fn flat_what(&self) -> &'static str {
        "Zarr output encoded as it is written (a slab of chunks)"
    }

    fn box_chunks(&self, shape: &[usize], dtype: DType, limit: u64) -> Option<BoxChunks> {
        let (_, outer) = super::chunk_shapes(self.0, shape, dtype, limit).ok()?;
        let r = outer.len();
        let planes = match r {
            2 => 1,
            // as deep as the store's chunks hold bands (what the stream sizes)
            3 => outer[0].min(shape[0]),
            _ => return None,
        };
        let chunk = (outer[r - 2] * outer[r - 1] * planes) as u64 * dtype.size() as u64;
        Some(BoxChunks {
            rows: outer[r - 2],
            cols: outer[r - 1],
            planes,
            in_flight_each: 3 * chunk,
            what: "Zarr output encoded as it is written (chunks being filled and in flight)",
        })
    }
}

/// A Zarr store written chunk by chunk into a directory of its own (or into rows of an
/// existing store), as an output writes it.
impl StreamWriter for ZarrStream {
    fn write(&self, start: u64, bytes: &[u8]) -> Result<()> {
        ZarrStream::write(self, start, bytes)
    }

    fn take_appended(&self) -> Vec<ChunkRun> {
        ZarrStream::take_appended(self)
    }

    fn resume(&self, _file: &File, _dest: &Path, done: &[ChunkRun]) -> Result<usize> {
        ZarrStream::resume(self, done)
    }

    fn covers(&self, start: u64, len: u64) -> bool {
        ZarrStream::covers(self, start, len)
    }

    fn release_memory(&mut self) {
        ZarrStream::release_memory(self);
    }

    fn keep(&self) {
        ZarrStream::keep(self);
    }

    fn finish(
        &self,
        _tmp: NamedTempFile,
        _dest: &Path,
        _durable: bool,
        _memory: u64,
    ) -> Result<()> {
        // the store is renamed into place; the empty file goes with `tmp`, after it
        ZarrStream::finish(self)
    }
}
