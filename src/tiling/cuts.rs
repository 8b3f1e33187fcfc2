//! Where boxes are cut: evenly, or along the chunks of an output encoded as it is
//! written (so that each box completes its chunks), and what those chunks hold.

use super::{OutChunks, OutMap};

/// The runs of `n` rows between chunk boundaries at `o` plus multiples of `a` (the first
/// `o` rows a shorter run of their own), `(first, len)` each.
pub(super) fn chunk_runs(n: u64, a: u64, o: u64) -> Vec<(u64, u64)> {
    let a = a.max(1);
    let mut runs = Vec::new();
    let mut at = 0;
    while at < n {
        let end = if at < o { o.min(n) } else { (at + a).min(n) };
        runs.push((at, end - at));
        at = end;
    }
    runs
}

/// Cuts `n` into pieces of at most `k` along a grid of `a` offset by `o`
/// ([`chunk_runs`]): as many whole runs of the grid as `k` holds in each piece (one
/// piece when `k` covers `n`); evened pieces ([`even_cuts`]) when `k` is below `a`.
pub(super) fn aligned_cuts(n: u64, k: u64, a: u64, o: u64) -> Vec<(i64, usize)> {
    if k >= n {
        return even_cuts(n, n);
    }
    if a == 0 || k < a {
        return even_cuts(n, k);
    }
    let mut cuts: Vec<(i64, usize)> = Vec::new();
    for (first, len) in chunk_runs(n, a, o) {
        match cuts.last_mut() {
            Some(last) if last.1 as u64 + len <= k => last.1 += len as usize,
            _ => cuts.push((first as i64, len as usize)),
        }
    }
    cuts
}

/// Chunks `c` the encoder holds for boxes of `th x tw` over an image of `h` rows and
/// `bands` bands: [`OutChunks::open`]; when the boxes are pieces of chunks several bands
/// deep, as many times that as the bands take chunks (the bands of each piece are visited
/// together, so every chunk of the piece's position stays open until its last piece).
pub(super) fn held_chunks(
    c: &OutChunks,
    out: OutMap,
    th: u64,
    tw: u64,
    h: usize,
    bands: usize,
) -> u64 {
    let open = c.open(out, th, tw);
    if c.planes > 1 && th < (c.rows as u64).min(h as u64) {
        open * bands.div_ceil(c.planes) as u64
    } else {
        open
    }
}

/// Cuts `n` rows into pieces of at most `k` within each run of the grid of `a` offset
/// by `o` ([`chunk_runs`]; each run's pieces evened out), and the index of each run's
/// first piece (then the number of pieces): [`BoxPlan::row_groups`](super::BoxPlan::row_groups).
pub(super) fn within_chunks(n: u64, a: u64, o: u64, k: u64) -> (Vec<(i64, usize)>, Vec<usize>) {
    let mut cuts = Vec::new();
    let mut groups = Vec::new();
    for (start, len) in chunk_runs(n, a, o) {
        groups.push(cuts.len());
        cuts.extend(
            even_cuts(len, k)
                .into_iter()
                .map(|(r, m)| (r + start as i64, m)),
        );
    }
    groups.push(cuts.len());
    (cuts, groups)
}

/// Cuts `n` positions into pieces of `k` from the start (the last one shorter): a grid
/// fixed by `k` alone, as [`Cuts::Given`](super::Cuts::Given) takes it.
#[must_use]
pub fn fixed_cuts(n: usize, k: usize) -> Vec<(i64, usize)> {
    let k = k.max(1);
    (0..n)
        .step_by(k)
        .map(|a| (a as i64, k.min(n - a)))
        .collect()
}

/// Cuts `n` into pieces of at most `k`, evened out so they differ by at most one.
pub(super) fn even_cuts(n: u64, k: u64) -> Vec<(i64, usize)> {
    let pieces = n.div_ceil(k.max(1));
    let k = n.div_ceil(pieces.max(1));
    (0..pieces)
        .map(|p| {
            let a = p * k;
            (a as i64, (k.min(n - a)) as usize)
        })
        .collect()
}
