//! Fault injection for the crash tests: a run can be killed at exact points (after a
//! tile is journaled, after the flush, after the rename), from any layer that writes.

use std::sync::OnceLock;

/// Kills the process at once (SIGKILL) when the environment variable
/// `TILESTREAM_FAULT_KILL_AT` names `point`: the fault injection the crash tests use to
/// stop a run at exact places (after tile `written:P:I` of pass P, `synced`, `renamed`,
/// `dir-synced`, `replace-exchanged` and `replace-unlocked` in a Zarr store's
/// replacement). Unset, it
/// costs one cached lookup.
pub fn crash_point(point: impl FnOnce() -> String) {
    if armed(point) {
        // SAFETY: raising a signal on our own process has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// Whether [`crash_point`] will kill the process at `point`: a writer about to reach it
/// first settles what it has in flight (a streamed output's chunks being compressed), so
/// that a kill at a named point leaves a known state.
pub fn armed(point: impl FnOnce() -> String) -> bool {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    AT.get_or_init(|| std::env::var("TILESTREAM_FAULT_KILL_AT").ok())
        .as_ref()
        .is_some_and(|at| *at == point())
}
