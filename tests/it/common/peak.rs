//! Peak resident memory of one `tilestream` run, measured from outside and free of the
//! test process's own memory.
//!
//! Linux starts a new program's peak RSS at the peak of the address space it replaced
//! (`exec` records the old high-water mark), and a child spawned with `vfork` or
//! `posix_spawn` replaces its parent's address space. A child spawned straight from a test
//! process therefore reports at least that test process's peak, which can be hundreds of
//! MiB for reasons that have nothing to do with tilestream: a failing test's backtrace
//! loads the debug info, so one failure turned every memory check after it into a false
//! one. The test binary is therefore run again as a small relay (the `relay` test, called
//! with an environment variable set), which spawns the command from its own few-MiB
//! address space and reports the `wait4` figures of that child alone.
//!
//! Include with `#[path = "it/common/peak.rs"] mod peak;` (the relay's test name is
//! `peak::relay`).

#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the relay's environment: the arguments for `tilestream`, separated by `\x1f`.
const ARGS: &str = "TILESTREAM_TEST_RELAY_ARGS";
/// Set in the relay's environment: seconds after which the relay kills the command.
const TIMEOUT: &str = "TILESTREAM_TEST_RELAY_TIMEOUT";
/// Starts the relay's one line of results on its stdout.
const MARK: &str = "relay-result:";

/// One measured run: its exit code (`None` when a signal ended it), its stderr and the
/// peak resident set size of that process alone, in bytes.
pub struct Measured {
    /// The exit code, or `None` when a signal ended the run.
    pub code: Option<i32>,
    /// Everything the run wrote to stderr.
    pub stderr: String,
    /// Peak resident set size in bytes (`wait4`'s `ru_maxrss`).
    pub rss: u64,
}

/// Runs `tilestream args` (stdin and stdout null) through the relay and measures it.
///
/// # Panics
/// When the run is still going after `timeout` (it is killed first), or when the relay
/// itself fails.
pub fn measure(args: &[&str], timeout: Duration) -> Measured {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "peak::relay",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(ARGS, args.join("\x1f"))
        .env(TIMEOUT, timeout.as_secs_f64().to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix(MARK)) else {
        panic!("the relay for {args:?} reported nothing: stdout {stdout} stderr {stderr}");
    };
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 3, "relay line {line}");
    assert!(
        f[0] != "timeout",
        "tilestream {args:?} still running after {timeout:?}: {stderr}"
    );
    Measured {
        code: f[1].parse().ok(),
        // libtest's own lines go to stdout; stderr is the command's alone
        stderr,
        rss: f[2].parse().unwrap(),
    }
}

/// The relay: does its work only when called by [`measure`] (the environment variable is
/// set); run as an ordinary test, it checks that a measurement leaves out the memory of
/// the process that asks for it.
#[test]
fn relay() {
    let Ok(args) = std::env::var(ARGS) else {
        // touch 256 MiB here, then measure a run that needs a few MiB
        let big = vec![1u8; 256 << 20];
        let m = measure(&["--version"], Duration::from_secs(60));
        assert_eq!(m.code, Some(0), "{}", m.stderr);
        assert!(m.rss > 0);
        assert!(
            m.rss < 64 << 20,
            "`tilestream --version` measured at {} MiB next to a 256 MiB test process",
            m.rss >> 20
        );
        assert_eq!(
            big.iter().map(|&b| usize::from(b)).sum::<usize>(),
            256 << 20
        );
        return;
    };
    let timeout: f64 = std::env::var(TIMEOUT).unwrap().parse().unwrap();
    let args: Vec<&str> = if args.is_empty() {
        Vec::new()
    } else {
        args.split('\x1f').collect()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tilestream"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let start = Instant::now();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let verdict = loop {
        // SAFETY: wait4 on our own child with valid out-pointers; WNOHANG never blocks.
        let r = unsafe { libc::wait4(pid, &raw mut status, libc::WNOHANG, &raw mut ru) };
        if r == pid {
            break "done";
        }
        assert_eq!(r, 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed().as_secs_f64() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break "timeout";
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status).to_string()
    } else {
        "signal".to_string()
    };
    let rss = u64::try_from(ru.ru_maxrss).unwrap() * 1024;
    println!("{MARK} {verdict} {code} {rss}");
}
