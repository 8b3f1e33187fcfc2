//! GDAL's command-line tools as the oracle of the GeoTIFF tests: fixtures made by
//! `gdal_translate` from raw data the test writes, and GDAL's own reading of a file.
#![allow(clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_tilestream");

pub fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    assert!(
        found,
        "{name} not found: these tests make fixtures with GDAL's and libtiff's tools and \
         compare with GDAL; install gdal-bin and libtiff-tools (bash scripts/test does)"
    );
    Command::new(name)
}

pub fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `tilestream convert tif npy -m budget`, its output whatever the exit.
pub fn convert_at(tif: &Path, npy: &Path, budget: &str) -> std::process::Output {
    Command::new(BIN)
        .arg("convert")
        .arg(tif)
        .arg(npy)
        .args(["-m", budget, "--progress", "never"])
        .output()
        .expect("spawn")
}

pub fn ts(args: &[&str]) -> String {
    ok(Command::new(BIN).args(args).arg("--progress").arg("never"))
}

/// (numpy-style name, ENVI data type code, element size)
pub const TYPES: [(&str, u8, usize); 7] = [
    ("u8", 1, 1),
    ("u16", 12, 2),
    ("i16", 2, 2),
    ("u32", 13, 4),
    ("i32", 3, 4),
    ("f32", 4, 4),
    ("f64", 5, 8),
];

/// A deterministic band-sequential image of `bands x h x w` in `dtype` (varied values,
/// smooth enough that compression does something), as little-endian bytes.
pub fn pattern(dtype: &str, bands: usize, h: usize, w: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..bands {
        for y in 0..h {
            for x in 0..w {
                let v = ((x * 7 + y * 3 + b * 101) % 251) as i64 + ((x * y) % 13) as i64;
                let signed = v - 120;
                match dtype {
                    "u8" => out.push(v as u8),
                    "u16" => out.extend((v as u16 * 250).to_le_bytes()),
                    "i16" => out.extend((signed as i16 * 200).to_le_bytes()),
                    "u32" => out.extend((v as u32 * 100_000).to_le_bytes()),
                    "i32" => out.extend((signed as i32 * 100_000).to_le_bytes()),
                    "f32" => out.extend((signed as f32 * 0.37).to_le_bytes()),
                    "f64" => out.extend((signed as f64 * 1e-3 + 0.1).to_le_bytes()),
                    _ => unreachable!(),
                }
            }
        }
    }
    out
}

/// Writes `data` as an ENVI raw + header GDAL can read, returns the raw path.
pub fn envi(
    dir: &Path,
    name: &str,
    code: u8,
    bands: usize,
    h: usize,
    w: usize,
    data: &[u8],
) -> PathBuf {
    let raw = dir.join(format!("{name}.raw"));
    std::fs::write(&raw, data).expect("write raw");
    std::fs::write(
        dir.join(format!("{name}.hdr")),
        format!(
            "ENVI\nsamples = {w}\nlines = {h}\nbands = {bands}\nheader offset = 0\n\
             file type = ENVI Standard\ndata type = {code}\ninterleave = bsq\nbyte order = 0\n"
        ),
    )
    .expect("write hdr");
    raw
}

/// A georeferenced GeoTIFF made by `gdal_translate` from `raw` with creation options `co`.
pub fn gdal_tif(raw: &Path, tif: &Path, co: &[&str]) {
    let mut c = tool("gdal_translate");
    c.args(["-q", "-of", "GTiff", "-a_srs", "EPSG:32633"])
        .args([
            "-a_ullr",
            "500000",
            "4000000",
            "506000",
            "3995000",
            "-a_nodata",
            "0",
        ]);
    for o in co {
        c.arg("-co").arg(o);
    }
    ok(c.arg(raw).arg(tif));
}

/// GDAL's reading of `tif`, band-sequential little-endian bytes.
pub fn gdal_read(tif: &Path, dir: &Path) -> Vec<u8> {
    let out = dir.join(format!(
        "{}.gdal.raw",
        tif.file_stem().expect("stem").to_string_lossy()
    ));
    ok(tool("gdal_translate")
        .args(["-q", "-of", "ENVI", "-co", "INTERLEAVE=BSQ"])
        .arg(tif)
        .arg(&out));
    std::fs::read(&out).expect("read gdal output")
}

/// The data bytes of a `.npy` file (after its header).
pub fn npy_data(p: &Path) -> Vec<u8> {
    let b = std::fs::read(p).expect("read npy");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize + 10;
    b[hlen..].to_vec()
}

pub fn gdalinfo(p: &Path) -> serde_json::Value {
    let s = ok(tool("gdalinfo").arg("-json").arg(p));
    serde_json::from_str(&s).expect("gdalinfo json")
}

pub fn georef_of(p: &Path) -> (serde_json::Value, serde_json::Value, Vec<serde_json::Value>) {
    let j = gdalinfo(p);
    let nodata = j["bands"]
        .as_array()
        .expect("bands")
        .iter()
        .map(|b| b["noDataValue"].clone())
        .collect();
    (
        j["geoTransform"].clone(),
        j["coordinateSystem"]["wkt"].clone(),
        nodata,
    )
}

/// `bands x h x w` bytes: smooth gradients with hashed noise, so that every quantisation
/// step of a lossy codec and both chroma planes matter.
pub fn noisy_image(bands: usize, h: usize, w: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bands * h * w);
    for b in 0..bands {
        for y in 0..h {
            for x in 0..w {
                let smooth = (x * 255 / w + y * 97 / h + b * 61) % 256;
                let noise = (((x * 2_654_435_761) ^ (y * 40_503) ^ (b * 977)) >> 7) % 48;
                out.push(((smooth + noise) % 256) as u8);
            }
        }
    }
    out
}

/// tilestream's reading of `tif` at 1 MiB and 64 MiB equals GDAL's, byte for byte (NaN
/// included).
pub fn reads_as_gdal(tif: &Path, dir: &Path, what: &str) {
    reads_as_gdal_at(tif, dir, what, &["1MiB", "64MiB"]);
}

/// tilestream's reading of `tif` at each budget equals GDAL's, byte for byte.
pub fn reads_as_gdal_at(tif: &Path, dir: &Path, what: &str, budgets: &[&str]) {
    let gdal = gdal_read(tif, dir);
    for &budget in budgets {
        let npy = dir.join(format!("out_{budget}.npy"));
        let out = convert_at(tif, &npy, budget);
        assert!(
            out.status.success(),
            "{what} at {budget}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = npy_data(&npy);
        assert_eq!(got.len(), gdal.len(), "{what}: size");
        let diff = got.iter().zip(&gdal).filter(|(a, b)| a != b).count();
        assert_eq!(
            diff, 0,
            "{what} at {budget}: {diff} bytes differ from GDAL's"
        );
        std::fs::remove_file(&npy).expect("rm");
    }
}

/// `convert` of `tif` (with `envs` set) fails in one line containing `word`, exit 1
/// or 2, leaving no output.
pub fn refused(tif: &Path, dir: &Path, word: &str, envs: &[(&str, &str)]) {
    let npy = dir.join("refused.npy");
    let out = Command::new(BIN)
        .arg("convert")
        .arg(tif)
        .arg(&npy)
        .args(["--progress", "never"])
        .envs(envs.iter().copied())
        .output()
        .expect("spawn");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{word}: exit {:?}, stderr {err}",
        out.status
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(word),
        "the message does not say {word:?}: {err}"
    );
    assert!(!npy.exists(), "an output was left");
}
