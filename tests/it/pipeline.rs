//! `tilestream run pipeline.toml`, driven through the command line as a user would:
//! valid files give the same bytes as the equivalent subcommands, invalid ones one line
//! naming the line of the file, exit code 2, and nothing written.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::Path;

use crate::common::{ok, run};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

const VALID: &str = r#"
memory = "16MiB"
[inputs]
x = "x.npy"
w = "w.npy"

[[steps]]
op = "map"
expr = "(x - 1) * 0.5"
out = "shifted"

[[steps]]
op = "map"
expr = "where(shifted > 0, sqrt(shifted), 0)"
out = "root"

[[steps]]
op = "cast"
input = "root"
dtype = "f16"
out = "root16"

[[steps]]
op = "standardize"
input = "x"
out = "z"

[[steps]]
op = "matmul"
x = "z"
w = "w"
out = "proj"

[[steps]]
op = "stencil"
input = "proj"
filter = "box:size=3"
boundary = "nearest"
out = "smooth"

[outputs]
root16 = "out/root16.npy"
smooth = "out/smooth.npy"
"#;

fn setup(dir: &Path) {
    ok(&[
        "gen",
        p(&dir.join("x.npy")),
        "--shape",
        "6000x300",
        "--memory",
        "8MiB",
    ]);
    ok(&[
        "gen",
        p(&dir.join("w.npy")),
        "--shape",
        "300x40",
        "--seed",
        "5",
    ]);
    std::fs::create_dir_all(dir.join("out")).unwrap();
}

#[test]
fn a_pipeline_equals_its_steps_run_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    let file = d.join("pipe.toml");
    std::fs::write(&file, VALID).unwrap();

    // dry run: every step planned, nothing written
    let plan = ok(&["run", p(&file), "--dry-run"]);
    assert!(
        plan.contains("step 1 (line 17)") && plan.contains("step 4"),
        "{plan}"
    );
    assert!(plan.contains("16.0 MiB budget"), "{plan}");
    assert!(!d.join("out/root16.npy").exists());

    ok(&["run", p(&file)]);
    // the same, step by step through the subcommands
    let s = |n: &str| d.join(n);
    ok(&[
        "map",
        "where((x - 1) * 0.5 > 0, sqrt((x - 1) * 0.5), 0)",
        p(&s("r16.npy")),
        "--in",
        &format!("x={}", p(&s("x.npy"))),
        "--dtype",
        "f16",
    ]);
    ok(&["standardize", p(&s("x.npy")), p(&s("z.npy"))]);
    ok(&["matmul", p(&s("z.npy")), p(&s("w.npy")), p(&s("proj.npy"))]);
    ok(&[
        "stencil",
        p(&s("proj.npy")),
        p(&s("smooth.npy")),
        "--filter",
        "box:size=3",
        "--boundary",
        "nearest",
    ]);
    let same = |a: &str, b: &str| std::fs::read(s(a)).unwrap() == std::fs::read(s(b)).unwrap();
    assert!(
        same("out/root16.npy", "r16.npy"),
        "fused map + cast differs"
    );
    assert!(
        same("out/smooth.npy", "smooth.npy"),
        "standardize/matmul/stencil differ"
    );
    // the intermediate directory is gone
    let left: Vec<_> = std::fs::read_dir(d.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn invalid_pipelines_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    let cases: [(&str, &str, &str); 9] = [
        // (replace, with, expected in the error)
        (
            "out = \"shifted\"",
            "out = \"shifted\"\ncolour = 3",
            "line 11",
        ),
        (
            "expr = \"(x - 1) * 0.5\"",
            "expr = \"(q - 1) * 0.5\"",
            "`q`",
        ),
        ("op = \"cast\"", "op = \"paint\"", "unknown op `paint`"),
        ("w = \"w.npy\"", "w = \"x.npy\"", "line 28"),
        ("x = \"x.npy\"", "x = \"missing.npy\"", "does not exist"),
        ("memory = \"16MiB\"", "memory = \"20KiB\"", "too small"),
        ("filter = \"box:size=3\"", "filter = \"blur\"", "line 34"),
        ("[[steps]]\nop = \"map\"", "[[steps]\nop = \"map\"", "line"),
        // a Python function: only the Python package can call it
        (
            "op = \"stencil\"\ninput = \"proj\"\nfilter = \"box:size=3\"",
            "op = \"function\"\ninput = \"proj\"\nfunction = \"filters:smooth\"\nhalo = 1",
            "function = \"filters:smooth\" names a Python function: run this pipeline from \
             Python (tilestream.run)",
        ),
    ];
    for (from, to, want) in cases {
        let text = VALID.replacen(from, to, 1);
        assert_ne!(text, VALID, "{from}");
        let file = d.join("bad.toml");
        std::fs::write(&file, &text).unwrap();
        for extra in [&["--dry-run"][..], &[][..]] {
            let mut args = vec!["run", p(&file)];
            args.extend_from_slice(extra);
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{to}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(want), "{to}: expected `{want}` in: {err}");
            assert!(err.contains("bad.toml"), "{err}");
        }
        assert!(
            !d.join("out/root16.npy").exists(),
            "{to}: an output was written"
        );
        let stray = std::fs::read_dir(d.join("out")).unwrap().count();
        assert_eq!(stray, 0, "{to}: left files behind");
    }
}

