//! The CUDA reduction kernels (`kernels/reduce.cu`), run on the host: compiled as C++
//! with `TS_HOST_EMULATION` (one thread walks each grid, first to last and, in a second
//! build, last to first, so that a race between threads shows), driven tile by tile as the
//! runtime drives them (carried state between tiles, the launch arguments of
//! `ReduceTile`), their finished totals completed by the CPU reducer's own finishing
//! code, and compared byte for byte with the CPU backend's result. Every family and
//! dtype, over geometries that exercise lanes, inner columns, several outer indices,
//! several blocks per column, outer indices shorter than the lanes, and tiles from one
//! element to the whole tensor cut anywhere. NaNs compare equal to NaNs (payloads are not
//! specified across devices).

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::process::Command;

use super::cuda_emulation::{PRELUDE, compile, element};
use tilestream::backend::cpu::reduce::masked_reducer;
use tilestream::backend::cuda::source::{ReduceTile, Reduction, all_reductions, reduce_source};
use tilestream::ops::reduce::{Geometry, Reduce, ReduceOver};
use tilestream::{Backend, CpuBackend, DType};

/// The runner: `runner DIR KERNEL DATA TILES STATE OUT` feeds the tiles of `TILES` (the
/// launch arguments, then cells and finished outer indices, 14 u64 each) through the
/// kernel pair, starting from the state in `STATE`, and writes every tile's finished
/// totals to `OUT`.
fn runner(kernels: &[(Reduction, DType)]) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str(&reduce_source(kernels));
    s.push_str(
        r#"
static const char* DIR;
static void* load(const char* name, unsigned long long* bytes) {
    char p[4096]; snprintf(p, sizeof p, "%s/%s", DIR, name);
    FILE* f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); *bytes = (unsigned long long)ftell(f); fseek(f, 0, SEEK_SET);
    void* b = malloc(*bytes + 16); if (fread(b, 1, *bytes, f) != *bytes) exit(1); fclose(f); return b;
}
struct Rec { TsReduceTile t; unsigned long long cells, done; };
template <typename T, typename A>
static int run(char** a,
               void (*blocks)(const T*, TsReduceTile, const A*, const double*, A*, unsigned long long),
               void (*merge)(const T*, TsReduceTile, const A*, const A*, const double*, const A*,
                             A*, A*, A*, double*)) {
    unsigned long long nx, nr, ns;
    const T* x = (const T*)load(a[3], &nx);
    const Rec* recs = (const Rec*)load(a[4], &nr);
    unsigned char* state = (unsigned char*)load(a[5], &ns);
    nr /= sizeof(Rec);
    unsigned long long vc = recs[0].t.vcols;
    // the device's layout (src/backend/cuda/reduce.rs device_state): shifts, totals,
    // open partials
    unsigned char* other = (unsigned char*)malloc(ns + 16);
    double* shift = (double*)state;
    A* total = (A*)(shift + vc);
    A* open = total + vc;
    double* shift2 = (double*)other;
    A* total2 = (A*)(shift2 + vc);
    A* open2 = total2 + vc;
    char p[4096]; snprintf(p, sizeof p, "%s/%s", DIR, a[6]);
    FILE* out = fopen(p, "wb"); if (!out) return 4;
    for (unsigned long long k = 0; k < nr; ++k) {
        const Rec& r = recs[k];
        A* part = (A*)calloc(r.cells + 1, sizeof(A));
        A* done = (A*)calloc(r.t.n_o * vc + 1, sizeof(A));
        blocks(x + r.t.start, r.t, open, shift, part, r.cells);
        merge(x + r.t.start, r.t, total, open, shift, part, done, total2, open2, shift2);
        A* ta = total; total = total2; total2 = ta;
        A* oa = open; open = open2; open2 = oa;
        double* sa = shift; shift = shift2; shift2 = sa;
        if (fwrite(done, sizeof(A), r.done * vc, out) != r.done * vc) return 5;
        free(part); free(done);
    }
    fclose(out);
    return 0;
}
int main(int argc, char** argv) {
    if (argc != 7) return 2;
    DIR = argv[1];
"#,
    );
    for &(k, d) in kernels {
        let t = tilestream::backend::cuda::source::cuda_type(d);
        let template = k.template();
        let _ = writeln!(
            s,
            "    if (!strcmp(argv[2], \"{key}\")) return run<{t}, {template}<{t}>::A>(argv, {b}, {m});",
            key = key(k, d),
            b = k.blocks_name(d),
            m = k.merge_name(d),
        );
    }
    s.push_str("    return 3;\n}\n");
    s
}

