//! A share's partial of a reduction split by rows, as it travels between a cluster's
//! tasks: a JSON header saying what it is the partial of, and its accumulators.

use serde::{Deserialize, Serialize};

use super::{Reduce, ReduceOver};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// What a [`Partial`] is the partial of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialHeader {
    /// The reduction's name (`sum`, `mean`, ...).
    pub op: String,
    /// Its `ddof` (var and std).
    pub ddof: u32,
    /// The input's dtype.
    pub dtype: String,
    /// The whole input's shape.
    pub shape: Vec<usize>,
    /// The axis reduced; `None` for all elements (or several axes).
    pub axis: Option<usize>,
    /// The axes reduced, when several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<Vec<usize>>,
    /// The rows `[start, end)` of the leading axis this share covers.
    pub rows: (u64, u64),
    /// True if the payload is summation-block partials; false if it is the results of
    /// the share's rows.
    pub blocks: bool,
    /// The input's nodata value (its text, as the file or the user gave it), which the
    /// `nan` forms and `count` leave out; `None` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
}

impl PartialHeader {
    /// The reduction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown name.
    pub fn reduce(&self) -> Result<Reduce> {
        Reduce::parse(&self.op, self.ddof)
    }

    /// What it reduces over.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad list of axes.
    pub fn over(&self) -> Result<ReduceOver> {
        match &self.axes {
            Some(axes) => ReduceOver::axes(axes),
            None => Ok(self.axis.into()),
        }
    }

    /// The `axis` and `axes` fields of a reduction over `over`.
    #[must_use]
    pub fn axis_fields(over: ReduceOver) -> (Option<usize>, Option<Vec<usize>>) {
        match over {
            ReduceOver::All => (None, None),
            ReduceOver::Axis(a) => (Some(a), None),
            ReduceOver::Axes(_) => (None, Some(over.axis_list(64))),
        }
    }

    /// The input's dtype.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown name.
    pub fn dtype(&self) -> Result<DType> {
        self.dtype.parse()
    }
}

/// One share of a reduction split by rows (see `Engine::reduce_partial`): a header
/// saying what it is, and its payload (summation-block partials or results).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partial {
    #[doc(hidden)]
    /// What it is the partial of.
    pub header: PartialHeader,
    /// Block partials (accumulators) or results, as bytes.
    pub payload: Vec<u8>,
}

/// First bytes of a serialised [`Partial`].
const PARTIAL_MAGIC: &[u8; 8] = b"TSPART1\n";

impl Partial {
    /// Serialises it (to ship between processes): magic, header length (u32 LE), JSON
    /// header, payload.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let head = serde_json::to_vec(&self.header).unwrap_or_default();
        let mut out = Vec::with_capacity(12 + head.len() + self.payload.len());
        out.extend_from_slice(PARTIAL_MAGIC);
        out.extend_from_slice(&(head.len() as u32).to_le_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&self.payload);
        out
    }

    /// Reads what [`to_bytes`](Self::to_bytes) wrote.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the bytes are not a partial.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::invalid(format!("not a tilestream reduction partial: {why}"));
        let rest = bytes
            .strip_prefix(PARTIAL_MAGIC.as_slice())
            .ok_or_else(|| bad("no magic"))?;
        let (len, rest) = rest.split_at_checked(4).ok_or_else(|| bad("truncated"))?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (head, payload) = rest.split_at_checked(len).ok_or_else(|| bad("truncated"))?;
        let header = serde_json::from_slice(head).map_err(|e| bad(&e.to_string()))?;
        Ok(Partial {
            header,
            payload: payload.to_vec(),
        })
    }
}