#[test]
fn help_texts_have_examples() {
    let top = ok(&["--help"]);
    assert!(
        top.contains("Examples:") && top.contains("Exit codes"),
        "{top}"
    );
    for sub in [
        "reduce",
        "affine",
        "map",
        "matmul",
        "standardize",
        "cast",
        "stencil",
        "transpose",
        "tiles",
        "gen",
        "run",
        "info",
        "plan",
    ] {
        let h = ok(&[sub, "--help"]);
        assert!(h.contains("Example"), "`{sub} --help` has no example");
    }
}

/// A dry run plans each step that writes an output with that output, as the run and
/// `tilestream plan` of the same subcommand do: the room for encoding a GeoTIFF as it is
/// written (a filter's boxes cut along its tiles) and a COG's overviews.
#[test]
fn a_dry_run_plans_steps_with_their_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "700x900",
        "--dtype",
        "f32",
    ]);
    std::fs::create_dir_all(d.join("out")).unwrap();
    let file = d.join("pipe.toml");
    std::fs::write(
        &file,
        r#"
memory = "8MiB"
[inputs]
x = "x.npy"

[[steps]]
op = "stencil"
input = "x"
filter = "gaussian:sigma=1"
out = "blur"

[[steps]]
op = "map"
expr = "x * 2"
dtype = "f32"
out = "twice"

[outputs]
blur = "out/blur.tif"
twice = "out/twice.tif"
"#,
    )
    .unwrap();
    let plan = ok(&["run", p(&file), "--dry-run", "--cog", "--tiff-tile", "128"]);
    let x = d.join("x.npy");
    let (blur, twice) = (d.join("out/blur.tif"), d.join("out/twice.tif"));
    let common = ["--memory", "8MiB", "--cog", "--tiff-tile", "128"];
    let mut stencil = vec![
        "plan",
        "stencil",
        p(&x),
        p(&blur),
        "--filter",
        "gaussian:sigma=1",
    ];
    stencil.extend(common);
    let xin = format!("x={}", p(&x));
    let mut map = vec![
        "plan",
        "map",
        "x * 2",
        p(&twice),
        "--in",
        &xin,
        "--dtype",
        "f32",
    ];
    map.extend(common);
    for (sub, says) in [
        (stencil, "boxes cut along them"),
        (map, "encoded as it is written"),
    ] {
        let want = ok(&sub);
        let want = want.trim_end();
        assert!(
            want.contains(says) && want.contains("after the run:  COG"),
            "{want}"
        );
        assert!(plan.contains(want), "the dry run:\n{plan}\nlacks:\n{want}");
    }
    assert!(!blur.exists() && !twice.exists());
}