fn key(k: Reduction, d: DType) -> String {
    format!("{}_{}", k.op_name(), d.name())
}

/// The operation each family is checked with (the finishing step differs, the kernels
/// are shared: mean and sum, var and std), and whether with a nodata value (the
/// families of integer inputs with one have it always, the other masked ones are
/// checked both ways).
fn ops_of(k: Reduction, d: DType) -> Vec<(Reduce, bool)> {
    let both = |op| vec![(op, false), (op, true)];
    match k {
        Reduction::FloatSum => vec![(Reduce::Mean, false)],
        Reduction::IntSum => vec![(Reduce::Sum, false)],
        Reduction::Moments => vec![(Reduce::Std { ddof: 1 }, false)],
        Reduction::Min => vec![(Reduce::Min, false)],
        Reduction::Max => vec![(Reduce::Max, false)],
        Reduction::NanFloatSum if d.is_float() => {
            let mut v = both(Reduce::NanMean);
            v.push((Reduce::NanSum, false));
            v
        }
        // an integer input's nanmean with a nodata value
        Reduction::NanFloatSum => vec![(Reduce::NanMean, true)],
        Reduction::NanMoments if d.is_float() => both(Reduce::NanVar { ddof: 1 }),
        Reduction::NanMoments => vec![(Reduce::NanStd { ddof: 0 }, true)],
        Reduction::NanMin => both(Reduce::NanMin),
        Reduction::NanMax => both(Reduce::NanMax),
        Reduction::Count => both(Reduce::Count),
        Reduction::NodataIntSum => vec![(Reduce::NanSum, true)],
        Reduction::NodataMin => vec![(Reduce::NanMin, true)],
        Reduction::NodataMax => vec![(Reduce::NanMax, true)],
    }
}

/// The nodata value of the masked checks: an element of the data (the one a fifth of
/// the way in), so that it occurs, as the data's f64 value.
fn nodata_of(backend: &CpuBackend, d: DType, x: &[u8]) -> f64 {
    let n = x.len() / d.size();
    let mut v = [0.0f64];
    let e = n / 5 * d.size();
    backend
        .cast(
            &x[e..e + d.size()],
            d,
            bytemuck::cast_slice_mut(&mut v),
            DType::F64,
        )
        .unwrap();
    v[0]
}

struct Case {
    shape: &'static [usize],
    over: ReduceOver,
    tiles: &'static [u64],
    /// NaN and infinities among float data.
    specials: bool,
}

const CASES: &[Case] = &[
    // lanes over one long run: three blocks per lane
    Case {
        shape: &[300_001],
        over: ReduceOver::All,
        tiles: &[997, 131_073, 300_001],
        specials: false,
    },
    // three inner columns, two blocks each
    Case {
        shape: &[90_001, 3],
        over: ReduceOver::Axis(0),
        tiles: &[7, 65_537, 270_003],
        specials: false,
    },
    // several outer indices with inner columns
    Case {
        shape: &[5, 9, 4],
        over: ReduceOver::Axis(1),
        tiles: &[1, 5, 36, 180],
        specials: true,
    },
    // outer indices shorter than the 8 lanes
    Case {
        shape: &[1000, 7],
        over: ReduceOver::Axis(1),
        tiles: &[3, 50, 7000],
        specials: true,
    },
    // two long outer indices of lanes, two blocks each
    Case {
        shape: &[2, 140_000],
        over: ReduceOver::Axis(1),
        tiles: &[9_999, 140_001, 280_000],
        specials: false,
    },
    // a length-2 axis in the middle of nothing
    Case {
        shape: &[3, 5, 2],
        over: ReduceOver::Axis(2),
        tiles: &[1, 4, 30],
        specials: true,
    },
];

