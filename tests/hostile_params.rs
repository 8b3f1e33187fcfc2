//! Absurd parameters and expressions end with one line, quickly, within the budget:
//! sizes taken from the command line are checked before anything is allocated from them,
//! expressions are bounded before they are compiled, pipeline fusion grows linearly,
//! thread counts are capped, and argument errors are one line with exit code 2.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::zombie_processes, // reaped by wait4
    clippy::float_cmp // exact by design
)]

#[path = "it/common/mod.rs"]
mod common;
#[path = "it/common/peak.rs"]
mod peak;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{bin, ok, read_npy_data};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs `tilestream args` with `--memory 16MiB`, measuring the peak RSS of that process
/// alone, killing it after 20 s; returns (exit code, stderr, peak RSS bytes).
fn run_measured(args: &[&str]) -> (Option<i32>, String, u64) {
    let mut all = args.to_vec();
    all.extend(["--memory", "16MiB", "--progress", "never"]);
    let m = peak::measure(&all, Duration::from_secs(20));
    (m.code, m.stderr, m.rss)
}

fn refused(args: &[&str], word: &str) {
    let (code, err, rss) = run_measured(args);
    assert!(
        matches!(code, Some(1 | 2)),
        "{args:?}: exit {code:?}: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(
        err.len() < 600,
        "{args:?}: a message of {} bytes",
        err.len()
    );
    assert!(err.contains(word), "{args:?}: does not say `{word}`: {err}");
    assert!(rss < 64 << 20, "{args:?}: peak RSS {rss}");
}

#[test]
fn sizes_from_the_command_line_are_checked_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x64", "--seed", "1"]);
    let z = dir.path().join("z.zarr");
    for chunks in ["100000x100000", "4294967296x1", "18446744073709551615x1"] {
        refused(
            &["convert", p(&x), p(&z), "--zarr-chunks", chunks],
            "--zarr-chunks",
        );
    }
    refused(
        &[
            "convert",
            p(&x),
            p(&z),
            "--zarr-chunks",
            "64x64",
            "--zarr-shard",
            "1048576x1048576",
        ],
        "--zarr-shard",
    );
    let g = dir.path().join("g.npy");
    for (filter, word) in [
        ("gaussian:sigma=1e30", "sigma"),
        ("gaussian:sigma=2,truncate=1e300", "sigma"),
        ("box:size=18446744073709551615", "size"),
        ("median:size=100000", "size"),
    ] {
        refused(&["stencil", p(&x), p(&g), "--filter", filter], word);
    }
    // images without pixels: no patch index, no GeoTIFF
    for shape in ["4611686018427387904x0", "0x2147483648x2147483648"] {
        let e = dir.path().join("e.npy");
        ok(&["gen", p(&e), "--shape", shape]);
        refused(&["tiles", p(&e), p(&dir.path().join("pt"))], "no pixels");
    }
    let e = dir.path().join("e.npy");
    ok(&["gen", p(&e), "--shape", "0x5"]);
    refused(
        &["convert", p(&e), p(&dir.path().join("e.tif"))],
        "without pixels",
    );
    // more patches than the budget can index
    let big = dir.path().join("big.npy");
    ok(&["gen", p(&big), "--shape", "512x512"]);
    refused(
        &["tiles", p(&big), p(&dir.path().join("pb")), "--size", "1"],
        "index",
    );
}