/// A dry run plans a `map` step whose flat plan cannot encode its GeoTIFF output as it
/// writes it as the run does: in boxes along the output's tiles (what `tilestream plan`
/// shows); below a box of one tile it refuses, as the run does, and nothing is written.
#[test]
fn a_dry_run_plans_a_step_below_a_row_of_tiles_as_the_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&["gen", p(&d.join("x.npy")), "--shape", "700x900"]);
    std::fs::create_dir_all(d.join("out")).unwrap();
    let file = d.join("pipe.toml");
    let pipe = |memory: &str| {
        std::fs::write(
            &file,
            format!(
                "memory = \"{memory}\"\n[inputs]\nx = \"x.npy\"\n\n[[steps]]\nop = \"map\"\n\
                 expr = \"x * 2\"\ndtype = \"f32\"\nout = \"twice\"\n\n[outputs]\n\
                 twice = \"out/twice.tif\"\n"
            ),
        )
        .unwrap();
    };
    // 512 KiB: three quarters do not hold a row of 128x128 tiles (450 KiB) and one in
    // flight (128 KiB)
    pipe("512KiB");
    let plan = ok(&["run", p(&file), "--dry-run", "--tiff-tile", "128"]);
    let xin = format!("x={}", p(&d.join("x.npy")));
    let twice = d.join("out/twice.tif");
    let want = ok(&[
        "plan",
        "map",
        "x * 2",
        p(&twice),
        "--in",
        &xin,
        "--dtype",
        "f32",
        "--memory",
        "512KiB",
        "--tiff-tile",
        "128",
    ]);
    let want = want.trim_end();
    assert!(
        want.contains("in boxes along the output's chunks"),
        "{want}"
    );
    assert!(plan.contains(want), "the dry run:\n{plan}\nlacks:\n{want}");
    // 128 KiB: not even a box one tile wide with a tile in flight
    pipe("128KiB");
    for dry in [true, false] {
        let mut args = vec!["run", p(&file), "--tiff-tile", "128"];
        if dry {
            args.push("--dry-run");
        }
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("too small") && err.contains("twice"), "{err}");
    }
    assert!(!twice.exists());
    assert_eq!(std::fs::read_dir(d.join("out")).unwrap().count(), 0);
}

/// A u16 `.npy` (`x.npy`) of `h x w` values from 5 to 14, about one in 10 of them 9, and
/// `scene.tif`, a GeoTIFF of it whose nodata value is 9: the values and `x=<the .npy>`.
fn nodata_scene(d: &Path, h: usize, w: usize) -> (Vec<u16>, String) {
    let x: Vec<u16> = (0..h * w).map(|i| (i * 7 % 10 + 5) as u16).collect();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    crate::common::write_npy(&d.join("x.npy"), tilestream::DType::U16, &[h, w], &bytes);
    let xin = format!("x={}", p(&d.join("x.npy")));
    let scene = d.join("scene.tif");
    ok(&[
        "map",
        "x",
        p(&scene),
        "--in",
        &xin,
        "--dtype",
        "u16",
        "--nodata",
        "9",
    ]);
    (x, xin)
}

#[test]
fn pipeline_steps_mask_the_pixels_where_an_input_is_nodata() {
    use crate::common::read_npy_data;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a u16 GeoTIFF whose nodata value is 9, which about one pixel in 10 has
    let (h, w) = (40, 50);
    let (x, _) = nodata_scene(d, h, w);
    assert!(x.contains(&9) && x.iter().any(|&v| v != 9));
    let text = r#"
[inputs]
s = "scene.tif"

[[steps]]
op = "map"
expr = "s * 2"
out = "a"

[[steps]]
op = "map"
expr = "a + 1"
out = "b"

[[steps]]
op = "affine"
input = "s"
scale = 3
dtype = "i32"
nodata = -5
out = "c"

[[steps]]
op = "map"
expr = "s - 1"
dtype = "f32"
ignore_nodata = true
out = "e"

[outputs]
b = "b.npy"
c = "c.npy"
e = "e.npy"
"#;
    let file = d.join("nodata.toml");
    std::fs::write(&file, text).unwrap();
    ok(&["run", p(&file)]);
    let f64s = |b: Vec<u8>| -> Vec<f64> {
        b.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    // fused steps: NaN where s is nodata (the default dtype of a u16 input is f64)
    let b = f64s(read_npy_data(&d.join("b.npy")));
    for (i, (&got, &v)) in b.iter().zip(&x).enumerate() {
        let want = f64::from(v) * 2.0 + 1.0;
        assert!(
            if v == 9 {
                got.is_nan()
            } else {
                got.to_bits() == want.to_bits()
            },
            "b[{i}] = {got} from {v}"
        );
    }
    // a step's own nodata value
    let c: Vec<i32> = read_npy_data(&d.join("c.npy"))
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<i32> = x
        .iter()
        .map(|&v| if v == 9 { -5 } else { i32::from(v) * 3 })
        .collect();
    assert_eq!(c, want);
    // ignore_nodata: computed like any other pixel
    let e: Vec<f32> = read_npy_data(&d.join("e.npy"))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = x.iter().map(|&v| f32::from(v) - 1.0).collect();
    assert_eq!(e, want);

    // the keys apply to elementwise steps only, and values are checked before anything runs
    for (from, to, says) in [
        (
            "[outputs]",
            "[[steps]]\nop = \"reduce\"\ninput = \"s\"\nnodata = 0\nout = \"r\"\n\n[outputs]",
            "`nodata` does not apply to reduce",
        ),
        (
            "nodata = -5",
            "nodata = 1e10",
            "nodata 10000000000 does not fit the i32 output",
        ),
        (
            "nodata = -5",
            "nodata = \"none\"",
            "nodata 'none' is not a number",
        ),
    ] {
        let bad = text.replacen(from, to, 1);
        assert_ne!(bad, text);
        std::fs::write(&file, &bad).unwrap();
        std::fs::remove_file(d.join("c.npy")).unwrap();
        for extra in [&["--dry-run"][..], &[][..]] {
            let mut args = vec!["run", p(&file)];
            args.extend_from_slice(extra);
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{to}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(says), "{to}: expected `{says}` in: {err}");
        }
        assert!(!d.join("c.npy").exists(), "{to}: an output was written");
        std::fs::write(d.join("c.npy"), b"").unwrap();
    }
}

