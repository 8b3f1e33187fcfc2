//! Compressing a streamed output's chunks off the write stage, in order.
//!
//! The write stage hands each output chunk to the queue as soon as it is whole
//! ([`EncodeQueue::submit`]) and goes on with the next tile; the chunk is compressed on
//! a worker of the I/O pool (`crate::io::pool`) while the pipeline computes, and the encoded chunks
//! are handed to the [`Sink`] (appended to the TIFF being built) in the order they were
//! submitted, whatever order their compressions end in: the file is the same whatever
//! the threads do. At most `limit` chunks are in flight (submitted, not yet in the
//! sink), so the memory they hold (a raw and an encoded copy each) is bounded by what
//! the stream reserved for them; a submission beyond that waits for the oldest.
//!
//! Errors are kept and returned by the next call ([`EncodeQueue::submit`],
//! [`EncodeQueue::drain`]); the chunks submitted before the one that failed still reach
//! the sink (whatever order the encodings end in), those after it are dropped.
//! Dropping the queue waits for the chunks in flight, so nothing writes into an output
//! after it is gone and no buffer outlives the reservation that paid for it.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Where encoded chunks go, in the order they were submitted.
pub(crate) trait Sink: Send + 'static {
    /// Takes encoded chunk `chunk`.
    ///
    /// # Errors
    /// A failed write; the queue keeps the error and drops what comes after.
    fn put(&mut self, chunk: usize, encoded: Vec<u8>) -> Result<()>;
}

/// The encoder of one chunk: its index and raw bytes in, its encoded bytes out.
pub(crate) type EncodeFn = dyn Fn(usize, Vec<u8>) -> Result<Vec<u8>> + Send + Sync;

/// See the module documentation.
pub(crate) struct EncodeQueue<S: Sink> {
    shared: Arc<Shared<S>>,
    encode: Arc<EncodeFn>,
    limit: u64,
}

struct Shared<S> {
    state: Mutex<State<S>>,
    /// Signalled whenever chunks leave the flight.
    landed: Condvar,
}

struct State<S> {
    sink: S,
    /// Sequence number of the next submission.
    next_seq: u64,
    /// Sequence number the sink waits for.
    next_out: u64,
    /// Chunks encoded ahead of their turn (`None`: one that failed).
    ready: BTreeMap<u64, Option<(usize, Vec<u8>)>>,
    error: Option<Error>,
    /// The sequence number of the first chunk that failed (to encode or to be put):
    /// chunks from it on are dropped, those before it still handed on.
    stop_at: u64,
    /// An error was returned already: later calls say so without its text.
    failed: bool,
}

impl<S> State<S> {
    /// Chunks submitted and not yet handed to the sink (or dropped).
    fn in_flight(&self) -> u64 {
        self.next_seq - self.next_out
    }

    /// The kept error, once; then a line saying an earlier one ended the output.
    fn take_error(&mut self) -> Result<()> {
        if let Some(e) = self.error.take() {
            self.failed = true;
            return Err(e);
        }
        if self.failed {
            return Err(Error::Internal(
                "an output chunk failed to encode or write earlier".into(),
            ));
        }
        Ok(())
    }
}

impl<S: Sink> EncodeQueue<S> {
    /// A queue handing chunks encoded by `encode` to `sink`, at most `limit` (at least
    /// one) in flight.
    pub(crate) fn new(sink: S, limit: usize, encode: Arc<EncodeFn>) -> Self {
        EncodeQueue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    sink,
                    next_seq: 0,
                    next_out: 0,
                    ready: BTreeMap::new(),
                    error: None,
                    stop_at: u64::MAX,
                    failed: false,
                }),
                landed: Condvar::new(),
            }),
            encode,
            limit: limit.max(1) as u64,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, State<S>>> {
        lock_state(&self.shared)
    }

    /// Hands chunk `chunk`'s raw bytes on for encoding, after waiting while `limit`
    /// chunks are in flight.
    ///
    /// # Errors
    /// The error of an earlier chunk (its encoding or its write); this one is then not
    /// taken.
    pub(crate) fn submit(&self, chunk: usize, raw: Vec<u8>) -> Result<()> {
        let seq = {
            let mut st = self.lock()?;
            while st.in_flight() >= self.limit && st.error.is_none() && !st.failed {
                st = self.shared.landed.wait(st).map_err(|_| poisoned())?;
            }
            st.take_error()?;
            st.next_seq += 1;
            st.next_seq - 1
        };
        let shared = Arc::clone(&self.shared);
        let encode = Arc::clone(&self.encode);
        crate::io::pool::spawn(move || {
            let done = catch_unwind(AssertUnwindSafe(|| encode(chunk, raw))).unwrap_or_else(|_| {
                Err(Error::Internal("encoding an output chunk panicked".into()))
            });
            land(&shared, seq, chunk, done);
        });
        Ok(())
    }

    /// Waits until every chunk submitted is in the sink.
    ///
    /// # Errors
    /// The first error of a chunk.
    pub(crate) fn drain(&self) -> Result<()> {
        self.idle()?.take_error()
    }

    /// The state once nothing is in flight.
    fn idle(&self) -> Result<MutexGuard<'_, State<S>>> {
        let mut st = self.lock()?;
        while st.in_flight() > 0 {
            st = self.shared.landed.wait(st).map_err(|_| poisoned())?;
        }
        Ok(st)
    }

    /// Runs `f` on the sink, with chunks possibly still in flight.
    ///
    /// # Errors
    /// [`Error::Internal`] if a worker panicked holding the queue's lock.
    pub(crate) fn with_sink<R>(&self, f: impl FnOnce(&mut S) -> R) -> Result<R> {
        Ok(f(&mut self.lock()?.sink))
    }
}

