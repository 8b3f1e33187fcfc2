//! Unit tests of Zarr chunk decoding with a bound on the decoded size.
use super::*;
use crate::error::FormatErrorKind;
use crate::format::zarr::codec::fill_value;
use serde_json::Value;

#[test]
fn untranspose_inverts_a_permutation() {
    // a 2x3x4 chunk of u16 whose element (i, j, k) is 100i + 10j + k
    let shape = [2usize, 3, 4];
    let order = [2usize, 0, 1];
    let val = |i: usize, j: usize, k: usize| (100 * i + 10 * j + k) as u16;
    // encoded: axes (k, i, j)
    let mut enc = Vec::new();
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                enc.extend_from_slice(&val(i, j, k).to_le_bytes());
            }
        }
    }
    let mut out = vec![0u8; enc.len()];
    untranspose(&enc, &mut out, &shape, &order, 2);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                want.extend_from_slice(&val(i, j, k).to_le_bytes());
            }
        }
    }
    assert_eq!(out, want);
}

#[test]
fn fill_values_of_every_form() {
    let m = Path::new("zarr.json");
    let f = |v: Value, d: DType| fill_value(m, &v, d);
    let metadata_error = |r: Result<Vec<u8>>| {
        matches!(
            r,
            Err(Error::Zarr {
                source: ZarrError::Metadata(_),
                ..
            })
        )
    };
    assert_eq!(
        f(serde_json::json!(-2), DType::I16).ok(),
        Some(vec![0xfe, 0xff])
    );
    assert_eq!(
        f(serde_json::json!(u64::MAX), DType::U64).ok(),
        Some(vec![0xff; 8])
    );
    assert!(metadata_error(f(serde_json::json!(256), DType::U8)));
    assert!(metadata_error(f(serde_json::json!(-1), DType::U32)));
    assert!(metadata_error(f(serde_json::json!(1.5), DType::I32)));
    assert_eq!(
        f(serde_json::json!("NaN"), DType::F32).ok(),
        Some(f32::NAN.to_le_bytes().to_vec())
    );
    assert_eq!(
        f(serde_json::json!("-Infinity"), DType::F64).ok(),
        Some(f64::NEG_INFINITY.to_le_bytes().to_vec())
    );
    assert_eq!(
        f(serde_json::json!("0x7fc00001"), DType::F32).ok(),
        Some(0x7fc0_0001u32.to_le_bytes().to_vec())
    );
    assert!(metadata_error(f(serde_json::json!("0x7fc0"), DType::F32)));
    assert!(metadata_error(f(
        serde_json::json!("0x+7fc0001"),
        DType::F32
    )));
    assert_eq!(
        f(serde_json::json!(0.1), DType::F32).ok(),
        Some(0.1f32.to_le_bytes().to_vec())
    );
    assert_eq!(f(serde_json::json!(true), DType::Bool).ok(), Some(vec![1]));
    assert!(metadata_error(f(serde_json::json!(1), DType::Bool)));
}

#[test]
fn decoders_stop_at_the_chunk_size() {
    let p = Path::new("c/0");
    // 1 MiB of zeros claims to be a 1 KiB chunk
    let big = vec![0u8; 1 << 20];
    let z = zstd::encode_all(&big[..], 3).expect("zstd");
    let e = undo(p, "chunk [0]", Compressor::Zstd, &z, 1024, true).expect_err("bomb");
    let corrupt = |e: &Error| matches!(e, Error::Zarr { source, .. } if source.kind() == FormatErrorKind::Corrupt);
    assert!(
        matches!(
            &e,
            Error::Zarr {
                source: ZarrError::DecodesPast { limit: 1024, .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(corrupt(&e), "{e:?}");
    assert!(
        e.to_string()
            .contains("decodes to more than the 1024 bytes"),
        "{e}"
    );
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut g, &big).expect("gzip");
    let g = g.finish().expect("gzip");
    assert!(corrupt(
        &undo(p, "chunk [0]", Compressor::Gzip, &g, 1024, true).expect_err("gzip bomb")
    ));
    // and give exactly the chunk when it is one
    let small = zstd::encode_all(&big[..1024], 3).expect("zstd");
    assert_eq!(
        undo(p, "c", Compressor::Zstd, &small, 1024, true)
            .expect("decode")
            .len(),
        1024
    );
    // a checksum that does not match is refused
    let mut c = vec![1u8, 2, 3];
    c.extend_from_slice(&crc32c::crc32c(&[1, 2, 3]).to_le_bytes());
    assert_eq!(
        undo(p, "c", Compressor::Crc32c { at_end: true }, &c, 3, true).expect("crc"),
        vec![1, 2, 3]
    );
    c[0] = 9;
    assert!(corrupt(
        &undo(p, "c", Compressor::Crc32c { at_end: true }, &c, 3, true).expect_err("crc")
    ));
}

#[test]
fn codec_chains_outside_the_specification_are_refused() {
    let m = Path::new("zarr.json");
    let parse_codecs = |codecs: Value| {
        let meta = serde_json::json!({
            "codecs": codecs, "fill_value": 0,
            "chunk_key_encoding": {"name": "default"}
        });
        parse(m, &meta, DType::U16, &[4, 4]).map(|_| ())
    };
    let ok = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
                                {"name": "zstd", "configuration": {"level": 1}}]);
    assert!(parse_codecs(ok).is_ok());
    for (codecs, says) in [
        (serde_json::json!([{"name": "zstd"}]), "before bytes"),
        (
            serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "bitround"}]),
            "codec `bitround`",
        ),
        (serde_json::json!([{"name": "bytes"}]), "no endian"),
        (
            serde_json::json!([{"name": "transpose", "configuration": {"order": [0, 0]}},
                            {"name": "bytes", "configuration": {"endian": "big"}}]),
            "not a permutation",
        ),
    ] {
        let e = parse_codecs(codecs).expect_err(says);
        assert!(e.to_string().contains(says), "{e}");
    }
}
