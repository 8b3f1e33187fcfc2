//! The order a shuffled stream takes its rows in: blocks of rows in a random order, grouped
//! into windows whose rows are shuffled, all a function of the seed and the epoch alone.

use crate::format::TensorFile;
use crate::ops::generate::philox4x32_10;

/// How a stream of batches shuffles its rows (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shuffle {
    /// The seed: the order is a function of it, the epoch and the two sizes below.
    pub seed: u64,
    /// Rows of a block (the unit of reading: consecutive rows).
    pub block_rows: u64,
    /// Blocks of a window (the rows shuffled together).
    pub window_blocks: u64,
}

impl Shuffle {
    /// Blocks of about 1 MiB of rows of `row_bytes` (all inputs together), 64 to a
    /// window: a window of about 64 MiB, each batch drawn from 64 places of the array.
    /// Depends on the rows' size alone, never on a budget.
    #[must_use]
    pub fn for_rows(seed: u64, row_bytes: u64) -> Self {
        Shuffle {
            seed,
            block_rows: ((1u64 << 20) / row_bytes.max(1)).max(1),
            window_blocks: 64,
        }
    }

    /// [`Shuffle::for_rows`] for the rows of `inputs` together.
    #[must_use]
    pub fn for_inputs(seed: u64, inputs: &[&TensorFile]) -> Self {
        let row_bytes = inputs
            .iter()
            .map(|t| {
                let elems: usize = t.shape().get(1..).unwrap_or(&[]).iter().product();
                (elems * t.dtype().size()) as u64
            })
            .sum();
        Shuffle::for_rows(seed, row_bytes)
    }

    /// With patches of `size` ([`BatchRequest::patches`](super::BatchRequest::patches)): blocks of one row of the
    /// patch grid (a strip `size` rows high), as many to a window as make about 64 MiB
    /// of strips of `inputs` together (1 to 64). Depends on the shapes alone.
    #[must_use]
    pub fn for_patches(seed: u64, inputs: &[&TensorFile], size: usize) -> Self {
        let strip: u64 = inputs
            .iter()
            .map(|t| {
                let s = t.shape();
                let cols = s.last().copied().unwrap_or(1);
                let bands = if s.len() == 3 { s[0] } else { 1 };
                (size * cols * bands * t.dtype().size()) as u64
            })
            .sum();
        Shuffle {
            seed,
            block_rows: 1,
            window_blocks: ((64u64 << 20) / strip.max(1)).clamp(1, 64),
        }
    }

    /// The windows of epoch `epoch` over `n` rows, each the row ranges of its blocks in
    /// the order their rows are concatenated ([`ShuffleWindow::order`] gives the order the
    /// rows are delivered in).
    #[must_use]
    pub fn epoch(&self, n: u64, epoch: u64) -> Vec<ShuffleWindow> {
        let block = self.block_rows.max(1);
        let blocks = n.div_ceil(block);
        let order = permutation(blocks, [self.seed, epoch, u64::MAX]);
        order
            .chunks(self.window_blocks.max(1) as usize)
            .enumerate()
            .map(|(w, ids)| ShuffleWindow {
                index: w as u64,
                epoch,
                seed: self.seed,
                shuffled: true,
                ranges: ids
                    .iter()
                    .map(|&b| (b * block, block.min(n - b * block)))
                    .collect(),
            })
            .collect()
    }
}

/// One window of an epoch ([`Shuffle::epoch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShuffleWindow {
    /// Its number in the epoch.
    pub index: u64,
    /// The epoch.
    pub epoch: u64,
    pub(super) seed: u64,
    /// Whether its rows are shuffled (a patch stream in file order has windows too).
    pub(super) shuffled: bool,
    /// The row ranges `(start, rows)` it reads, in order.
    pub ranges: Vec<(u64, u64)>,
}

impl ShuffleWindow {
    /// Rows it holds.
    #[must_use]
    pub fn rows(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }

    /// Its rows in the order they are delivered: indices into its ranges' rows.
    #[must_use]
    pub fn order(&self) -> Vec<u64> {
        if self.shuffled {
            permutation(self.rows(), [self.seed, self.epoch, self.index])
        } else {
            (0..self.rows()).collect()
        }
    }
}

/// 64 random bits, a function of `key` and `i` alone (Philox-4x32-10, the generator of
/// `gen`): counter `(i, key[1], key[2])`, key `key[0]`.
fn random(key: [u64; 3], i: u64) -> u64 {
    let [a, b, _, _] = philox4x32_10(
        [
            i as u32,
            (i >> 32) as u32,
            key[1] as u32 ^ (key[2] as u32).rotate_left(16),
            (key[1] >> 32) as u32 ^ (key[2] >> 32) as u32 ^ (key[2] as u32),
        ],
        [key[0] as u32, (key[0] >> 32) as u32],
    );
    (u64::from(a) << 32) | u64::from(b)
}

/// A permutation of `0..n` drawn from `key` (Fisher-Yates; its draws a `SplitMix64`
/// stream seeded by Philox from `key`, each mapped onto `0..=i` by Lemire's
/// multiply-shift of 64 bits: a bias under `n / 2^64`).
fn permutation(n: u64, key: [u64; 3]) -> Vec<u64> {
    let mut state = random(key, 0);
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut p: Vec<u64> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ((u128::from(next()) * u128::from(i + 1)) >> 64) as u64;
        p.swap(i as usize, j as usize);
    }
    p
}