impl<S: Sink> Drop for EncodeQueue<S> {
    fn drop(&mut self) {
        // a poisoned lock: a worker panicked under it, and nobody waits on it again
        drop(self.idle());
    }
}

fn poisoned() -> Error {
    Error::Internal("an output encoder's lock was poisoned".into())
}

fn lock_state<S>(shared: &Shared<S>) -> Result<MutexGuard<'_, State<S>>> {
    shared.state.lock().map_err(|_| poisoned())
}

/// Records chunk `seq`'s result and hands every chunk whose turn has come to the sink.
fn land<S: Sink>(shared: &Shared<S>, seq: u64, chunk: usize, done: Result<Vec<u8>>) {
    let Ok(mut st) = lock_state(shared) else {
        // a panic under the lock: nobody will wait on this queue's state again
        return;
    };
    let entry = match done {
        Ok(c) => Some((chunk, c)),
        Err(e) => {
            // the first error by sequence is kept (an earlier chunk may fail later)
            if seq < st.stop_at {
                st.error = Some(e);
                st.stop_at = seq;
            }
            None
        }
    };
    st.ready.insert(seq, entry);
    loop {
        let next = st.next_out;
        let Some(entry) = st.ready.remove(&next) else {
            break;
        };
        st.next_out += 1;
        if let Some((k, c)) = entry
            && next < st.stop_at
            && let Err(e) = st.sink.put(k, c)
        {
            st.error = Some(e);
            st.stop_at = next;
        }
    }
    drop(st);
    shared.landed.notify_all();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Records what it is handed; fails on chunk `fail_at`.
    struct Log {
        got: Vec<(usize, Vec<u8>)>,
        fail_at: Option<usize>,
    }

    impl Sink for Log {
        fn put(&mut self, chunk: usize, encoded: Vec<u8>) -> Result<()> {
            if self.fail_at == Some(chunk) {
                return Err(Error::Internal(format!("disk full at chunk {chunk}")));
            }
            self.got.push((chunk, encoded));
            Ok(())
        }
    }

    /// An encoder whose chunks take uneven times, so that they end out of order.
    fn slow_reverse() -> Arc<EncodeFn> {
        Arc::new(|k: usize, mut raw: Vec<u8>| {
            std::thread::sleep(std::time::Duration::from_micros(
                ((k * 37) % 5) as u64 * 300,
            ));
            raw.reverse();
            Ok(raw)
        })
    }

    #[test]
    fn chunks_reach_the_sink_in_submission_order_whatever_ends_first() {
        for limit in [1, 2, 3, 16] {
            let log = Log {
                got: Vec::new(),
                fail_at: None,
            };
            let q = EncodeQueue::new(log, limit, slow_reverse());
            // chunk indices out of numeric order: the sink follows submissions
            let order: Vec<usize> = (0..40).map(|i| (i * 7) % 40).collect();
            for &k in &order {
                q.submit(k, vec![k as u8, 1, 2]).unwrap();
                let in_flight = q.lock().unwrap().in_flight();
                assert!(
                    in_flight <= limit as u64,
                    "{in_flight} in flight, limit {limit}"
                );
            }
            q.drain().unwrap();
            let got = q.with_sink(|s| std::mem::take(&mut s.got)).unwrap();
            let want: Vec<(usize, Vec<u8>)> =
                order.iter().map(|&k| (k, vec![2, 1, k as u8])).collect();
            assert_eq!(got, want, "limit {limit}");
        }
    }

    #[test]
    fn an_error_stops_the_sink_and_is_returned_once_with_later_calls_refused() {
        // a failing encoder
        let enc: Arc<EncodeFn> = Arc::new(|k: usize, raw: Vec<u8>| {
            if k == 5 {
                Err(Error::Internal("codec failed on chunk 5".into()))
            } else {
                Ok(raw)
            }
        });
        let q = EncodeQueue::new(
            Log {
                got: Vec::new(),
                fail_at: None,
            },
            2,
            enc,
        );
        let mut first = None;
        for k in 0..20 {
            if let Err(e) = q.submit(k, vec![0]) {
                first = Some(e.to_string());
                break;
            }
        }
        let err = match first {
            Some(e) => e,
            None => q.drain().unwrap_err().to_string(),
        };
        assert!(err.contains("codec failed on chunk 5"), "{err}");
        let again = q.drain().unwrap_err().to_string();
        assert!(
            again.contains("failed to encode or write earlier"),
            "{again}"
        );
        // once nothing is in flight: every chunk before the failed one reached the sink
        // (whenever its encoding ended), nothing after it
        let got = q
            .with_sink(|s| s.got.iter().map(|c| c.0).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert!(q.submit(30, vec![0]).is_err());

        // a failing sink
        let q = EncodeQueue::new(
            Log {
                got: Vec::new(),
                fail_at: Some(3),
            },
            4,
            slow_reverse(),
        );
        let mut err = None;
        for k in 0..10 {
            if let Err(e) = q.submit(k, vec![1]) {
                err = Some(e);
                break;
            }
        }
        let err = err.unwrap_or_else(|| q.drain().unwrap_err()).to_string();
        assert!(err.contains("disk full at chunk 3"), "{err}");
        assert_eq!(q.with_sink(|s| s.got.len()).unwrap(), 3);
    }

    #[test]
    fn dropping_the_queue_waits_for_chunks_in_flight() {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = Arc::clone(&count);
        let enc: Arc<EncodeFn> = Arc::new(move |_k: usize, raw: Vec<u8>| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(raw)
        });
        let q = EncodeQueue::new(
            Log {
                got: Vec::new(),
                fail_at: None,
            },
            8,
            enc,
        );
        for k in 0..8 {
            q.submit(k, vec![0]).unwrap();
        }
        drop(q);
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 8);
    }
}
