//! The threads the formats read, decode and encode on in parallel when their caller is
//! not on a rayon pool already (the scheduler's read and write stages are plain threads).
//!
//! Why not rayon's global pool: a process forked after it used that pool (a `PyTorch`
//! `DataLoader` worker, `multiprocessing` with `fork`, a Dask nanny's fork) inherits the
//! pool's state but none of its threads, and its first parallel read waits forever on
//! workers that do not exist. This pool belongs to the process that made it: a child
//! that finds its parent's (another process id) makes its own.
//!
//! A caller already on a pool (the CPU backend's, a batch stream's) keeps running there,
//! as before: [`install`] and [`spawn`] only replace the global pool.

use std::sync::{Arc, Mutex, PoisonError};

use rayon::ThreadPool;

/// The process's pool and the process id it was made in.
static POOL: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);

/// This process's pool, made on first use (as many threads as rayon's global pool would
/// have: `RAYON_NUM_THREADS`, or one a core); `None` if its threads cannot start.
fn pool() -> Option<Arc<ThreadPool>> {
    let mut slot = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    match slot.as_ref() {
        Some((made_in, p)) if *made_in == pid => return Some(Arc::clone(p)),
        _ => {}
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|k| format!("tilestream-io-{k}"))
        .build()
        .ok()
        .map(Arc::new)?;
    if let Some((_, inherited)) = slot.replace((pid, Arc::clone(&pool))) {
        // a parent's pool: its threads are not in this process, so nothing may wait on
        // them (dropping it would only signal them); its memory is left as it is
        std::mem::forget(inherited);
    }
    Some(pool)
}

/// Runs `f` (which may use rayon's parallel iterators) on the current rayon pool when the
/// caller is on one, else on this process's pool.
pub(crate) fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match pool() {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Spawns `f` on the current rayon pool when the caller is on one, else on this
/// process's pool.
pub(crate) fn spawn(f: impl FnOnce() + Send + 'static) {
    if rayon::current_thread_index().is_some() {
        return rayon::spawn(f);
    }
    match pool() {
        Some(p) => p.spawn(f),
        None => rayon::spawn(f),
    }
}

/// Threads [`install`] runs on from here: the current pool's, or this process's pool's.
pub(crate) fn threads() -> usize {
    if rayon::current_thread_index().is_some() {
        return rayon::current_num_threads();
    }
    pool().map_or(1, |p| p.current_num_threads())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_process_pool_or_stays_on_the_callers() {
        use rayon::prelude::*;
        let names: Vec<String> = install(|| {
            (0..64)
                .into_par_iter()
                .map(|_| std::thread::current().name().unwrap_or("").to_string())
                .collect()
        });
        assert!(
            names.iter().all(|n| n.starts_with("tilestream-io-")),
            "{names:?}"
        );
        let own = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .thread_name(|k| format!("own-{k}"))
            .build()
            .unwrap();
        let inner =
            own.install(|| install(|| std::thread::current().name().unwrap_or("").to_string()));
        assert!(inner.starts_with("own-"), "{inner}");
        assert_eq!(own.install(threads), 2);
        let (tx, rx) = std::sync::mpsc::channel();
        spawn(move || {
            tx.send(std::thread::current().name().unwrap_or("").to_string())
                .unwrap();
        });
        assert!(rx.recv().unwrap().starts_with("tilestream-io-"));
    }
}
