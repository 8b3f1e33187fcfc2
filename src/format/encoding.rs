//! The output formats that are encoded as the run writes them (GeoTIFF, Zarr), behind
//! one trait, [`Encoding`]: what the engine asks of such a format when it plans a run
//! (the room its encoder needs, the chunks a box plan cuts along), when it refuses one
//! (the least the encoder holds), and when it creates the output (the encoder fitted to
//! the room the plan set aside). The engine never names a format: a new encoded format
//! is an implementation of [`Encoding`] in its folder and a line in `encoding_of`
//! (`src/format/mod.rs`), where encoded formats are registered.

use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::output::OutputFile;

/// What a plan set aside for an encoder: `bytes`, for the chunks being filled (`open` of
/// them across a box of a box plan; a row of them for a flat plan, `None`) and those in
/// flight; `bands_inner` when the plan visits the bands of each position one after
/// another (which a pixel-interleaved GeoTIFF needs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Room {
    /// Bytes set aside.
    pub bytes: u64,
    /// Chunks being filled at once across a box; `None`: a row of them.
    pub open: Option<usize>,
    /// Whether the plan visits the bands of each position inner.
    pub bands_inner: bool,
}

/// An encoder fitted to a room: the bytes it holds, and how it is attached to an output
/// once they are reserved.
pub(crate) struct Fitted {
    /// Bytes the encoder holds (its chunks being filled and in flight).
    pub need: u64,
    /// What the reservation of `need` is, in budget reports.
    pub what: &'static str,
    attach: Box<dyn FnOnce(OutputFile, Reservation) -> Result<OutputFile>>,
}

impl Fitted {
    /// An encoder holding `need` bytes, attached by `attach`.
    pub(crate) fn new(
        need: u64,
        what: &'static str,
        attach: impl FnOnce(OutputFile, Reservation) -> Result<OutputFile> + 'static,
    ) -> Self {
        Fitted {
            need,
            what,
            attach: Box::new(attach),
        }
    }

    /// `output`, encoded as it is written by this encoder, which holds `memory`.
    ///
    /// # Errors
    /// The format's refusals.
    pub(crate) fn attach(self, output: OutputFile, memory: Reservation) -> Result<OutputFile> {
        (self.attach)(output, memory)
    }
}

/// The least an encoder holds, for the refusal of a budget that cannot hold it.
#[derive(Clone, Debug)]
pub(crate) struct Least {
    /// The chunks being filled.
    pub filling: u64,
    /// One chunk in flight, raw and encoded.
    pub one: u64,
    /// What a chunk is called (`512x512 tile`, `chunk`).
    pub unit: String,
    /// The chunks and the option that sizes them (`tiles (--tiff-tile)`).
    pub chunks: &'static str,
}

/// The chunks a box plan cuts its boxes along so that the output is encoded as written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BoxChunks {
    /// Rows of a chunk.
    pub rows: usize,
    /// Columns of a chunk.
    pub cols: usize,
    /// Bands a chunk holds.
    pub planes: usize,
    /// Bytes each chunk in flight holds (raw, encoded, and what the encoder keeps).
    pub in_flight_each: u64,
    /// What the encoder's reservation is, in budget reports.
    pub what: &'static str,
}

/// An output format encoded as the run writes it.
pub(crate) trait Encoding {
    /// What such an output is, in messages (`GeoTIFF`, `Zarr store`).
    fn kind(&self) -> &'static str;

    /// Refuses an output at `dest` of `shape` and `dtype` the format cannot hold at all
    /// (a GeoTIFF needs an image shape and a dtype with a TIFF form).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] naming what is wrong.
    fn check_shape(&self, dest: &std::path::Path, shape: &[usize], dtype: DType) -> Result<()>;

    /// Refuses, before the run, an output of `shape` and `dtype` the format cannot
    /// encode within a budget of `limit` bytes.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] or a budget error naming what to change.
    fn check(&self, shape: &[usize], dtype: DType, limit: u64) -> Result<()>;

    /// The encoder of an output of `shape` and `dtype` fitted to `room`; `None` when the
    /// room cannot hold it.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a shape the format cannot hold.
    fn fit(&self, shape: &[usize], dtype: DType, room: Room) -> Result<Option<Fitted>>;

    /// The least the encoder holds (`open` chunks being filled, or a row of them);
    /// `None` for an output with nothing to encode.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a shape the format cannot hold.
    fn least(&self, shape: &[usize], dtype: DType, open: Option<usize>) -> Result<Option<Least>>;

    /// What a flat plan's room for this encoder is, in plans.
    fn flat_what(&self) -> &'static str;

    /// The height of the tiles whose bands a flat plan must visit inner (a
    /// pixel-interleaved GeoTIFF); `None` for the others.
    fn pixel_rows(&self, _shape: &[usize], _dtype: DType) -> Option<usize> {
        None
    }

    /// The chunks of an output whose chunk grid is that of `shape` (a store's whole
    /// shape for its rows), within a budget of `limit`; `None` when a box plan cannot
    /// cut along them.
    fn box_chunks(&self, shape: &[usize], dtype: DType, limit: u64) -> Option<BoxChunks>;
}