#[test]
fn affine_masks_nodata_pixels_and_rounds_once_on_every_path() {
    use crate::common::{Lcg, read_npy_data, write_npy};
    use tilestream::DType;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // an f64 GeoTIFF whose nodata value is -1, which one value in 8 is
    let (h, w) = (60, 70);
    let mut rng = Lcg(5);
    let x: Vec<f64> = (0..h * w)
        .map(|i| {
            if i % 8 == 3 {
                -1.0
            } else {
                rng.f64() * 1e3 - 500.0
            }
        })
        .collect();
    write_npy(
        &d.join("x.npy"),
        DType::F64,
        &[h, w],
        bytemuck::cast_slice(&x),
    );
    let scene = d.join("scene.tif");
    let xin = format!("x={}", p(&d.join("x.npy")));
    ok(&["map", "x", p(&scene), "--in", &xin, "--nodata", "-1"]);
    let (scale, offset) = (0.37, 1.0 / 3.0);
    let (s, o) = (format!("{scale:?}"), format!("{offset:?}"));
    let affine = |out: &str, extra: &[&str]| -> Vec<f64> {
        let mut args = vec!["affine", p(&scene), out, "--scale", &s, "--offset", &o];
        args.extend(extra);
        ok(&args);
        bytemuck::pod_collect_to_vec(&read_npy_data(Path::new(out)))
    };
    let masked_out = d.join("masked.npy");
    let masked = affine(p(&masked_out), &[]);
    let kernel = affine(p(&d.join("kernel.npy")), &["--ignore-nodata"]);
    let mut rounded_twice = 0;
    for (i, &v) in x.iter().enumerate() {
        let once = v.mul_add(scale, offset);
        assert_eq!(kernel[i].to_bits(), once.to_bits(), "kernel pixel {i}");
        if i % 8 == 3 {
            assert!(masked[i].is_nan(), "masked pixel {i}: {}", masked[i]);
        } else {
            // the masked path computes the other pixels as the kernel does
            assert_eq!(masked[i].to_bits(), once.to_bits(), "pixel {i}");
            rounded_twice += usize::from((v * scale + offset).to_bits() != once.to_bits());
        }
    }
    // x * scale + offset rounded twice differs on some pixels: the check above can fail
    assert!(rounded_twice > 0);
    // a pipeline's affine step fuses into the same arithmetic
    let text = format!(
        "[inputs]\ns = \"scene.tif\"\n\n[[steps]]\nop = \"affine\"\ninput = \"s\"\n\
         scale = {s}\noffset = {o}\nout = \"a\"\n\n[[steps]]\nop = \"map\"\nexpr = \"a * 1\"\n\
         out = \"b\"\n\n[outputs]\nb = \"b.npy\"\n"
    );
    std::fs::write(d.join("affine.toml"), text).unwrap();
    ok(&["run", p(&d.join("affine.toml"))]);
    assert_eq!(read_npy_data(&d.join("b.npy")), read_npy_data(&masked_out));
}

