//! Unit tests of `OpSpec`: JSON round trips, defaults, job keys.
use super::*;

#[test]
fn specs_round_trip_through_json_with_defaults() {
    let spec: OpSpec = serde_json::from_str(
        r#"{"op": "reduce", "input": {"path": "x.npy"}, "output": "m.npy",
            "reduce": "mean", "axis": 0}"#,
    )
    .expect("parses");
    assert_eq!(
        spec,
        OpSpec::Reduce(ReduceSpec {
            input: Source::file("x.npy"),
            output: "m.npy".into(),
            reduce: "mean".into(),
            ddof: 0,
            axis: Some(Axes::One(0)),
            keepdims: false,
            dtype: None,
            q: None,
            method: None,
        })
    );
    let raw = OpSpec::Stencil(StencilSpec {
        input: Source {
            path: "img.raw".into(),
            raw: Some(RawLayout {
                shape: vec![3, 4],
                dtype: DType::U16,
                offset: 0,
            }),
            rows: None,
            nodata: None,
            window: None,
        },
        output: "g.tif".into(),
        filter: "gaussian:sigma=2".into(),
        boundary: "reflect".into(),
        dtype: Some(DType::F32),
    });
    let text = serde_json::to_string(&raw).expect("serialises");
    assert!(text.contains(r#""dtype":"f32""#) && text.contains(r#""op":"stencil""#));
    assert_eq!(serde_json::from_str::<OpSpec>(&text).expect("back"), raw);
    // a misspelt field is an error, not a silent default
    let e = serde_json::from_str::<OpSpec>(
        r#"{"op": "cast", "input": {"path": "x"}, "output": "y", "dtyp": "f16"}"#,
    );
    assert!(e.is_err());
}

#[test]
fn job_keys_differ_by_parameter_and_tiles_do_not_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = dir.path().join("x.raw");
    std::fs::write(&x, [0u8; 16]).expect("write");
    let spec = |scale: f64| {
        OpSpec::Affine(AffineSpec {
            input: Source::file(&x),
            output: "y.npy".into(),
            scale,
            offset: 0.0,
            dtype: None,
            nodata: None,
            ignore_nodata: false,
        })
    };
    let a = spec(2.0).job_key().expect("key");
    assert_eq!(a, spec(2.0).job_key().expect("key"));
    assert_ne!(a, spec(3.0).job_key().expect("key"));
    let tiles = OpSpec::Tiles(TilesSpec {
        input: Source::file(&x),
        outdir: "p".into(),
        size: 4,
        overlap: 0,
        edge: "shift".into(),
        patch_format: "npy".into(),
    });
    assert_eq!(tiles.job_key().expect("none"), None);
}

#[test]
fn map_nodata_is_in_the_job_key_and_checked_before_a_split() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = dir.path().join("x.npy");
    let mut bytes = crate::format::npy::build_header(DType::U16, &[4, 2]);
    bytes.extend([0u8; 16]);
    std::fs::write(&x, bytes).expect("write");
    let spec = |nodata: Option<&str>| {
        OpSpec::Map(MapSpec {
            expr: "x + 1".into(),
            inputs: vec![("x".into(), Source::file(&x))],
            output: "y.npy".into(),
            dtype: Some(DType::U8),
            nodata: nodata.map(str::to_string),
            ignore_nodata: false,
            input_nodata: vec![],
        })
    };
    // written out even when false: a run from before masking has another key
    let text = serde_json::to_string(&spec(None)).expect("json");
    assert!(text.contains("\"ignore_nodata\":false"), "{text}");
    assert!(spec(Some("7")).output_layout().is_ok());
    let e = spec(Some("300"))
        .output_layout()
        .expect_err("u8 holds no 300");
    assert!(e.to_string().contains("does not fit the u8 output"), "{e}");
}

#[test]
fn every_name_of_the_vocabulary_is_an_op_tag_and_nothing_else_is() {
    for &name in OpSpec::NAMES {
        // missing fields, never an unknown variant
        let e = serde_json::from_str::<OpSpec>(&format!(r#"{{"op": "{name}"}}"#))
            .expect_err("fields are missing");
        assert!(e.to_string().contains("missing field"), "{name}: {e}");
    }
    let e = serde_json::from_str::<OpSpec>(r#"{"op": "paint"}"#).expect_err("no such op");
    assert!(e.to_string().contains("unknown variant"), "{e}");
    let spec: OpSpec = serde_json::from_str(
        r#"{"op": "transpose", "input": {"path": "x.npy"}, "output": "t.npy"}"#,
    )
    .expect("parses");
    assert_eq!(spec.name(), "transpose");
    assert_eq!(
        OpSpec::pipeline_keys("matmul"),
        Some(&["x", "w", "dtype"][..])
    );
    assert_eq!(OpSpec::pipeline_keys("tiles"), None);
    assert_eq!(OpSpec::pipeline_keys("paint"), None);
}

/// What a spec serialises to is what `--resume` matches an interrupted run by (the
/// journal's job key): the defaults pipelines brought to `affine` and `reduce` are read
/// when a key is missing, and never change what is written.
#[test]
fn specs_serialise_as_the_journal_keys_of_earlier_runs() {
    let affine: OpSpec =
        serde_json::from_str(r#"{"op": "affine", "input": {"path": "x.npy"}, "output": "y.npy"}"#)
            .expect("defaults");
    assert_eq!(
        serde_json::to_string(&affine).expect("json"),
        r#"{"op":"affine","input":{"path":"x.npy"},"output":"y.npy","scale":1.0,"offset":0.0,"dtype":null,"ignore_nodata":false}"#
    );
    let reduce: OpSpec = serde_json::from_str(
        r#"{"op": "reduce", "input": {"path": "x.npy"}, "output": "m.npy", "axis": 0}"#,
    )
    .expect("defaults");
    assert_eq!(
        serde_json::to_string(&reduce).expect("json"),
        r#"{"op":"reduce","input":{"path":"x.npy"},"output":"m.npy","reduce":"sum","ddof":0,"axis":0,"dtype":null}"#
    );
}
