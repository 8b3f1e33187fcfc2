//! Inputs in object stores: `http://` objects from a test server that misbehaves on
//! request (`tests/object_server.py`), and `s3://` objects from a real S3 server (moto,
//! checking signatures and policies) — every result equal, byte for byte, to the same
//! command on the local file; refusals on one line; no secret in any output.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{bin, ok, python, run};

/// A server process the test started, stopped when dropped.
pub(super) struct Server {
    child: Child,
    pub(super) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// GET of the plain HTTP server's own paths (`_stats`, `_reset`).
    fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "GET /{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }

    /// Data bytes the plain HTTP server sent since the last `_reset`.
    fn bytes_sent(&self) -> u64 {
        self.stat("bytes")
    }

    /// A figure of the plain HTTP server's `_stats` (`bytes`, `requests`).
    fn stat(&self, name: &str) -> u64 {
        let stats = self.get("_stats");
        let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {stats}"))
    }
}

pub(super) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The misbehaving HTTP server over `dir`.
fn http_server(py: &std::ffi::OsStr, dir: &Path) -> Server {
    let mut child = Command::new(py)
        .arg(root().join("tests/object_server.py"))
        .args(["--root", dir.to_str().unwrap(), "--latency-ms", "20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("server said {line:?}"));
    Server { child, port }
}

/// A port free now on 127.0.0.1.
pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A moto S3 server that checks signatures and policies (after the four requests
/// `tests/s3_setup.py` makes without them).
pub(super) fn moto_server(py: &std::ffi::OsStr) -> Server {
    let port = free_port();
    let child = Command::new(py)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .env("INITIAL_NO_AUTH_ACTION_COUNT", "4")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, port };
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "moto did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// Local inputs of every kind read from objects: `.npy`, raw, a tiled GeoTIFF and a COG,
/// `rows` x `cols` f32 in 64-pixel tiles, a Zarr store in chunks of 64 x 64 (zstd) and a
/// sharded one (shards of 128 x 128 holding chunks of 32 x 32), each missing a chunk or
/// a shard.
fn inputs(dir: &Path, rows: usize, cols: usize) -> Vec<(&'static str, Vec<String>)> {
    let x = dir.join("x.npy");
    let shape = format!("{rows}x{cols}");
    ok(&["gen", x.to_str().unwrap(), "--shape", &shape, "--seed", "7"]);
    for (name, extra) in [("x.tif", &[][..]), ("xc.tif", &["--cog"][..])] {
        let mut a = vec![
            "convert",
            x.to_str().unwrap(),
            "--tiff-tile",
            "64",
            "--memory",
            "4MiB",
        ];
        let out = dir.join(name);
        a.insert(2, out.to_str().unwrap());
        a.extend_from_slice(extra);
        ok(&a);
    }
    for (name, extra) in [
        ("x.zarr", &["--zarr-chunks", "64x64"][..]),
        (
            "xs.zarr",
            &["--zarr-chunks", "32x32", "--zarr-shard", "128x128"][..],
        ),
    ] {
        let out = dir.join(name);
        let mut a = vec![
            "convert",
            x.to_str().unwrap(),
            out.to_str().unwrap(),
            "--memory",
            "4MiB",
        ];
        a.extend_from_slice(extra);
        ok(&a);
    }
    // sparse stores: a missing chunk and a missing shard read as the fill value
    std::fs::remove_file(dir.join("x.zarr/c/1/1")).unwrap();
    std::fs::remove_file(dir.join("xs.zarr/c/1/0")).unwrap();
    let bytes = std::fs::read(&x).unwrap();
    std::fs::write(dir.join("x.raw"), &bytes[bytes.len() - rows * cols * 4..]).unwrap();
    let raw = vec![
        "--shape".to_string(),
        shape,
        "--in-dtype".into(),
        "f32".into(),
    ];
    vec![
        ("x.npy", vec![]),
        ("x.raw", raw),
        ("x.tif", vec![]),
        ("xc.tif", vec![]),
        ("x.zarr", vec![]),
        ("xs.zarr", vec![]),
    ]
}

/// Runs `op` on `input` (with `extra` arguments) into `out`; the run's stderr.
fn run_op(op: &[&str], input: &str, extra: &[String], out: &Path, memory: &str) -> String {
    let mut cmd = bin();
    cmd.arg(op[0])
        .arg(input)
        .arg(out)
        .args(&op[1..])
        .args(extra)
        .args(["--memory", memory]);
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{op:?} {input}: {err}");
    err
}

#[test]
fn http_objects_read_as_their_local_files_even_when_the_server_misbehaves() {
    let Some(py) = python("the standard library") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 300, 200);
    let server = http_server(&py, dir.path());
    let ops: [&[&str]; 2] = [&["convert"], &["reduce", "--op", "std", "--axis", "0"]];
    for (name, extra) in &files {
        for op in ops {
            let local = dir.path().join("local.npy");
            run_op(
                op,
                dir.path().join(name).to_str().unwrap(),
                extra,
                &local,
                "4MiB",
            );
            let want = std::fs::read(&local).unwrap();
            for mode in ["ok", "fail500", "short", "drop", "slow"] {
                let url = server.url(&format!("{mode}/{name}"));
                let got = dir.path().join("got.npy");
                run_op(op, &url, extra, &got, "4MiB");
                assert!(
                    std::fs::read(&got).unwrap() == want,
                    "{op:?} of {url} differs from the local file's"
                );
            }
        }
    }
    // a pipeline file naming an object among its inputs; an object as its output is refused
    let pipe = |input: &str, out: &str| {
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            format!(
                "memory = \"4MiB\"\n[inputs]\nx = \"{input}\"\n[[steps]]\nop = \"map\"\n\
                 expr = \"x * 2 + 1\"\nout = \"y\"\n[outputs]\ny = \"{out}\"\n"
            ),
        )
        .unwrap();
        run(&["run", f.to_str().unwrap()])
    };
    let o = pipe("x.npy", "local.npy");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = pipe(&server.url("drop/x.npy"), "got.npy");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (local, got) = (dir.path().join("local.npy"), dir.path().join("got.npy"));
    assert_eq!(std::fs::read(&local).unwrap(), std::fs::read(&got).unwrap());
    let o = pipe("x.npy", &server.url("ok/y.npy"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("objects over http(s) are read only"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    // a budget that holds a row of the file's tiles: each byte sent about once
    let big = dir.path().join("big");
    std::fs::create_dir(&big).unwrap();
    for (name, extra) in &inputs(&big, 1000, 600) {
        server.get("_reset");
        let got = dir.path().join("got.npy");
        run_op(
            &["convert"],
            &server.url(&format!("ok/big/{name}")),
            extra,
            &got,
            "32MiB",
        );
        let size = stored_bytes(&big.join(name));
        let sent = server.bytes_sent();
        assert!(
            sent <= size + size / 4,
            "{name}: {sent} bytes sent for a file of {size}"
        );
    }
}

/// A window of each object (`--window`) reads as the window of its local file, also
/// when the server misbehaves; a window of a `.npy` object fetches many rows' column
/// runs in one request when they lie close together, not a request a row.
#[test]
fn windows_of_objects_read_as_windows_of_their_local_files() {
    let Some(py) = python("the standard library") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 300, 200);
    let server = http_server(&py, dir.path());
    let window = ["--window".to_string(), "37:251,13:170".to_string()];
    for (name, extra) in &files {
        let extra: Vec<String> = extra.iter().chain(&window).cloned().collect();
        let local = dir.path().join("local.npy");
        run_op(
            &["convert"],
            dir.path().join(name).to_str().unwrap(),
            &extra,
            &local,
            "1MiB",
        );
        let want = std::fs::read(&local).unwrap();
        for mode in ["ok", "short", "drop"] {
            server.get("_reset");
            let url = server.url(&format!("{mode}/{name}"));
            let got = dir.path().join("got.npy");
            run_op(&["convert"], &url, &extra, &got, "1MiB");
            assert!(
                std::fs::read(&got).unwrap() == want,
                "the window of {url} differs from the local file's"
            );
            if mode == "ok" && *name == "x.npy" {
                // 214 rows, their runs 43 columns apart: a few requests, not 214
                let requests = server.stat("requests");
                assert!(requests < 30, "{requests} requests for a window of {name}");
            }
        }
    }
}

/// Bytes of a file, or of every file under a directory (a Zarr store).
fn stored_bytes(p: &Path) -> u64 {
    let m = std::fs::metadata(p).unwrap();
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| stored_bytes(&e.unwrap().path()))
        .sum()
}

/// The arguments of a column mean of `input` into `o`.
fn reduce<'a>(input: &'a str, o: &'a str) -> [&'a str; 7] {
    ["reduce", input, o, "--op", "mean", "--axis", "0"]
}

/// Asserts a one-line refusal with exit code `code` naming `fragment`, and no output.
fn refused(args: &[&str], code: i32, fragment: &str, out: &Path) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.contains(fragment),
        "{args:?}: expected '{fragment}' in {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(!out.exists(), "{args:?} left {}", out.display());
}