#[test]
fn steps_read_earlier_values_with_the_nodata_they_were_given() {
    use crate::common::{read_npy_data, write_npy};
    use tilestream::DType;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a .npy whose -9999-style convention is 9, and a GeoTIFF of it tagged so
    let (h, w) = (30, 40);
    let (x, xin) = nodata_scene(d, h, w);
    let f64s =
        |name: &str| -> Vec<f64> { bytemuck::pod_collect_to_vec(&read_npy_data(&d.join(name))) };
    let nan_or = |got: &[f64], want: &dyn Fn(f64) -> f64, what: &str| {
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let ok = if v == 9 {
                g.is_nan()
            } else {
                g.to_bits() == want(f64::from(v)).to_bits()
            };
            assert!(ok, "{what}[{i}] = {g} from {v}");
        }
    };

    // --in-nodata: a .npy input's nodata value on the command line
    ok(&[
        "map",
        "x + 1",
        p(&d.join("m.npy")),
        "--in",
        &xin,
        "--in-nodata",
        "x=9",
    ]);
    nan_or(&f64s("m.npy"), &|v| v + 1.0, "--in-nodata");
    // 64-bit integers: a nodata value 2^53 or more from 0 cannot mask in f64 arithmetic,
    // but can be written as a tag, digit for digit
    let big: Vec<u8> = [1i64, 2, 3, 4]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_npy(&d.join("big.npy"), DType::I64, &[2, 2], &big);
    let bin = format!("b={}", p(&d.join("big.npy")));
    let o = run(&[
        "map",
        "b",
        p(&d.join("bad.npy")),
        "--in",
        &bin,
        "--in-nodata",
        "b=-9007199254740992",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("2^53 or more from 0, which f64 arithmetic"),
        "{err}"
    );
    let tagged = d.join("tagged.tif");
    ok(&[
        "map",
        "b",
        p(&tagged),
        "--in",
        &bin,
        "--dtype",
        "u64",
        "--nodata",
        "18446744073709551615",
    ]);
    let t = tilestream::TensorFile::open(&tagged).unwrap();
    assert_eq!(
        t.georef().and_then(|g| g.nodata.as_deref()),
        Some("18446744073709551615")
    );
    for (flags, says) in [
        (&["x=1", "x=2"][..], "nodata given twice for input 'x'"),
        (&["y=9"][..], "no input is named y (inputs: x)"),
        (
            &["x=-1"][..],
            "input x is u16, which holds no nodata value '-1'",
        ),
        (&["x"][..], "expected NAME=VALUE"),
    ] {
        let out = d.join("bad.npy");
        let mut args = vec!["map", "x + 1", p(&out), "--in", &xin];
        for f in flags {
            args.extend(["--in-nodata", f]);
        }
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{flags:?}: {err}"
        );
    }

    let pipeline = |text: &str, dry: bool| {
        let file = d.join("p.toml");
        std::fs::write(&file, text).unwrap();
        let mut args = vec!["run", p(&file)];
        if dry {
            args.push("--dry-run");
        }
        run(&args)
    };
    // a step kept with its own nodata value (-5, in an i32 .npy intermediate): the step
    // after it masks those pixels, as it would the scene's
    // a step with ignore_nodata is not fused with the default step before it, which
    // masks its own pixels first
    let text = r#"
[inputs]
s = "scene.tif"

[[steps]]
op = "affine"
input = "s"
scale = 3
dtype = "i32"
nodata = -5
out = "c"

[[steps]]
op = "map"
expr = "c + 1"
out = "d"

[[steps]]
op = "map"
expr = "s * 2"
out = "e"

[[steps]]
op = "map"
expr = "e + 1"
ignore_nodata = true
out = "f"

[[steps]]
op = "transpose"
input = "c"
out = "t"

[[steps]]
op = "map"
expr = "t + 1"
out = "u"

