//! Outputs written to an object store: a real S3 server (moto, checking signatures and
//! policies) receives every output format byte for byte as the same command writes it
//! locally; a killed run leaves no visible object, its multipart upload is cleaned by
//! `tilestream clean URL` and a Zarr store's chunks are taken up by `--resume`; refusals
//! on one line with nothing left in the bucket; no secret in any output or local file.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::Path;
use std::process::{Command, Output};

use super::common::{bin, python, write_npy};
use super::objects::{Server, moto_server, root};
use tilestream::DType;

/// The S3 server's user and where the test's local state goes.
struct S3 {
    py: std::ffi::OsString,
    endpoint: String,
    id: String,
    secret: String,
    state: std::path::PathBuf,
    /// Stopped when the test ends.
    _server: Server,
}

impl S3 {
    /// `tilestream` with the user's credentials and the test's state directory.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.args(args);
        self.env(&mut c);
        c.env("TILESTREAM_STATE_DIR", &self.state);
        c
    }

    fn env(&self, c: &mut Command) {
        c.env("AWS_ACCESS_KEY_ID", &self.id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ALLOW_HTTP", "true");
    }

    /// Runs `args`; asserts it passed and said no secret.
    fn ok(&self, args: &[&str]) -> Output {
        let o = self.cmd(args).output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(!out.contains(&self.secret) && !err.contains(&self.secret));
        o
    }

    /// `tests/s3_get.py` with `args`: its lines.
    fn get(&self, args: &[&str]) -> Vec<String> {
        let mut c = Command::new(&self.py);
        c.arg(root().join("tests/s3_get.py"))
            .arg(&self.endpoint)
            .args(args);
        self.env(&mut c);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The keys under `prefix` in bucket `data`.
    fn keys(&self, prefix: &str) -> Vec<String> {
        self.get(&["keys", "data", prefix])
    }

    /// The multipart uploads open in bucket `data`.
    fn uploads(&self) -> Vec<String> {
        self.get(&["uploads", "data"])
    }

    /// Files left in the state directory (empty directories do not count).
    fn state_files(&self) -> Vec<String> {
        fn walk(p: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    walk(&e.path(), out);
                } else {
                    out.push(e.path().display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.state, &mut out);
        out
    }
}

/// Every file under `p` (a file: itself) with its bytes, by path relative to `p`.
fn files(p: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, p: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(base, &e.unwrap().path(), out);
            }
        } else {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read(p).unwrap()));
        }
    }
    let mut out = Vec::new();
    walk(p, p, &mut out);
    out.sort();
    out
}

/// Starts the server and writes the input: 1500 x 1500 f32 (9 MB, two parts of a
/// multipart upload).
fn setup(dir: &Path) -> Option<S3> {
    let py = python("moto")?;
    let x = dir.join("x.npy");
    let data: Vec<u8> = (0..1500 * 1500)
        .flat_map(|i: u32| ((i % 4099) as f32 * 0.5).to_le_bytes())
        .collect();
    write_npy(&x, DType::F32, &[1500, 1500], &data);
    let server = moto_server(&py);
    let endpoint = format!("http://127.0.0.1:{}", server.port);
    let o = Command::new(&py)
        .arg(root().join("tests/s3_setup.py"))
        .arg(&endpoint)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let keys = String::from_utf8(o.stdout).unwrap();
    let (id, secret) = keys.trim().split_once(' ').unwrap();
    Some(S3 {
        py,
        endpoint,
        id: id.into(),
        secret: secret.into(),
        state: dir.join("state"),
        _server: server,
    })
}

/// `map x*2+1` of `x` into `out`, with `extra` arguments.
fn map_args<'a>(x: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["map", "--in", x, "x*2+1", out, "--memory", "8MiB"];
    a.extend_from_slice(extra);
    a
}