#[test]
fn object_refusals_are_one_line_and_write_nothing() {
    let Some(py) = python("the standard library") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", x.to_str().unwrap(), "--shape", "40x30"]);
    let server = http_server(&py, dir.path());
    let out = dir.path().join("out.npy");
    let o = out.to_str().unwrap();
    let missing = server.url("ok/none.npy");
    refused(&reduce(&missing, o), 1, "no such object", &out);
    let forbidden = server.url("forbidden/x.npy");
    refused(&reduce(&forbidden, o), 1, "access denied", &out);
    // a Zarr store: none there, one forbidden
    let z = dir.path().join("s.zarr");
    ok(&["convert", x.to_str().unwrap(), z.to_str().unwrap()]);
    refused(
        &reduce(&server.url("ok/none.zarr"), o),
        1,
        "zarr.json",
        &out,
    );
    refused(
        &reduce(&server.url("forbidden/s.zarr"), o),
        1,
        "access denied",
        &out,
    );
    // a pre-signed URL's query is a credential: never shown
    let signed = server.url("ok/none.npy?X-Amz-Signature=feedc0ffee");
    let e = run(&reduce(&signed, o));
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !err.contains("feedc0ffee") && err.contains("none.npy?…"),
        "{err}"
    );
    assert!(
        err.contains("pre-signed") && e.status.code() == Some(2),
        "{err}"
    );
    let userinfo = format!("http://user:hunter22@127.0.0.1:{}/ok/x.npy", server.port);
    let e = run(&reduce(&userinfo, o));
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        !err.contains("hunter22") && err.contains("credentials"),
        "{err}"
    );
    // formats read from local files only
    for name in ["d.h5", "d.nc", "i.jp2"] {
        refused(
            &reduce(&server.url(&format!("ok/{name}")), o),
            2,
            "local files only",
            &out,
        );
    }
    // an HTTP server takes no writes
    let url_out = server.url("ok/out.npy");
    let args = [
        "reduce",
        x.to_str().unwrap(),
        &url_out,
        "--op",
        "mean",
        "--axis",
        "0",
    ];
    let r = run(&args);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("objects over http(s) are read only"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!dir.path().join("out.npy").exists());
    // a server that is not there: an error after the retries, not a hang or a panic
    let port = free_port();
    let gone = format!("http://127.0.0.1:{port}/ok/x.npy");
    refused(&reduce(&gone, o), 1, "127.0.0.1", &out);
}