#[test]
fn thread_counts_are_capped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "256x256", "--seed", "1"]);
    let start = Instant::now();
    let (code, err, _) = run_measured(&[
        "convert",
        p(&x),
        p(&dir.path().join("y.npy")),
        "-j",
        "100000",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("lowered to"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn expressions_are_bounded_before_they_are_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "8x8", "--seed", "1"]);
    let y = dir.path().join("y.npy");
    let xin = format!("x={}", p(&x));
    let long_sum = format!("x{}", "+x".repeat(40_000));
    let tower = format!("x{}", "**x".repeat(40_000));
    let parens = format!("{}x{}", "(".repeat(40_000), ")".repeat(40_000));
    let negs = format!("{}x", "-".repeat(40_000));
    let short_tower = format!("x{}", "**x".repeat(1_000));
    for e in [&long_sum, &tower, &parens, &negs, &short_tower] {
        refused(&["map", e, p(&y), "--in", &xin], "expression");
    }
    // the longest accepted sums still compile and run (no stack overflow)
    let near = format!("x{}", "+x".repeat(2_040));
    let (code, err, _) = run_measured(&["map", &near, p(&y), "--in", &xin, "--dtype", "f64"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn pipeline_fusion_grows_linearly_and_keeps_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x64", "--seed", "1"]);
    // a_i = a_{i-1} + a_{i-1}: textual fusion doubles the expression each step
    let mut toml = String::from("[inputs]\na0 = \"x.npy\"\n");
    for i in 1..=28 {
        toml.push_str(&format!(
            "\n[[steps]]\nop = \"map\"\nexpr = \"a{} + a{}\"\nout = \"a{i}\"\n",
            i - 1,
            i - 1
        ));
    }
    toml.push_str("\n[outputs]\na28 = \"fused.npy\"\n");
    let file = dir.path().join("fuse.toml");
    std::fs::write(&file, toml).unwrap();
    let start = Instant::now();
    let (code, err, rss) = run_measured(&["run", p(&file)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(rss < 64 << 20, "peak RSS {rss}");
    assert!(start.elapsed() < Duration::from_secs(10));
    // x * 2^28, exactly, in x's own dtype (f32), as a fully fused evaluation writes it
    let got = read_npy_data(&dir.path().join("fused.npy"));
    let xs = read_npy_data(&x);
    assert_eq!(got.len(), xs.len(), "f32 output");
    for (a, b) in got.chunks_exact(4).zip(xs.chunks_exact(4)) {
        let (a, b) = (
            f32::from_le_bytes(a.try_into().unwrap()),
            f32::from_le_bytes(b.try_into().unwrap()),
        );
        assert_eq!(a, b * 268_435_456.0);
    }
}

#[test]
fn argument_errors_are_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "8x8", "--seed", "1"]);
    let y = dir.path().join("y.npy");
    for args in [
        vec!["reduce", p(&x), p(&y), "--memory", "-1"],
        vec!["reduce", p(&x), p(&y), "-j", "-1"],
        vec!["reduce", p(&x), p(&y), "--axis", "-1"],
        vec!["convert", p(&x), ""],
        vec!["reduce", p(&x)],
        vec!["frobnicate"],
    ] {
        let o = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("tilestream: error: "), "{err}");
    }
    // an expression starting with `-` is an expression, not an option
    ok(&["map", "-x", p(&y), "--in", &format!("x={}", p(&x))]);
    // help still prints in full
    let o = bin().arg("--help").output().unwrap();
    assert!(o.status.success() && o.stdout.len() > 500);
}

/// A little-endian classic TIFF whose first directory holds `entries` (tag, type, count,
/// value), each value inline.
fn tiff_with(entries: &[(u16, u16, u32, u32)]) -> Vec<u8> {
    let mut b = b"II*\0".to_vec();
    b.extend(8u32.to_le_bytes());
    b.extend((entries.len() as u16).to_le_bytes());
    for &(tag, ty, count, value) in entries {
        b.extend(tag.to_le_bytes());
        b.extend(ty.to_le_bytes());
        b.extend(count.to_le_bytes());
        b.extend(value.to_le_bytes());
    }
    b.extend(0u32.to_le_bytes());
    b
}