/// Deterministic data of `d`: spread values with a large common offset (the shift in
/// the variance matters), and NaN and infinities when `specials`.
fn data(backend: &CpuBackend, d: DType, n: usize, specials: bool) -> Vec<u8> {
    let mut s: u64 = 0x2545_F491_4F6C_DD1D ^ n as u64;
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = (s >> 33) % 20_001;
            let x = (r as f64 - 10_000.0) * 0.37;
            if d.is_float() { x + 3000.0 } else { x }
        })
        .collect();
    if specials && d.is_float() {
        v[n / 3] = f64::NAN;
        v[n / 2] = f64::INFINITY;
        v[n - 1] = f64::NEG_INFINITY;
    }
    let mut b = vec![0u8; n * d.size()];
    backend
        .cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
        .unwrap();
    b
}

#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_reduction_kernel_matches_the_cpu_backend_bit_for_bit_whatever_the_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    let kernels = all_reductions();
    // threads walked first to last, and last to first: a kernel reading what another
    // thread of the same launch writes differs between the two
    let src = runner(&kernels);
    let (fwd, rev) = (dir.path().join("fwd"), dir.path().join("rev"));
    std::fs::create_dir(&fwd).unwrap();
    std::fs::create_dir(&rev).unwrap();
    let exes = [
        compile(&fwd, &src),
        compile(&rev, &format!("#define TS_HOST_REVERSE 1\n{src}")),
    ];
    let mut bad = Vec::new();
    let mut runs = 0;
    for (ci, case) in CASES.iter().enumerate() {
        let n: usize = case.shape.iter().product();
        let g = Geometry::new(case.shape, case.over).unwrap();
        let vc = g.vcols();
        for d in DType::ALL {
            let x = data(&backend, d, n, case.specials);
            let input = format!("in_{ci}_{}.bin", d.name());
            std::fs::write(dir.path().join(&input), &x).unwrap();
            let missing = nodata_of(&backend, d, &x);
            for (k, op, masked) in kernels
                .iter()
                .filter(|&&(_, kd)| kd == d)
                .flat_map(|&(k, _)| ops_of(k, d).into_iter().map(move |(op, m)| (k, op, m)))
            {
                let kd = d;
                let nodata = masked.then_some(missing);
                assert_eq!(
                    Reduction::of(op, d, nodata),
                    Some(k),
                    "{} of {} (nodata {nodata:?}) is not the {k:?} family",
                    op.name(),
                    d.name()
                );
                // the launch arguments of every tile, with the nodata value
                for (ti, &tile) in case.tiles.iter().enumerate() {
                    let mut recs: Vec<u64> = Vec::new();
                    let mut start = 0;
                    while start < n as u64 {
                        let len = tile.min(n as u64 - start);
                        let t = ReduceTile::new(&g, start, len).with_nodata(d, nodata);
                        recs.extend_from_slice(bytemuck::cast_slice(&[t]));
                        recs.push(t.cells());
                        recs.push(t.finished().1);
                        start += len;
                    }
                    let tiles = format!("tiles_{ci}_{ti}.bin");
                    std::fs::write(dir.path().join(&tiles), bytemuck::cast_slice(&recs)).unwrap();
                }
                let od = op.output_dtype(d);
                let mut cpu = masked_reducer(op, d, g, 1, nodata);
                let parts = cpu.state_parts();
                let state: Vec<u8> = [parts[2], parts[0], parts[1]].concat();
                std::fs::write(dir.path().join("state.bin"), &state).unwrap();
                cpu.feed_bytes(0, &x);
                let want = cpu.into_bytes();
                for ((ti, &tile), exe) in case
                    .tiles
                    .iter()
                    .enumerate()
                    .flat_map(|t| exes.iter().map(move |e| (t, e)))
                {
                    let st = Command::new(exe)
                        .arg(dir.path())
                        .args([
                            key(k, kd),
                            input.clone(),
                            format!("tiles_{ci}_{ti}.bin"),
                            "state.bin".into(),
                            "done.bin".into(),
                        ])
                        .status()
                        .unwrap();
                    assert!(
                        st.success(),
                        "{}: the emulated kernels failed: {st}",
                        key(k, kd)
                    );
                    runs += 1;
                    let done = std::fs::read(dir.path().join("done.bin")).unwrap();
                    // the device's totals, finished by a fresh CPU reducer
                    let mut host = masked_reducer(op, d, g, 1, nodata);
                    let acc = host.state_parts()[0].len() / vc;
                    let mut at = 0;
                    let mut start = 0;
                    while start < n as u64 {
                        let len = tile.min(n as u64 - start);
                        let (first, count) = ReduceTile::new(&g, start, len).finished();
                        let bytes = count as usize * vc * acc;
                        host.finish_outers(first, &done[at..at + bytes]);
                        at += bytes;
                        start += len;
                    }
                    assert_eq!(at, done.len(), "{}: totals left over", key(k, kd));
                    let got = host.into_bytes();
                    assert_eq!(got.len(), want.len());
                    for e in 0..want.len() / od.size() {
                        let (gv, gn) = element(&got, od, e);
                        let (wv, wn) = element(&want, od, e);
                        if gv != wv && !(gn && wn) {
                            bad.push(format!(
                                "{} ({}, nodata {nodata:?}) over {:?} of {:?}, tiles of {tile}: output {e}: kernel {gv:#x}, CPU {wv:#x}",
                                key(k, kd),
                                op.name(),
                                case.over,
                                case.shape
                            ));
                            break;
                        }
                    }
                }
            }
        }
    }
    assert!(runs > 1800, "{runs} runs");
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
}

