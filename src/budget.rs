//! The memory budget: one counter every engine-owned allocation draws from.
//!
//! ```text
//!   MemoryBudget (limit, held, peak)
//!     ├── Reservation "staging window"  × depth   released when the window is unmapped
//!     ├── Reservation "output buffer"   × depth   released when the pool is dropped
//!     └── Reservation "accumulators"              released at the end of the run
//! ```
//!
//! A [`Reservation`] is RAII: dropping it gives its bytes back. The planner sizes tiles so
//! that all reservations of a run fit; if one still fails, [`BudgetError::Exhausted`]
//! prints the arithmetic (asked, held, limit) in the style of datafusion's memory pool.
//! Peak resident memory of a run is the peak of reservations plus a small fixed overhead
//! (code, thread stacks, allocator slack).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors of the memory budget.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BudgetError {
    /// A size string could not be parsed.
    #[error(
        "cannot parse memory size '{0}': expected a number with an optional unit, e.g. 512MiB, 2GB, 1.5GiB or 1048576"
    )]
    Parse(String),
    /// A reservation did not fit in what is left of the budget.
    #[error(
        "memory budget exhausted: {what} needs {} but {} of the {} budget is already reserved ({} free); raise `memory` to at least {}",
        fmt_bytes(*requested), fmt_bytes(*held), fmt_bytes(*limit), fmt_bytes(limit.saturating_sub(*held)), fmt_bytes(held + requested)
    )]
    Exhausted {
        /// What the bytes were for.
        what: String,
        /// Bytes asked for.
        requested: u64,
        /// Bytes already reserved by others.
        held: u64,
        /// The budget.
        limit: u64,
    },
    /// The planner cannot fit even the smallest tile.
    #[error(
        "memory budget {} is too small for {what}: {arithmetic} = {}; the smallest budget that works is {} (`memory={}`)",
        fmt_bytes(*limit), fmt_bytes(*needed), fmt_bytes(*needed), suggest(*needed)
    )]
    TooSmall {
        /// The operation being planned.
        what: String,
        /// How the minimum was computed, spelled out.
        arithmetic: String,
        /// Smallest budget that works, in bytes.
        needed: u64,
        /// The budget given.
        limit: u64,
    },
    /// A GeoTIFF or Zarr output whose encoder (the tiles or chunks being filled and one
    /// in flight) the budget cannot hold beside the run's tiles: outputs are encoded as
    /// they are written or refused, never staged raw to be encoded after the run.
    #[error(
        "memory budget {} is too small to encode {what} as it is written: {arithmetic}; outputs are not staged raw to be encoded later: raise `memory` above {} or write smaller {chunks}",
        fmt_bytes(*limit), fmt_bytes(*least)
    )]
    CannotEncode {
        /// The output.
        what: String,
        /// What the encoder holds, spelled out.
        arithmetic: String,
        /// A budget at or below this cannot stream the output (more is needed, for the
        /// pipeline's tiles besides).
        least: u64,
        /// The budget given.
        limit: u64,
        /// The output's chunks and the option that sizes them.
        chunks: String,
    },
    /// The device's memory cannot hold the buffers of even the smallest tile.
    #[error(
        "device memory budget {} is too small for {what}: {arithmetic} = {}; the smallest that works is {} (`gpu_memory={}`)",
        fmt_bytes(*limit), fmt_bytes(*needed), fmt_bytes(*needed), suggest(*needed)
    )]
    DeviceTooSmall {
        /// The operation being planned.
        what: String,
        /// How the minimum was computed, spelled out.
        arithmetic: String,
        /// Smallest device budget that works, in bytes.
        needed: u64,
        /// The device budget given.
        limit: u64,
    },
}

impl BudgetError {
    /// The error as the caller's budget sees it when `bytes` of it are held outside the
    /// budget the planner was given (`what`: the CUDA driver's own host memory, which a
    /// GPU run takes out of `memory` before planning): those bytes are added back to the
    /// budget, to what is held and to what is needed, so that the `memory` the message
    /// asks for is one that works. Parse errors and device budgets are unchanged.
    #[must_use]
    pub fn plus_outside(mut self, bytes: u64, what: &str) -> Self {
        match &mut self {
            BudgetError::Exhausted { held, limit, .. } => {
                *held += bytes;
                *limit += bytes;
            }
            BudgetError::TooSmall {
                arithmetic,
                needed,
                limit,
                ..
            } if bytes > 0 => {
                *arithmetic = format!("{what} {} + ({arithmetic})", fmt_bytes(bytes));
                *needed += bytes;
                *limit += bytes;
            }
            BudgetError::CannotEncode {
                arithmetic,
                least,
                limit,
                ..
            } if bytes > 0 => {
                *arithmetic = format!("{arithmetic}, beside {what} ({})", fmt_bytes(bytes));
                *least += bytes;
                *limit += bytes;
            }
            _ => {}
        }
        self
    }
}

fn suggest(bytes: u64) -> String {
    // round up to a whole KiB/MiB so the suggestion is a value a person would type
    const MIB: u64 = 1 << 20;
    if bytes >= MIB {
        format!("{}MiB", bytes.div_ceil(MIB))
    } else {
        format!("{}KiB", bytes.div_ceil(1024))
    }
}

/// Formats a byte count with a binary unit (`1.5 GiB`, `512.0 MiB`, `900 B`).
#[must_use]
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Parses a memory size: plain bytes (`1048576`), or a number with a decimal (`kB`, `MB`,
/// `GB`, `TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`) unit; `K`, `M`, `G`, `T` alone are
/// binary. Case-insensitive; spaces allowed between number and unit.
///
/// # Errors
/// [`BudgetError::Parse`] if the string is not a size or is zero.
pub fn parse_size(s: &str) -> Result<u64, BudgetError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| BudgetError::Parse(s.to_string()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(BudgetError::Parse(s.to_string())),
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(BudgetError::Parse(s.to_string()));
    }
    Ok(bytes.round() as u64)
}