#[test]
fn tiff_metadata_is_bounded_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let y = dir.path().join("y.npy");
    // 2^23 tiles claimed by a 100-byte file (the tables point past its end)
    let tiles: u32 = 1 << 23;
    let t = dir.path().join("tiles.tif");
    std::fs::write(
        &t,
        tiff_with(&[
            (256, 4, 1, 16 * 4096),   // ImageWidth
            (257, 4, 1, 16 * 2048),   // ImageLength
            (258, 3, 1, 8),           // BitsPerSample
            (259, 3, 1, 1),           // Compression
            (262, 3, 1, 1),           // Photometric
            (277, 3, 1, 1),           // SamplesPerPixel
            (322, 3, 1, 16),          // TileWidth
            (323, 3, 1, 16),          // TileLength
            (324, 4, tiles, 1 << 30), // TileOffsets
            (325, 4, tiles, 1 << 30), // TileByteCounts
        ]),
    )
    .unwrap();
    let start = Instant::now();
    refused(&["reduce", p(&t), p(&y), "--op", "sum"], "strips or tiles");
    assert!(start.elapsed() < Duration::from_secs(5));
    // a directory of 60000 tags
    let many: Vec<(u16, u16, u32, u32)> = (0..60_000u32)
        .map(|i| (40_000 + (i % 20_000) as u16, 3, 1, 0))
        .collect();
    let m = dir.path().join("many.tif");
    std::fs::write(&m, tiff_with(&many)).unwrap();
    refused(&["convert", p(&m), p(&y)], "tags");
    // a .npy header of a million dimensions
    let mut h = b"\x93NUMPY\x02\x00".to_vec();
    let dict = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
        "1,".repeat(1_000_000)
    );
    h.extend((dict.len() as u32 + 1).to_le_bytes());
    h.extend(dict.as_bytes());
    h.push(b'\n');
    let n = dir.path().join("dims.npy");
    std::fs::write(&n, h).unwrap();
    refused(&["convert", p(&n), p(&y)], "header");
    // a zarr.json of 10 MB
    let z = dir.path().join("big.zarr");
    std::fs::create_dir(&z).unwrap();
    std::fs::write(
        z.join("zarr.json"),
        format!(
            "{{\"zarr_format\":3,\"node_type\":\"array\",\"attributes\":{{\"x\":\"{}\"}}}}",
            "a".repeat(10 << 20)
        ),
    )
    .unwrap();
    refused(&["convert", p(&z), p(&y)], "larger than");
}