/// The launch arguments of a tile, by hand for a small geometry: shape 2x10x3 over axis
/// 1 (outer 2, len 10, inner 3: per 30, vcols 3, one block per outer index).
#[test]
fn tile_arguments_count_cells_and_finished_outer_indices() {
    let g = Geometry::new(&[2, 10, 3], ReduceOver::Axis(1)).unwrap();
    // elements 25..35: the end of outer 0, the start of outer 1
    let t = ReduceTile::new(&g, 25, 10);
    assert_eq!((t.first, t.n_o, t.b0, t.b1, t.nb), (0, 2, 0, 0, 1));
    assert_eq!(t.cells(), 2 * 3);
    assert_eq!(t.finished(), (0, 1));
    // the whole tensor: both finished
    let t = ReduceTile::new(&g, 0, 60);
    assert_eq!(t.finished(), (0, 2));
    // inside outer 1 only, finishing nothing
    let t = ReduceTile::new(&g, 31, 5);
    assert_eq!((t.first, t.n_o, t.cells()), (1, 1, 3));
    assert_eq!(t.finished(), (1, 0));
    // lanes over 300001 elements: 37501 rows of 8, blocks of 16384 rows
    let g = Geometry::new(&[300_001], ReduceOver::All).unwrap();
    let t = ReduceTile::new(&g, 131_000, 100_000);
    assert_eq!((t.nb, t.b0, t.b1, t.count_first), (3, 0, 1, 2));
    assert_eq!(t.cells(), 2 * 8);
    assert_eq!(t.finished(), (0, 0));
    let t = ReduceTile::new(&g, 131_000, 169_001);
    assert_eq!((t.b0, t.b1, t.cells()), (0, 2, 3 * 8));
    assert_eq!(t.finished(), (0, 1));
}