#[test]
fn s3_objects_read_through_a_real_s3_server() {
    let Some(py) = python("moto") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 300, 200);
    let server = moto_server(&py);
    let endpoint = format!("http://127.0.0.1:{}", server.port);
    let mut setup = Command::new(&py);
    setup.arg(root().join("tests/s3_setup.py")).arg(&endpoint);
    for (name, _) in &files {
        setup.arg(dir.path().join(name));
    }
    let o = setup.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let keys = String::from_utf8(o.stdout).unwrap();
    let (id, secret) = keys.trim().split_once(' ').unwrap();
    let s3 = |cmd: &mut Command| {
        cmd.env("AWS_ACCESS_KEY_ID", id)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ALLOW_HTTP", "true");
    };
    let op = ["reduce", "--op", "mean", "--axis", "0"];
    for (name, extra) in &files {
        let local = dir.path().join("local.npy");
        run_op(
            &op,
            dir.path().join(name).to_str().unwrap(),
            extra,
            &local,
            "4MiB",
        );
        let got = dir.path().join("got.npy");
        let mut cmd = bin();
        s3(&mut cmd);
        let url = format!("s3://data/{name}");
        let o = cmd
            .args([
                "reduce",
                &url,
                got.to_str().unwrap(),
                "--op",
                "mean",
                "--axis",
                "0",
            ])
            .args(extra)
            .args(["--memory", "4MiB", "--json", "--resume"])
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "{url}: {err}");
        assert!(!out.contains(secret) && !err.contains(secret), "{out}{err}");
        assert_eq!(
            std::fs::read(&got).unwrap(),
            std::fs::read(&local).unwrap(),
            "{url}"
        );
    }
    let out = dir.path().join("out.npy");
    let o = out.to_str().unwrap();
    // no such key, a bucket the user may not read, a wrong secret, an unknown key id
    let wrong = format!("{secret}x");
    let cases: [(&str, &str, &str, &str); 4] = [
        ("s3://data/none.npy", id, secret, "no such object"),
        ("s3://secret/x.npy", id, secret, "access denied"),
        ("s3://data/x.npy", id, &wrong, "access denied"),
        ("s3://data/x.npy", "AKIANOTAKEY", secret, "access denied"),
    ];
    for (url, key, sec, fragment) in cases {
        let r = bin()
            .args(["reduce", url, o, "--op", "mean", "--axis", "0"])
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", sec)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{url}: {err}");
        assert!(
            err.contains(fragment),
            "{url}: expected '{fragment}' in {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains(sec), "{url}: the secret in {err}");
        assert!(!out.exists());
    }
}