#[test]
fn zarr_stores_that_would_panic_or_block_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x64", "--seed", "1"]);
    let y = dir.path().join("y.npy");
    // a shard index pointing far past the shard (its checksum removed, as a hand-made
    // store may have none)
    let s = dir.path().join("s.zarr");
    ok(&[
        "convert",
        p(&x),
        p(&s),
        "--zarr-chunks",
        "16x16",
        "--zarr-shard",
        "32x32",
    ]);
    let meta_path = s.join("zarr.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let idx = &mut meta["codecs"][0]["configuration"]["index_codecs"];
    let before = idx.as_array().unwrap().len();
    idx.as_array_mut()
        .unwrap()
        .retain(|c| c["name"] != "crc32c");
    assert_eq!(before, idx.as_array().unwrap().len() + 1, "{meta}");
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    let shard = s.join("c").join("0").join("0");
    let mut b = std::fs::read(&shard).unwrap();
    b.truncate(b.len() - 4);
    let at = b.len() - 4 * 16;
    b[at..at + 8].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
    b[at + 8..at + 16].copy_from_slice(&64u64.to_le_bytes());
    std::fs::write(&shard, &b).unwrap();
    let (code, err, _) = run_measured(&["reduce", p(&s), p(&y), "--op", "sum"]);
    assert!(matches!(code, Some(1 | 2)), "{code:?} {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // a FIFO where a chunk should be
    let f = dir.path().join("f.zarr");
    ok(&["convert", p(&x), p(&f), "--zarr-chunks", "32x32"]);
    let chunk = f.join("c").join("0").join("0");
    std::fs::remove_file(&chunk).unwrap();
    let c = std::ffi::CString::new(p(&chunk)).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(
        &["reduce", p(&f), p(&y), "--op", "sum"],
        "not a regular file",
    );
    // chunks too large to ever decode
    let h = dir.path().join("h.zarr");
    ok(&["convert", p(&x), p(&h)]);
    let meta_path = h.join("zarr.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    for (rows, word) in [(4_294_967_296u64, "budget"), (8_589_934_592, "decodes to")] {
        meta["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::json!([rows, 1]);
        std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
        refused(&["reduce", p(&h), p(&y), "--op", "sum"], word);
    }
}

/// A zstd frame of `n` (a multiple of 128 KiB) zero bytes made of RLE blocks, 4 bytes
/// each: a decompression bomb of 32 KiB per GiB, written without a compressor (whose
/// memory would count in the RSS of the children this process forks).
fn zstd_bomb(n: usize) -> Vec<u8> {
    // magic, then a frame header with no content size and a 128 KiB window
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3];
    let blocks = n / (128 << 10);
    for k in 0..blocks {
        let last = u32::from(k + 1 == blocks);
        let header = (128u32 << 10) << 3 | 1 << 1 | last;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(0);
    }
    f
}

/// gzip of `n` zero bytes (at most 1032:1, deflate's limit), streamed.
fn gzip_bomb(n: usize) -> Vec<u8> {
    use std::io::Write as _;
    let block = vec![0u8; 1 << 20];
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..n >> 20 {
        e.write_all(&block).unwrap();
    }
    e.finish().unwrap()
}

#[test]
fn zarr_chunks_decode_within_their_size_and_sparse_stores_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "512x512", "--seed", "1"]);
    let y = dir.path().join("y.npy");
    // a chunk of 256x256 f32 (256 KiB) replaced by zstd inflating to 1 GiB, one of
    // 512x512 by gzip inflating to 512 MiB
    for (codec, chunks, bomb) in [
        ("zstd", "256x256", zstd_bomb(1 << 30)),
        ("gzip", "512x512", gzip_bomb(512 << 20)),
    ] {
        let z = dir.path().join(format!("{codec}.zarr"));
        ok(&[
            "convert",
            p(&x),
            p(&z),
            "--zarr-chunks",
            chunks,
            "--zarr-compress",
            codec,
        ]);
        let key = z.join("c").join("0").join("0");
        assert!(key.is_file());
        std::fs::write(&key, &bomb).unwrap();
        refused(
            &["reduce", p(&z), p(&y), "--op", "sum"],
            "decompression bomb",
        );
        // a chunk file larger than any encoding of a chunk
        std::fs::write(&key, vec![7u8; 2 << 20]).unwrap();
        refused(
            &["reduce", p(&z), p(&y), "--op", "sum"],
            "more than a chunk",
        );
    }
    // the same inside a shard: inner chunk 0 of shard (0, 0) is the bomb
    let s = dir.path().join("s.zarr");
    ok(&[
        "convert",
        p(&x),
        p(&s),
        "--zarr-chunks",
        "128x128",
        "--zarr-shard",
        "256x256",
        "--zarr-compress",
        "zstd",
    ]);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.join("zarr.json")).unwrap()).unwrap();
    let cfg = &meta["codecs"][0]["configuration"];
    assert_eq!(cfg["index_codecs"][1]["name"], "crc32c", "{meta}");
    assert_ne!(cfg["index_location"], "start", "{meta}");
    let b = zstd_bomb(1 << 30);
    let mut shard = b.clone();
    let mut index = Vec::new();
    for k in 0..4u64 {
        let (off, n) = if k == 0 {
            (0, b.len() as u64)
        } else {
            (u64::MAX, u64::MAX)
        };
        index.extend_from_slice(&off.to_le_bytes());
        index.extend_from_slice(&n.to_le_bytes());
    }
    shard.extend_from_slice(&index);
    shard.extend_from_slice(&crc32c::crc32c(&index).to_le_bytes());
    std::fs::write(s.join("c").join("0").join("0"), &shard).unwrap();
    refused(
        &["reduce", p(&s), p(&y), "--op", "sum"],
        "decompression bomb",
    );
    // a store of 2048x2048 chunks of 1x1 with no chunk file: all fill value
    let e = dir.path().join("sparse.zarr");
    std::fs::create_dir(&e).unwrap();
    std::fs::write(
        e.join("zarr.json"),
        r#"{"zarr_format":3,"node_type":"array","shape":[2048,2048],"data_type":"float32",
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[1,1]}},
            "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
            "fill_value":1.5,"codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}"#,
    )
    .unwrap();
    let (code, err, rss) = run_measured(&["reduce", p(&e), p(&y), "--op", "sum", "--axis", "0"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(rss < 64 << 20, "sparse store: peak RSS {rss}");
    let got = read_npy_data(&y);
    let want: Vec<u8> = (0..2048).flat_map(|_| 3072f64.to_le_bytes()).collect();
    assert!(got == want, "sparse store: wrong column sums");
}

/// A sealed journal record, as tilestream writes one.
fn seal(text: &str) -> String {
    format!("{text} *{:08x}\n", crc32fast::hash(text.as_bytes()))
}

/// An interrupted run's journal of any size is never read whole: past half the budget
/// (at least 4 MiB) a resume is refused in one line; below it, a journal of a hundred
/// thousand forged records stays within the budget and the fixed overhead.
#[test]
fn journals_of_any_size_are_read_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "20000x512", "--seed", "1"]);
    let out = dir.path().join("s.npy");
    let args = ["reduce", p(&x), p(&out), "--op", "std", "--axis", "0"];
    let killed = bin()
        .args(args)
        .args(["--memory", "16MiB", "--progress", "never"])
        .env("TILESTREAM_FAULT_KILL_AT", "written:0:3")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "the run was to be killed");
    let journal = dir.path().join(".s.npy.journal.tilestream-tmp");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut resume = args.to_vec();
    resume.push("--resume");
    // 300 MB (sparse: nothing is written to disk)
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    f.set_len(300 << 20).unwrap();
    drop(f);
    refused(&resume, "journal");
    // just under the cap of a 16 MiB budget: forged records, every one sealed
    let mut forged = text.clone();
    let mut i = 0u64;
    while forged.len() < (8 << 20) - 64 {
        forged.push_str(&seal(&format!("tile 0 {} {:08x}", 1_000_000 + i, i)));
        i += 1;
    }
    std::fs::write(&journal, &forged).unwrap();
    let (code, err, rss) = run_measured(&resume);
    eprintln!("a forged journal of {i} records: exit {code:?}, peak RSS {rss}: {err}");
    assert!(matches!(code, Some(0..=2)), "exit {code:?}: {err}");
    assert!(
        rss < 64 << 20,
        "peak RSS {rss} reading a journal of {i} records"
    );
}