#[derive(Debug)]
struct Inner {
    limit: u64,
    held: AtomicU64,
    peak: AtomicU64,
}

/// A memory budget shared by every allocation of a run. Cloning shares the same counter.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    #[must_use]
    pub fn new(limit: u64) -> Self {
        MemoryBudget {
            inner: Arc::new(Inner {
                limit,
                held: AtomicU64::new(0),
                peak: AtomicU64::new(0),
            }),
        }
    }

    /// Parses a budget from a size string such as `512MiB` (see [`parse_size`]).
    ///
    /// # Errors
    /// [`BudgetError::Parse`] if the string is not a size.
    pub fn parse(s: &str) -> Result<Self, BudgetError> {
        parse_size(s).map(Self::new)
    }

    /// The limit in bytes.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Bytes reserved right now.
    #[must_use]
    pub fn reserved(&self) -> u64 {
        self.inner.held.load(Ordering::Acquire)
    }

    /// Highest number of bytes reserved at once since creation or [`reset_peak`](Self::reset_peak).
    #[must_use]
    pub fn peak(&self) -> u64 {
        self.inner.peak.load(Ordering::Acquire)
    }

    /// Sets the peak to what is reserved now (called at the start of a run).
    pub fn reset_peak(&self) {
        self.inner.peak.store(self.reserved(), Ordering::Release);
    }

    /// Reserves `bytes` for `what`; the bytes return to the budget when the reservation
    /// is dropped.
    ///
    /// # Errors
    /// [`BudgetError::Exhausted`] if the bytes do not fit in what is left.
    pub fn reserve(&self, what: &str, bytes: u64) -> Result<Reservation, BudgetError> {
        let inner = &self.inner;
        let mut held = inner.held.load(Ordering::Acquire);
        loop {
            let new = held.saturating_add(bytes);
            if new > inner.limit {
                return Err(BudgetError::Exhausted {
                    what: what.to_string(),
                    requested: bytes,
                    held,
                    limit: inner.limit,
                });
            }
            match inner
                .held
                .compare_exchange_weak(held, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    inner.peak.fetch_max(new, Ordering::AcqRel);
                    return Ok(Reservation {
                        budget: self.clone(),
                        bytes,
                    });
                }
                Err(actual) => held = actual,
            }
        }
    }
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&fmt_bytes(self.limit()))
    }
}

/// Bytes held from a [`MemoryBudget`]; given back on drop.
#[derive(Debug)]
#[must_use = "a reservation is released as soon as it is dropped"]
pub struct Reservation {
    budget: MemoryBudget,
    bytes: u64,
}

impl Reservation {
    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget
            .inner
            .held
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bytes_held_outside_the_planned_budget_are_added_back_to_what_an_error_asks_for() {
        let d = 144 << 20;
        let small = BudgetError::TooSmall {
            what: "reduce".into(),
            arithmetic: "3 slots x 1.0 MiB".into(),
            needed: 3 << 20,
            limit: 1 << 20,
        }
        .plus_outside(d, "the CUDA driver's own host memory");
        let text = small.to_string();
        assert!(
            text.contains("memory budget 145.0 MiB is too small"),
            "{text}"
        );
        assert!(
            text.contains("the CUDA driver's own host memory 144.0 MiB + (3 slots x 1.0 MiB)"),
            "{text}"
        );
        assert!(text.ends_with("(`memory=147MiB`)"), "{text}");
        let full = BudgetError::Exhausted {
            what: "a slot".into(),
            requested: 4 << 20,
            held: 2 << 20,
            limit: 5 << 20,
        }
        .plus_outside(d, "the driver");
        assert!(
            full.to_string()
                .ends_with("raise `memory` to at least 150.0 MiB"),
            "{full}"
        );
        let enc = BudgetError::CannotEncode {
            what: "out.tif".into(),
            arithmetic: "2 rows of tiles".into(),
            least: 8 << 20,
            limit: 4 << 20,
            chunks: "tiles".into(),
        }
        .plus_outside(d, "the driver");
        assert!(
            enc.to_string().contains("raise `memory` above 152.0 MiB"),
            "{enc}"
        );
        // nothing outside, a parse error, a device budget: unchanged
        let p = BudgetError::Parse("x".into());
        assert_eq!(p.clone().plus_outside(d, "the driver"), p);
        assert_eq!(small.clone().plus_outside(0, "x"), small);
    }

    #[test]
    fn parses_sizes() {
        let cases = [
            ("512MiB", 512 << 20),
            ("2GB", 2_000_000_000),
            ("1.5GiB", 3 << 29),
            ("1048576", 1_048_576),
            ("64 mib", 64 << 20),
            ("16M", 16 << 20),
            ("4kB", 4000),
        ];
        for (s, want) in cases {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for bad in ["", "MiB", "12XB", "-5MiB", "0", "1.2.3GiB", "0.1"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reservations_release_on_drop_and_track_peak() {
        let b = MemoryBudget::new(1000);
        let r1 = b.reserve("a", 600).unwrap();
        let err = b.reserve("b", 500).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("b needs 500 B"), "{msg}");
        assert!(msg.contains("600 B of the 1000 B budget"), "{msg}");
        assert!(msg.contains("at least 1.1 KiB"), "{msg}");
        drop(r1);
        assert_eq!(b.reserved(), 0);
        let _r2 = b.reserve("b", 500).unwrap();
        assert_eq!(b.peak(), 600);
        assert_eq!(b.reserved(), 500);
    }
}
