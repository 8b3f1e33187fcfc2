//! The codecs of GeoTIFF tiles on realistic tiles, one thread: Deflate compression at
//! the default level 6 and decompression by zlib-rs (through flate2) and by libdeflate
//! (through libdeflater), and LZW decoding by weezl, each reported as raw (decoded)
//! bytes per second. The choice of libdeflate for GeoTIFF Deflate rests on these.
//!
//! ```text
//! cargo bench -p tilestream-benches --bench codecs
//! ```
//!
//! Tiles: a 256x256 pixel-interleaved 4-band u16 tile of a smooth field with noise (what
//! the imagery benchmark's scene holds, 512 KiB), and a 512x512 f32 tile of its NDVI
//! (what the NDVI writes, 1 MiB; floats compress poorly).

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::io::{Read as _, Write as _};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A deterministic normal-ish noise source (sum of four uniforms).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32;
        }
        (s - 2.0) * 1.7
    }
}

fn band(b: usize, y: usize, x: usize) -> f32 {
    let (x, y) = (x as f32, y as f32);
    3000.0 + 1500.0 * (x / 700.0 + b as f32).sin() * (y / 900.0 - b as f32).cos() + 400.0 * b as f32
}

/// The scene tile (u16, 4 bands pixel-interleaved) and the NDVI tile (f32), as bytes.
fn tiles() -> Vec<(&'static str, Vec<u8>)> {
    let mut n = Noise(7);
    let mut scene = Vec::with_capacity(256 * 256 * 4 * 2);
    for y in 0..256 {
        for x in 0..256 {
            for b in 0..4 {
                let v = (band(b, y + 3000, x + 1000) + 60.0 * n.next()).clamp(1.0, 65535.0);
                scene.extend((v as u16).to_le_bytes());
            }
        }
    }
    let mut ndvi = Vec::with_capacity(512 * 512 * 4);
    for y in 0..512 {
        for x in 0..512 {
            let r = (band(2, y, x) + 60.0 * n.next())
                .clamp(1.0, 65535.0)
                .floor() as f64;
            let i = (band(3, y, x) + 60.0 * n.next())
                .clamp(1.0, 65535.0)
                .floor() as f64;
            ndvi.extend((((i - r) / (i + r)) as f32).to_le_bytes());
        }
    }
    vec![("scene_u16", scene), ("ndvi_f32", ndvi)]
}

fn zlib_rs(raw: &[u8], level: u32) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
    z.write_all(raw).unwrap();
    z.finish().unwrap()
}

fn libdeflate(raw: &[u8], level: i32) -> Vec<u8> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(level).unwrap());
    let mut out = vec![0u8; c.zlib_compress_bound(raw.len())];
    let n = c.zlib_compress(raw, &mut out).unwrap();
    out.truncate(n);
    out
}

fn deflate(c: &mut Criterion) {
    for (name, raw) in tiles() {
        let z = zlib_rs(&raw, 6);
        let l = libdeflate(&raw, 6);
        eprintln!(
            "{name}: level 6 compresses {} B to {} B (zlib-rs), {} B (libdeflate)",
            raw.len(),
            z.len(),
            l.len()
        );
        let mut g = c.benchmark_group(format!("deflate_{name}"));
        g.throughput(Throughput::Bytes(raw.len() as u64));
        for level in [1u32, 6] {
            g.bench_function(format!("compress_l{level}_zlib_rs"), |b| {
                b.iter(|| zlib_rs(black_box(&raw), level));
            });
            g.bench_function(format!("compress_l{level}_libdeflate"), |b| {
                b.iter(|| libdeflate(black_box(&raw), level as i32));
            });
        }
        let mut out = vec![0u8; raw.len()];
        g.bench_function("decompress_zlib_rs", |b| {
            b.iter(|| {
                let mut d = flate2::read::ZlibDecoder::new(black_box(&z[..]));
                d.read_exact(&mut out).unwrap();
            });
        });
        let mut d = libdeflater::Decompressor::new();
        g.bench_function("decompress_libdeflate", |b| {
            b.iter(|| d.zlib_decompress(black_box(&z), &mut out).unwrap());
        });
        g.finish();
    }
}

fn lzw(c: &mut Criterion) {
    for (name, raw) in tiles() {
        let enc = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
            .encode(&raw)
            .unwrap();
        let mut g = c.benchmark_group(format!("lzw_{name}"));
        g.throughput(Throughput::Bytes(raw.len() as u64));
        let mut out = vec![0u8; raw.len()];
        g.bench_function("decode_weezl", |b| {
            b.iter(|| {
                // as src/format/tiff/decode.rs decodes a chunk
                let mut d = weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
                let (mut inp, mut filled) = (black_box(&enc[..]), 0);
                while filled < out.len() {
                    let r = d.decode_bytes(inp, &mut out[filled..]);
                    filled += r.consumed_out;
                    inp = &inp[r.consumed_in..];
                    if r.status.is_err() || r.consumed_in + r.consumed_out == 0 {
                        break;
                    }
                }
                assert_eq!(filled, raw.len());
            });
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = deflate, lzw
}
criterion_main!(benches);