/// A TIFF that lists its tiles for real (an 8 MB file of tables): however many it lists,
/// reading its metadata stays within the budget and the fixed overhead, whether the file
/// is then refused or read.
#[test]
fn tiff_tables_that_exist_are_read_within_the_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let y = dir.path().join("y.npy");
    for log2 in [19u32, 20] {
        let tiles: u32 = 1 << log2;
        let side = 16 * (1u32 << (log2 / 2)); // a square of tiles (2^19: 512 x 1024)
        let (w, h) = (side, 16 * tiles / (side / 16));
        let mut entries = vec![
            (256, 4, 1, w),  // ImageWidth
            (257, 4, 1, h),  // ImageLength
            (258, 3, 1, 8),  // BitsPerSample
            (259, 3, 1, 1),  // Compression
            (262, 3, 1, 1),  // Photometric
            (277, 3, 1, 1),  // SamplesPerPixel
            (322, 3, 1, 16), // TileWidth
            (323, 3, 1, 16), // TileLength
        ];
        // the tables after the directory: every tile's offset and byte count
        let header = 8 + 2 + 12 * (entries.len() as u32 + 2) + 4;
        let counts_at = header + 4 * tiles;
        entries.push((324, 4, tiles, header));
        entries.push((325, 4, tiles, counts_at));
        let mut b = tiff_with(&entries);
        assert_eq!(b.len() as u32, header);
        let data_at = counts_at + 4 * tiles;
        for _ in 0..tiles {
            b.extend(data_at.to_le_bytes()); // every tile the same 256 bytes
        }
        for _ in 0..tiles {
            b.extend(256u32.to_le_bytes());
        }
        b.extend(vec![7u8; 256]);
        let t = dir.path().join(format!("t{log2}.tif"));
        std::fs::write(&t, b).unwrap();
        let (code, err, rss) = run_measured(&["reduce", p(&t), p(&y), "--op", "sum"]);
        eprintln!(
            "2^{log2} tiles: exit {code:?}, peak RSS {rss}: {}",
            err.trim_end()
        );
        assert!(matches!(code, Some(0..=2)), "{err}");
        assert!(err.trim_end().lines().count() <= 1, "{err}");
        assert!(rss < 64 << 20, "2^{log2} tiles: peak RSS {rss}");
    }
}