[outputs]
d = "d.npy"
f = "f.npy"
u = "u.npy"
"#;
    let o = pipeline(text, false);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    nan_or(&f64s("d.npy"), &|v| 3.0 * v + 1.0, "d");
    nan_or(&f64s("f.npy"), &|v| 2.0 * v + 1.0, "f");
    // a transpose moves the nodata pixels of the value it reads, and keeps its value
    let u = f64s("u.npy");
    let back: Vec<f64> = (0..h * w).map(|k| u[(k % w) * h + k / w]).collect();
    nan_or(&back, &|v| 3.0 * v + 1.0, "u transposed back");

    // a GeoTIFF output read back by a later step: its NaN nodata is known to the dry run,
    // which refuses an integer step with no value to give those pixels, as the run does
    let text = r#"
[inputs]
s = "scene.tif"

[[steps]]
op = "map"
expr = "s * 0.5"
dtype = "f32"
out = "a"

[[steps]]
op = "map"
expr = "a > 3"
dtype = "u8"
out = "b"

[outputs]
a = "a.tif"
b = "b.npy"
"#;
    for dry in [true, false] {
        let o = pipeline(text, dry);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "dry {dry}: {err}");
        assert!(
            err.contains("(a nan) take the output's nodata value, and a u8 output")
                && err.trim().lines().count() == 1,
            "dry {dry}: {err}"
        );
        assert!(!d.join("a.tif").exists() && !d.join("b.npy").exists());
    }
    let o = pipeline(
        &text.replace("dtype = \"u8\"", "dtype = \"u8\"\nnodata = 255"),
        false,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = read_npy_data(&d.join("b.npy"));
    let want: Vec<u8> = x
        .iter()
        .map(|&v| {
            if v == 9 {
                255
            } else {
                u8::from(f64::from(v) * 0.5 > 3.0)
            }
        })
        .collect();
    assert_eq!(b, want);
}

/// A chain of 200 affine steps fuses into passes no deeper than the expression parser
/// takes, instead of being refused for an expression nobody wrote; the result is the
/// chain's, computed in f64 as fused steps carry it.
#[test]
fn a_long_chain_of_steps_runs_in_fused_passes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "30x20",
        "--seed",
        "1",
    ]);
    let mut toml = String::from("[inputs]\na0 = \"x.npy\"\n");
    for i in 1..=200 {
        toml.push_str(&format!(
            "\n[[steps]]\nop = \"affine\"\ninput = \"a{}\"\nscale = 1.0\noffset = 0.5\nout = \"a{i}\"\n",
            i - 1
        ));
    }
    toml.push_str("\n[outputs]\na200 = \"chain.npy\"\n");
    std::fs::write(d.join("chain.toml"), toml).unwrap();
    ok(&["run", p(&d.join("chain.toml"))]);
    let got = crate::common::read_npy_data(&d.join("chain.npy"));
    let xs = crate::common::read_npy_data(&d.join("x.npy"));
    assert_eq!(got.len(), xs.len(), "an f32 output");
    for (a, b) in got.chunks_exact(4).zip(xs.chunks_exact(4)) {
        let a = f32::from_le_bytes(a.try_into().unwrap());
        let b = f32::from_le_bytes(b.try_into().unwrap());
        #[allow(clippy::cast_possible_truncation)]
        let want = (f64::from(b) + 100.0) as f32;
        assert_eq!(a.to_bits(), want.to_bits(), "{a} vs {want}");
    }
}

/// `clip` is a pipeline step because its operation says what expression it is: fused
/// with the step after it, the result equals the subcommands run one by one (`clip`,
/// then `affine` in f64 and cast once), and a key of the wrong type names its line.
#[test]
fn clip_steps_fuse_like_every_elementwise_operation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = d.join("x.npy");
    ok(&[
        "gen",
        p(&x),
        "--shape",
        "40x30",
        "--seed",
        "3",
        "--dtype",
        "f64",
    ]);
    let file = d.join("clip.toml");
    let text = "[inputs]\nx = \"x.npy\"\n\n[[steps]]\nop = \"clip\"\ninput = \"x\"\nlo = 0.0\n\
                hi = 0.5\nout = \"c\"\n\n[[steps]]\nop = \"affine\"\ninput = \"c\"\n\
                scale = 3.0\noffset = -1.0\ndtype = \"f32\"\nout = \"y\"\n\n[outputs]\n\
                y = \"y.npy\"\n";
    std::fs::write(&file, text).unwrap();
    let plan = ok(&["run", p(&file), "--dry-run"]);
    assert!(
        plan.contains("map 'fma((clip(x, 0.0, 0.5)), 3.0, -1.0)'"),
        "{plan}"
    );
    ok(&["run", p(&file)]);
    let (c, want) = (d.join("c.npy"), d.join("want.npy"));
    ok(&["clip", p(&x), p(&c), "--lo", "0", "--hi", "0.5"]);
    let args = [
        p(&c),
        p(&want),
        "--scale",
        "3",
        "--offset",
        "-1",
        "--dtype",
        "f32",
    ];
    ok(&[&["affine"][..], &args[..]].concat());
    let got = crate::common::read_npy_data(&d.join("y.npy"));
    assert_eq!(got, crate::common::read_npy_data(&want));
    let xs = crate::common::read_npy_data(&x);
    assert!(got.chunks_exact(4).zip(xs.chunks_exact(8)).any(|(g, v)| {
        let v = f64::from_le_bytes(v.try_into().unwrap());
        v > 0.5 && f32::from_le_bytes(g.try_into().unwrap()).to_bits() == 0.5f32.to_bits()
    }));
    std::fs::write(&file, text.replacen("hi = 0.5", "hi = \"high\"", 1)).unwrap();
    let o = run(&["run", p(&file), "--dry-run"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("clip.toml line 4") && err.contains("hi"),
        "{err}"
    );
}