#[test]
fn every_output_format_is_written_to_s3_as_it_is_written_locally() {
    let dir = tempfile::tempdir().unwrap();
    let Some(s3) = setup(dir.path()) else {
        return;
    };
    let x = format!("x={}", dir.path().join("x.npy").display());
    let cases: [(&str, &[&str]); 6] = [
        ("o.npy", &[]),
        ("o.raw", &[]),
        ("o.tif", &["--tiff-compress", "deflate"]),
        ("c.tif", &["--cog", "--tiff-tile", "256"]),
        ("o.zarr", &[]),
        (
            "s.zarr",
            &["--zarr-chunks", "100x100", "--zarr-shard", "500x500"],
        ),
    ];
    for (name, extra) in cases {
        let local = dir.path().join(format!("local-{name}"));
        s3.ok(&map_args(&x, local.to_str().unwrap(), extra));
        let url = format!("s3://data/{name}");
        s3.ok(&map_args(&x, &url, extra));
        let got = dir.path().join(format!("got-{name}"));
        s3.get(&["get", "data", name, got.to_str().unwrap()]);
        // a file comes back as the one file in `got`
        let have = if local.is_dir() {
            files(&got)
        } else {
            files(&got.join(name))
        };
        let want = files(&local);
        assert!(!want.is_empty());
        assert_eq!(
            want.iter().map(|f| &f.0).collect::<Vec<_>>(),
            have.iter().map(|f| &f.0).collect::<Vec<_>>(),
            "{name}"
        );
        assert!(
            want == have,
            "{name}: the object differs from the local output"
        );
        if name != "o.raw" {
            // and read back through tilestream
            let back = dir.path().join(format!("back-{name}.npy"));
            s3.ok(&["convert", &url, back.to_str().unwrap()]);
        }
    }
    assert!(s3.uploads().is_empty(), "{:?}", s3.uploads());
    assert!(s3.state_files().is_empty(), "{:?}", s3.state_files());
    // an output over its input, an existing store, a prefix holding objects of someone
    // else's: refused before anything is written
    let foreign = dir.path().join("x.npy");
    s3.get(&["put", "data", "f.zarr/c/9/9", foreign.to_str().unwrap()]);
    for (args, fragment) in [
        (
            map_args("x=s3://data/o.npy", "s3://data/o.npy", &[]),
            "also an input",
        ),
        (map_args(&x, "s3://data/o.zarr", &[]), "already there"),
        (
            map_args(&x, "s3://data/f.zarr", &[]),
            "objects are already under this prefix",
        ),
    ] {
        let o = s3.cmd(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(fragment), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // a bucket the user may not write (or that is not there, which S3 answers alike to a
    // user who may reach only their own): one line, nothing left
    for (url, fragment) in [
        ("s3://secret/o.npy", "access denied"),
        ("s3://secret/o.zarr", "access denied"),
        ("s3://nobucket/o.npy", "access denied"),
    ] {
        let o = s3.cmd(&map_args(&x, url, &[])).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(fragment), "{url}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains(&s3.secret));
        // refused before the run: no report of a run
        assert!(o.stdout.is_empty(), "{url}: ran before failing");
    }
    assert!(s3.state_files().is_empty(), "{:?}", s3.state_files());
}

#[test]
fn killed_object_outputs_leave_nothing_visible_and_are_cleaned_or_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let Some(s3) = setup(dir.path()) else {
        return;
    };
    let x = format!("x={}", dir.path().join("x.npy").display());
    let killed = |args: &[&str], at: &str| {
        let o = s3
            .cmd(args)
            .env("TILESTREAM_FAULT_KILL_AT", at)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), None, "{at}: not killed");
    };

    // a file killed mid-upload: no object, its upload open until `clean` aborts it
    killed(&map_args(&x, "s3://data/k.npy", &[]), "upload-part:0");
    assert!(s3.keys("k.npy").is_empty());
    assert_eq!(s3.uploads().len(), 1, "{:?}", s3.uploads());
    let o = s3.ok(&["clean", "s3://data/k.npy"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("aborted the unfinished upload"), "{said}");
    assert!(s3.uploads().is_empty(), "{:?}", s3.uploads());
    assert!(s3.keys("k.npy").is_empty());
    assert!(s3.state_files().is_empty(), "{:?}", s3.state_files());

    // killed after the upload started, then run again: the new run aborts the old upload
    killed(&map_args(&x, "s3://data/k.npy", &[]), "upload-started");
    assert_eq!(s3.uploads().len(), 1);
    s3.ok(&map_args(&x, "s3://data/k.npy", &[]));
    assert!(s3.uploads().is_empty(), "{:?}", s3.uploads());
    assert_eq!(s3.keys("k.npy"), ["k.npy"]);

    // a Zarr store killed with some of its chunks uploaded: no zarr.json, so no array
    // is there; `--resume` keeps those chunks and finishes the store as a local run
    // writes it
    let local = dir.path().join("local.zarr");
    s3.ok(&map_args(&x, local.to_str().unwrap(), &[]));
    let resumable = map_args(&x, "s3://data/r.zarr", &["--resume", "--json"]);
    killed(&resumable, "written:0:15");
    let left = s3.keys("r.zarr/");
    assert!(!left.is_empty(), "no chunk was uploaded before the kill");
    assert!(!left.iter().any(|k| k.ends_with("zarr.json")), "{left:?}");
    let o = s3.ok(&resumable);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["resumed_tiles"].as_u64().unwrap() > 0, "{report}");
    let got = dir.path().join("got.zarr");
    s3.get(&["get", "data", "r.zarr", got.to_str().unwrap()]);
    assert!(files(&local) == files(&got), "the resumed store differs");

    // killed, then run again without --resume: the killed run's chunks go first
    killed(&map_args(&x, "s3://data/a.zarr", &[]), "written:0:15");
    s3.ok(&map_args(&x, "s3://data/a.zarr", &[]));
    let got = dir.path().join("got-a.zarr");
    s3.get(&["get", "data", "a.zarr", got.to_str().unwrap()]);
    assert!(files(&local) == files(&got), "the store run again differs");

    // killed again, then cleaned: its chunks are deleted, a finished store is not touched
    killed(&map_args(&x, "s3://data/q.zarr", &[]), "written:0:15");
    assert!(!s3.keys("q.zarr/").is_empty());
    let o = s3.ok(&["clean", "s3://data/q.zarr"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("chunk(s) of the unfinished store"), "{said}");
    assert!(s3.keys("q.zarr/").is_empty(), "{:?}", s3.keys("q.zarr/"));
    s3.ok(&["clean", "s3://data/r.zarr"]);
    assert_eq!(s3.keys("r.zarr/").len(), files(&local).len());
    assert!(s3.state_files().is_empty(), "{:?}", s3.state_files());
    // no secret in anything left on the local disk
    for f in files(dir.path()) {
        let text = String::from_utf8_lossy(&f.1);
        assert!(!text.contains(&s3.secret), "the secret in {}", f.0);
    }
}

