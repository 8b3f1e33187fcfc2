//! Windows against their oracle: the window's elements picked out of the whole tensor
//! by index arithmetic, for the reads the scheduler makes (flat ranges, column runs of
//! rows), through the piece translation alone and through each kind of file.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::View;
use crate::dtype::DType;
use crate::format::{TensorFile, Touch};

/// Element `flat` of a tensor of `shape`, as C-order coordinates.
fn coords(mut flat: u64, shape: &[usize]) -> Vec<u64> {
    let mut c = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        let d = shape[a].max(1) as u64;
        c[a] = flat % d;
        flat /= d;
    }
    c
}

/// The flat indices `(start, count, touch)` reads, in the order of its layout.
fn read_order(start: u64, count: u64, touch: Touch) -> Vec<u64> {
    match touch {
        Touch::All => (start..start + count).collect(),
        Touch::Rows { row, runs, nruns } => (0..count / row.max(1))
            .flat_map(|r| {
                runs[..nruns]
                    .iter()
                    .flat_map(move |&(c0, n)| start + r * row + c0..start + r * row + c0 + n)
            })
            .collect(),
    }
}

/// The file's flat index of the window's element `flat`.
fn oracle(v: &View, flat: u64) -> u64 {
    let c = coords(flat, &v.shape);
    c.iter()
        .zip(&v.origin)
        .zip(&v.parent)
        .fold(0, |acc, ((&c, &o), &d)| acc * d as u64 + c + o)
}