/// Complex values flow through fused steps: a chain long enough that fusing it writes
/// values out along the way writes them as complex128 (what the fused evaluation
/// carries), and the result is the chain's, computed as one fused evaluation would; a
/// complex map over a real GeoTIFF with nodata puts NaN + 0j where it is nodata.
#[test]
fn complex_values_flow_through_fused_steps_and_nodata() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // z: complex128 values (k, -k / 2) for k = 0..600
    let z: Vec<f64> = (0..600)
        .flat_map(|k| [f64::from(k), -f64::from(k) / 2.0])
        .collect();
    crate::common::write_npy(
        &d.join("z.npy"),
        tilestream::DType::C128,
        &[20, 30],
        bytemuck::cast_slice(&z),
    );
    // each step adds 1j to the previous value: a0 + 150j after 150 steps, each of which
    // repeats its input twice so that fusing doubles the expression and writes values out
    let mut toml = String::from("[inputs]\na0 = \"z.npy\"\n");
    for i in 1..=150 {
        toml.push_str(&format!(
            "\n[[steps]]\nop = \"map\"\nexpr = \"(a{0} + a{0}) / 2 + 1j\"\nout = \"a{i}\"\n",
            i - 1
        ));
    }
    toml.push_str("\n[outputs]\na150 = \"chain.npy\"\n");
    std::fs::write(d.join("chain.toml"), &toml).unwrap();
    let plan = ok(&["run", p(&d.join("chain.toml")), "--dry-run"]);
    assert!(
        plan.matches("map '").count() > 1,
        "no value written out: {plan}"
    );
    ok(&["run", p(&d.join("chain.toml"))]);
    let out = d.join("chain.npy");
    assert_eq!(
        tilestream::TensorFile::open(&out).unwrap().dtype(),
        tilestream::DType::C128
    );
    let got: Vec<f64> = bytemuck::pod_collect_to_vec(&crate::common::read_npy_data(&out));
    for (k, g) in got.chunks_exact(2).enumerate() {
        // (a + a) / 2 is a exactly, for these parts
        assert_eq!(
            (g[0], g[1]),
            (k as f64, -(k as f64) / 2.0 + 150.0),
            "element {k}"
        );
    }
    // a real GeoTIFF with nodata 9 into a complex value: NaN + 0j at its nodata pixels
    let (x, _) = nodata_scene(d, 20, 30);
    let scene = format!("s={}", p(&d.join("scene.tif")));
    let c = d.join("c.npy");
    ok(&["map", "s * 1j + 1", p(&c), "--in", &scene]);
    assert_eq!(
        tilestream::TensorFile::open(&c).unwrap().dtype(),
        tilestream::DType::C128
    );
    let got: Vec<f64> = bytemuck::pod_collect_to_vec(&crate::common::read_npy_data(&c));
    for (k, g) in got.chunks_exact(2).enumerate() {
        if x[k] == 9 {
            assert!(g[0].is_nan() && g[1].to_bits() == 0, "element {k}: {g:?}");
        } else {
            assert_eq!((g[0], g[1]), (1.0, f64::from(x[k])), "element {k}");
        }
    }
}