#[test]
fn a_named_aws_profile_gives_the_credentials_region_and_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let Some(s3) = setup(dir.path()) else {
        return;
    };
    let (creds, conf) = (dir.path().join("credentials"), dir.path().join("config"));
    std::fs::write(
        &creds,
        format!(
            "[default]\naws_access_key_id = AKIANOTAKEY\naws_secret_access_key = nope\n\n\
             [tsprof]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            s3.id, s3.secret
        ),
    )
    .unwrap();
    std::fs::write(
        &conf,
        format!(
            "[profile tsprof]\nregion = us-east-1\nendpoint_url = {}\n",
            s3.endpoint
        ),
    )
    .unwrap();
    let x = format!("x={}", dir.path().join("x.npy").display());
    let with_profile = |profile: &str, args: &[&str]| {
        let mut c = bin();
        c.args(args);
        for v in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
            "AWS_ALLOW_HTTP",
        ] {
            c.env_remove(v);
        }
        c.env("AWS_PROFILE", profile)
            .env("AWS_SHARED_CREDENTIALS_FILE", &creds)
            .env("AWS_CONFIG_FILE", &conf)
            .env("TILESTREAM_STATE_DIR", &s3.state);
        c.output().unwrap()
    };
    let o = with_profile("tsprof", &map_args(&x, "s3://data/p.npy", &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains(&s3.secret), "{err}");
    assert_eq!(s3.keys("p.npy"), ["p.npy"]);
    let o = with_profile("tsprof", &["info", "s3://data/p.npy"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // a profile that is not there: one line, exit 2
    let o = with_profile("nope", &["info", "s3://data/p.npy"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no such profile"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