/// A window of a random tensor (up to rank 4, small axes, some whole) and a read of it.
fn window_and_read() -> impl Strategy<Value = (View, u64, u64, Touch)> {
    prop::collection::vec((1usize..7, 0usize..7, 0usize..7, any::<bool>()), 1..5)
        .prop_map(|axes| {
            let mut v = View::whole(&[]);
            for (d, a, b, whole) in axes {
                let (lo, hi) = if whole {
                    (0, d)
                } else {
                    let (a, b) = (a % (d + 1), b % (d + 1));
                    (a.min(b), a.max(b))
                };
                v.parent.push(d);
                v.origin.push(lo as u64);
                v.shape.push(hi - lo);
            }
            v
        })
        .prop_flat_map(|v| {
            let len: u64 = v.shape.iter().map(|&d| d as u64).product();
            let w = *v.shape.last().unwrap_or(&1) as u64;
            let rows = len / w.max(1);
            (
                Just(v),
                0..=len,
                0..=len,
                0..=rows,
                0..=rows,
                any::<[(u64, u64); 3]>(),
                0usize..4,
            )
        })
        .prop_map(|(v, a, b, r0, r1, raw_runs, nruns)| {
            let w = *v.shape.last().unwrap_or(&1) as u64;
            if nruns == 0 || w == 0 {
                let (s, e) = (a.min(b), a.max(b));
                return (v, s, e - s, Touch::All);
            }
            // column runs within a row, as a box tile's reads make them
            let mut runs = [(0, 0); 3];
            for (k, &(c, n)) in raw_runs.iter().take(nruns).enumerate() {
                let c0 = c % w;
                runs[k] = (c0, 1 + n % (w - c0));
            }
            let (r0, r1) = (r0.min(r1), r0.max(r1));
            let touch = Touch::Rows {
                row: w,
                runs,
                nruns,
            };
            (v, r0 * w, (r1 - r0) * w, touch)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The pieces of a window's read, read from the file one after another, are the
    /// window's elements in the read's order.
    #[test]
    fn pieces_read_the_windows_elements((v, start, count, touch) in window_and_read()) {
        let mut pieces = Vec::new();
        v.pieces(start, count, touch, &mut pieces);
        let got: Vec<u64> = pieces
            .iter()
            .flat_map(|&(s, n, t)| read_order(s, n, t))
            .collect();
        let want: Vec<u64> = read_order(start, count, touch)
            .into_iter()
            .map(|f| oracle(&v, f))
            .collect();
        prop_assert_eq!(got, want);
        // every piece lies in the file's tensor
        let len: u64 = v.parent.iter().map(|&d| d as u64).product();
        for &(s, n, _) in &pieces {
            prop_assert!(s + n <= len);
        }
    }
}

/// A window of whole rows of a contiguous file is one piece (mapped, not copied), and a
/// window of columns reads only its columns (column runs of the file's rows).
#[test]
fn contiguous_windows_are_one_piece() {
    let v = View {
        parent: vec![4, 10, 8],
        origin: vec![1, 2, 0],
        shape: vec![2, 5, 8],
        georef: None,
    };
    let mut p = Vec::new();
    v.pieces(0, 40, Touch::All, &mut p);
    assert_eq!(p, vec![(96, 40, Touch::All)]);
    p.clear();
    // across the two bands: two pieces
    v.pieces(0, 80, Touch::All, &mut p);
    assert_eq!(p, vec![(96, 40, Touch::All), (176, 40, Touch::All)]);
    let cols = View {
        parent: vec![10, 8],
        origin: vec![2, 3],
        shape: vec![5, 4],
        georef: None,
    };
    p.clear();
    cols.pieces(0, 20, Touch::All, &mut p);
    let mut runs = [(0, 0); 3];
    runs[0] = (3, 4);
    assert_eq!(
        p,
        vec![(
            16,
            40,
            Touch::Rows {
                row: 8,
                runs,
                nruns: 1
            }
        )]
    );
}

/// Writes `values` (u16, C order, of `shape`) as a `.npy` in `dir`, in C order or (for a
/// 2-d `shape`) Fortran order, little- or big-endian.
fn npy(dir: &std::path::Path, name: &str, shape: &[usize], fortran: bool, big: bool) -> TensorFile {
    let descr = if big { "'>u2'" } else { "'<u2'" };
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let mut header = format!(
        "{{'descr': {descr}, 'fortran_order': {}, 'shape': ({},), }}",
        if fortran { "True" } else { "False" },
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    let len: usize = shape.iter().product();
    let value = |flat: usize| (flat * 7 + 3) as u16;
    let order: Vec<usize> = if fortran {
        let (h, w) = (shape[0], shape[1]);
        (0..w)
            .flat_map(|c| (0..h).map(move |r| r * w + c))
            .collect()
    } else {
        (0..len).collect()
    };
    for f in order {
        let v = value(f);
        bytes.extend(if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    TensorFile::open(&path).unwrap()
}

/// A tiled TIFF of `(bands, h, w)` u16 values `flat * 7 + 3`, tiles of 16.
fn tiff(dir: &std::path::Path, name: &str, shape: [usize; 3], pixel: bool) -> TensorFile {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).unwrap();
    let opts = crate::format::tiff::TiffWriteOptions {
        tile: 16,
        pixel_interleave: pixel,
        ..Default::default()
    };
    crate::format::tiff::write::write_tiled(&f, &path, &shape, DType::U16, &opts, &|at, buf| {
        for (k, b) in buf.chunks_exact_mut(2).enumerate() {
            let flat = at as usize / 2 + k;
            b.copy_from_slice(&((flat * 7 + 3) as u16).to_le_bytes());
        }
        Ok(())
    })
    .unwrap();
    drop(f);
    TensorFile::open(&path).unwrap()
}

/// What a window's read must hold: the file's values at the oracle's indices.
fn expected(t: &TensorFile, start: u64, count: u64, touch: Touch) -> Vec<u8> {
    let v = t.view.as_deref().unwrap();
    read_order(start, count, touch)
        .into_iter()
        .flat_map(|f| ((oracle(v, f) * 7 + 3) as u16).to_le_bytes())
        .collect()
}

/// Reads of windows through each kind of file (mapped, byte-swapped, Fortran order
/// decoded in chunks, TIFF tiles band-sequential and pixel-interleaved) give the
/// window's elements, by `map_windows` and by `read_into`, and a window of a window is
/// the window of the file.
#[test]
fn windows_of_each_kind_of_file_read_their_elements() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![
        npy(dir.path(), "c.npy", &[3, 37, 41], false, false),
        npy(dir.path(), "be.npy", &[3, 37, 41], false, true),
        npy(dir.path(), "f.npy", &[37, 41], true, false),
        tiff(dir.path(), "band.tif", [3, 37, 41], false),
        tiff(dir.path(), "pixel.tif", [3, 37, 41], true),
    ];
    for whole in &files {
        let rank = whole.shape().len();
        let ranges = [5..30u64, 7..40];
        let w = whole.window(&ranges).unwrap();
        assert_eq!(&w.shape()[rank - 2..], &[25, 33]);
        assert_eq!(w.file_shape(), whole.shape());
        // a window of the window: rows 10..25 and columns 3..20 of it
        let ww = w.window(&[10..25, 3..20]).unwrap();
        assert_eq!(ww.window_origin().unwrap()[rank - 2..], [15, 10]);
        for t in [&w, &ww] {
            let len = t.info().len();
            let cols = *t.shape().last().unwrap() as u64;
            let mut runs = [(0, 0); 3];
            runs[0] = (1, 4);
            runs[1] = (cols - 3, 3);
            let rows_touch = Touch::Rows {
                row: cols,
                runs,
                nruns: 2,
            };
            let reqs = [
                (0, len, Touch::All),
                (3, len - 10, Touch::All),
                (cols * 2, cols * 9, rows_touch),
                (len - cols * 4, cols * 4, rows_touch),
            ];
            let got = t.map_windows(&reqs).unwrap();
            for (&(s, n, touch), g) in reqs.iter().zip(&got) {
                let want = expected(t, s, n, touch);
                assert!(
                    g.bytes() == want.as_slice(),
                    "{} window {:?}: {s} {n} {touch:?}",
                    t.path().display(),
                    t.window_origin()
                );
                let one = t.map_window_touch(s, n, touch).unwrap();
                assert!(one.bytes() == want.as_slice());
                let mut dst = vec![0u8; want.len()];
                match t.read_into(s, n, touch, &mut dst).unwrap() {
                    Some(k) => assert!(k == want.len() && dst == want),
                    None => assert!(t.chunked().is_some()),
                }
            }
        }
    }
}

/// Windows out of range or of too many axes are refused, naming the axis.
#[test]
fn bad_windows_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = npy(dir.path(), "c.npy", &[3, 4], false, false);
    let e = t.window(&[0..2, 1..5]).unwrap_err().to_string();
    assert!(
        e.contains("window 1..5 of axis 1") && e.contains("4 elements"),
        "{e}"
    );
    #[allow(clippy::reversed_empty_ranges, clippy::single_range_in_vec_init)]
    let e = t.window(&[2..1]).unwrap_err().to_string();
    assert!(e.contains("axis 1"), "{e}");
    let e = t.window(&[0..1, 0..1, 0..1]).unwrap_err().to_string();
    assert!(e.contains("3 ranges") && e.contains("2 axes"), "{e}");
    // the whole tensor is no window
    assert!(t.window(&[0..3, 0..4]).unwrap().window_origin().is_none());
}
