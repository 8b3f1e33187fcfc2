//! What every kernel of the CUDA backend queues its tiles with: a lane (a stream with
//! its own device buffers), a launch's arguments, the event recorded after a tile's copy
//! back ([`record_now`]) and the pending handle the write stage waits on
//! ([`InFlight`]); `queue_tile` in `runtime.rs` puts them together.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, sys};

use crate::budget::Reservation;
use crate::device::DeviceError;
use crate::error::{Error, Result};
use crate::scheduler::{Morsel, Pending};

/// One stream of a prepared kernel and the device buffers its tiles use.
pub(super) struct Lane {
    pub(super) stream: Arc<CudaStream>,
    pub(super) inputs: Vec<CudaSlice<u8>>,
    pub(super) output: CudaSlice<u8>,
    pub(super) _reservation: Reservation,
}

/// An argument's value for one launch.
pub(super) enum ArgValue {
    F64(f64),
    U64(u64),
}

/// An event recorded on `stream` now (the work queued so far). On failure the stream is
/// waited for first, so nothing queued still reads memory the caller frees on error.
///
/// # Errors
/// [`Error::Device`] if the event cannot be created or recorded.
pub(crate) fn record_now(ctx: &Arc<CudaContext>, stream: &CudaStream) -> Result<CudaEvent> {
    // blocking sync: the write stage waiting on a tile sleeps instead of spinning a core
    // the read stage (and a filter's host gather) could use
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))
        .and_then(|e| e.record(stream).map(|()| e))
        .map_err(|e| {
            let _ = stream.synchronize();
            driver("record an event")(e)
        })
}

/// A tile in flight: waiting synchronizes its event; dropped unwaited (a panic), it
/// still waits before its slots are freed, so no copy lands in freed memory.
pub(crate) struct InFlight<T> {
    event: Arc<CudaEvent>,
    morsel: Option<Morsel<T>>,
}

impl<T: Send + 'static> InFlight<T> {
    /// The pending handle of tile `morsel`, done when `event` is.
    pub(crate) fn pending(event: Arc<CudaEvent>, morsel: Morsel<T>) -> Pending<T> {
        let flight = InFlight {
            event,
            morsel: Some(morsel),
        };
        Pending::Later(Box::new(move || flight.finish()))
    }

    fn finish(mut self) -> Result<Morsel<T>> {
        self.event
            .synchronize()
            .map_err(driver("run a tile on the device"))?;
        self.morsel
            .take()
            .ok_or_else(|| Error::Internal("a device tile was finished twice".into()))
    }
}

impl<T> Drop for InFlight<T> {
    fn drop(&mut self) {
        if self.morsel.is_some() {
            let _ = self.event.synchronize();
        }
    }
}

/// One launch of a tile: how many threads, and the arguments after the buffers.
pub(super) struct Launch {
    /// Threads the kernel needs (one per output element).
    pub(super) threads: u64,
    /// Arguments after the buffers.
    pub(super) args: Vec<ArgValue>,
}

/// Waits for everything queued on `lanes`: a prepared kernel is dropped by the compute
/// stage once it has submitted its last tile (or stopped on an error), while tiles may
/// still run; its device buffers, resident operands and module are freed only after
/// this. (cudarc frees device memory on the default stream, which is not ordered with
/// the lanes' non-blocking streams.)
pub(crate) fn drain(lanes: impl IntoIterator<Item = Arc<CudaStream>>) {
    for stream in lanes {
        let _ = stream.synchronize();
    }
}

/// Waits for its streams when dropped: the first field of a prepared kernel whose other
/// fields must outlive the work queued on them (see [`drain`]).
pub(super) struct Drain(pub(super) Vec<Arc<CudaStream>>);

impl Drop for Drain {
    fn drop(&mut self) {
        drain(self.0.iter().cloned());
    }
}

pub(crate) fn driver(action: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| {
        Error::Device(DeviceError::Driver {
            action,
            msg: e.to_string(),
        })
    }
}
