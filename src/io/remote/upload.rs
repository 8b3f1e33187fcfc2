//! Outputs written to object stores (`s3://`, `gs://`, `az://`; `http(s)://` is read
//! only). An output is built as a local file is (the temporary file and journal of an
//! object output lie in its spool directory, `crate::io::own_files::spool_dir`), and
//! what puts a finished local output in place is, for an object, an upload:
//!
//! - a file (`.npy`, raw, GeoTIFF, COG): one `PUT` when it fits one part, else a
//!   multipart upload in parts of at least 8 MiB, as many in flight as the memory given
//!   holds (at most 8), completed only when every part is in, aborted on any failure,
//!   so that nothing appears at the key unless the whole file does. The upload's id is
//!   handed to an [`UploadRecord`] before the first part and taken back once completed
//!   or aborted (`crate::format::output::objects` keeps it in the spool, so that a
//!   killed run's upload is aborted by `tilestream clean URL`: a store cannot be asked
//!   which uploads are open through `object_store`);
//! - a Zarr store: each run of chunks as it is encoded ([`Bucket::put_many`]), then
//!   `zarr.json` last, so a reader never sees an array whose chunks are missing.
//!
//! Every request is retried as reads are (`object_store`'s backoff on 5xx and dropped
//! connections, then [`super::ATTEMPTS`] attempts); errors are one line, redacted.

/// The smallest part of a multipart upload: S3's minimum is 5 MiB; 8 MiB parts keep a
/// 6 GB output under 800 requests and S3's limit of 10,000 parts away until 80 GB
/// (larger files take larger parts).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub const MIN_PART: u64 = 8 << 20;

/// The most parts in flight at once.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
const MAX_IN_FLIGHT: u64 = 8;

/// The part size and parts in flight of an upload of `len` bytes within `memory`: parts of
/// [`MIN_PART`] or more (S3 takes at most 10,000), at least one in flight whatever the
/// memory (one part is within the fixed overhead the budget allows).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
#[must_use]
pub fn part_plan(len: u64, memory: u64) -> (u64, u64) {
    let part = MIN_PART.max(len.div_ceil(9_000).next_multiple_of(1 << 20));
    (part, (memory / part).clamp(1, MAX_IN_FLIGHT))
}

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// Where a multipart upload's id is kept while it is open, so that a killed run's upload
/// can be aborted later (a store cannot be asked which uploads are open through
/// `object_store`): `crate::format::output::objects` keeps it in a file of the spool.
pub trait UploadRecord {
    /// The upload `id` to `url` has started: keep it (an error aborts the upload).
    ///
    /// # Errors
    /// Whatever keeping it fails with.
    fn started(&mut self, url: &str, id: &str) -> crate::error::Result<()>;
    /// The upload is completed or aborted: forget it.
    fn ended(&mut self);
}

#[cfg(feature = "remote")]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt as _;
    use std::sync::Arc;

    use object_store::multipart::{MultipartStore, PartId};
    use object_store::{ObjectStore, PutPayload, path::Path as Key};

    use super::super::client::{
        Attempt, Built, build, io_error, parse, runtime, transient, with_attempts,
    };
    use super::{UploadRecord, part_plan};
    use crate::error::{Error, Result};

    /// A store that takes whole objects and multipart uploads.
    trait WriteStore: ObjectStore + MultipartStore {}
    impl<T: ObjectStore + MultipartStore> WriteStore for T {}

    /// Where an output goes: a key (a file) or a prefix (a Zarr store's keys below it)
    /// in a store that takes writes.
    pub struct Bucket {
        store: Arc<dyn WriteStore>,
        key: Key,
        url: String,
        shown: String,
    }

    impl std::fmt::Debug for Bucket {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Bucket")
                .field("url", &self.shown)
                .finish_non_exhaustive()
        }
    }

    /// Whether `r` failed because there is no such object (or upload).
    fn not_found<T>(r: &Result<T>) -> bool {
        matches!(r, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// An error of a write request, on one line.
    fn failed(what: &'static str, shown: &str, e: &object_store::Error) -> Error {
        Error::io(what, shown, io_error(e))
    }

    fn gave_up(what: &'static str, shown: &str, last: &str) -> Error {
        Error::io(
            what,
            shown,
            std::io::Error::other(format!(
                "failed {} times, last: {last}",
                super::super::ATTEMPTS
            )),
        )
    }

    /// Makes the request `once` with [`with_attempts`]: errors that may pass are tried
    /// again, the others are the answer.
    async fn attempts<T, F, Fut>(what: &'static str, shown: &str, mut once: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let got = with_attempts(shown, || {
            let f = once();
            async move {
                match f.await {
                    Ok(v) => Attempt::Done(Ok(v)),
                    Err(e) if transient(&e) => Attempt::Again(io_error(&e).to_string()),
                    Err(e) => Attempt::Done(Err(failed(what, shown, &e))),
                }
            }
        })
        .await;
        got.unwrap_or_else(|last| Err(gave_up(what, shown, &last)))
    }

    impl Bucket {
        /// The destination at `url`; no request is made.
        ///
        /// # Errors
        /// [`Error::Invalid`] for a URL that does not parse, carries credentials, or
        /// names an `http(s)://` server (read only).
        pub fn open(url: &str) -> Result<Self> {
            let (parsed, shown) = parse(url)?;
            let (built, key) = build(&parsed)?;
            let store: Arc<dyn WriteStore> = match built {
                Built::S3(s) => Arc::new(s),
                Built::Gcs(s) => Arc::new(s),
                Built::Azure(s) => Arc::new(s),
                Built::Http(_) => {
                    return Err(Error::invalid(format!(
                        "{shown}: objects over http(s) are read only; write outputs to \
                         s3://, gs://, az:// or a local path"
                    )));
                }
            };
            if key.as_ref().is_empty() {
                return Err(Error::invalid(format!(
                    "{shown}: names a bucket, not an object in it; give a key \
                     (s3://bucket/out.npy)"
                )));
            }
            Ok(Bucket {
                store,
                key,
                url: url.trim_end_matches('/').to_string(),
                shown,
            })
        }

        /// The key of `rel` below this one (`""`: this key).
        fn key_of(&self, rel: &str) -> Result<Key> {
            if rel.is_empty() {
                return Ok(self.key.clone());
            }
            Key::parse(format!("{}/{rel}", self.key)).map_err(|e| {
                Error::Internal(format!(
                    "object key {rel}: {}",
                    super::super::redacted(&e.to_string())
                ))
            })
        }

        /// The URL of `rel` below this key.
        #[must_use]
        pub fn url_of(&self, rel: &str) -> String {
            if rel.is_empty() {
                self.url.clone()
            } else {
                format!("{}/{rel}", self.url)
            }
        }

        /// The URL, as errors show it.
        #[must_use]
        pub fn shown(&self) -> &str {
            &self.shown
        }

        /// Whether an object is at `rel` below this key.
        ///
        /// # Errors
        /// [`Error::Io`] if the store cannot be asked (forbidden, unreachable).
        pub fn exists(&self, rel: &str) -> Result<bool> {
            let key = self.key_of(rel)?;
            let rt = runtime().map_err(|e| Error::io("open", &self.shown, e))?;
            let shown = crate::error::shown_url(&self.url_of(rel));
            let r = rt.block_on(attempts("look up", &shown, || self.store.head(&key)));
            if not_found(&r) {
                Ok(false)
            } else {
                r.map(|_| true)
            }
        }

        /// Whether no object lies below this key (`KEY/...`).
        ///
        /// # Errors
        /// [`Error::Io`] if the store cannot be listed (forbidden, unreachable).
        pub fn is_empty_prefix(&self) -> Result<bool> {
            let rt = runtime().map_err(|e| Error::io("list", &self.shown, e))?;
            let found = rt.block_on(attempts("list", &self.shown, || {
                self.store.list_with_delimiter(Some(&self.key))
            }))?;
            Ok(found.objects.is_empty() && found.common_prefixes.is_empty())
        }

        /// Stores `items` (keys below this one and their bytes), all requests in flight
        /// at once.
        ///
        /// # Errors
        /// [`Error::Io`] for the first that failed (forbidden, every attempt failed).
        pub fn put_many(&self, items: Vec<(String, Vec<u8>)>) -> Result<()> {
            if items.is_empty() {
                return Ok(());
            }
            let rt = runtime().map_err(|e| Error::io("write", &self.shown, e))?;
            let keyed = items
                .into_iter()
                .map(|(rel, bytes)| {
                    Ok((
                        self.key_of(&rel)?,
                        crate::error::shown_url(&self.url_of(&rel)),
                        PutPayload::from(bytes),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for (key, shown, payload) in keyed {
                    let store = Arc::clone(&self.store);
                    set.spawn(async move {
                        attempts("write", &shown, || store.put(&key, payload.clone()))
                            .await
                            .map(drop)
                    });
                }
                while let Some(done) = set.join_next().await {
                    done.map_err(|e| Error::Internal(format!("an upload task: {e}")))??;
                }
                Ok(())
            })
        }

        /// Deletes the objects at `rels` below this key, those that are there (best
        /// effort: what a failed run stored).
        ///
        /// # Errors
        /// [`Error::Io`] for the first that could not be deleted.
        pub fn delete_many(&self, rels: &[String]) -> Result<()> {
            let rt = runtime().map_err(|e| Error::io("delete", &self.shown, e))?;
            let keys = rels
                .iter()
                .map(|r| Ok((self.key_of(r)?, crate::error::shown_url(&self.url_of(r)))))
                .collect::<Result<Vec<_>>>()?;
            rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for (key, shown) in keys {
                    let store = Arc::clone(&self.store);
                    set.spawn(async move {
                        let r = attempts("delete", &shown, || store.delete(&key)).await;
                        if not_found(&r) { Ok(()) } else { r }
                    });
                }
                let mut first = Ok(());
                while let Some(done) = set.join_next().await {
                    let r = done.map_err(|e| Error::Internal(format!("a delete task: {e}")))?;
                    if first.is_ok() {
                        first = r;
                    }
                }
                first
            })
        }

        /// Uploads the first `len` bytes of `file` to this key: one request when they fit
        /// one part, else a multipart upload ([`part_plan`] within `memory`) recorded in
        /// `record` while open, completed only when every part is in, aborted on failure.
        /// Nothing is at the key unless all of the file is.
        ///
        /// # Errors
        /// [`Error::Io`] for a failed read of `file`, a request that failed for good, or
        /// a record that cannot be written; the upload is aborted then.
        pub fn upload_file(
            &self,
            file: &File,
            len: u64,
            memory: u64,
            record: &mut dyn UploadRecord,
        ) -> Result<()> {
            let (part, in_flight) = part_plan(len, memory);
            let rt = runtime().map_err(|e| Error::io("write", &self.shown, e))?;
            let read = |at: u64, n: u64| -> Result<Vec<u8>> {
                let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX)];
                file.read_exact_at(&mut buf, at)
                    .map_err(|e| Error::io("read", &self.shown, e))?;
                Ok(buf)
            };
            if len <= part {
                let payload = PutPayload::from(read(0, len)?);
                return rt
                    .block_on(attempts("write", &self.shown, || {
                        self.store.put(&self.key, payload.clone())
                    }))
                    .map(drop);
            }
            let id = rt.block_on(attempts("start an upload to", &self.shown, || {
                self.store.create_multipart(&self.key)
            }))?;
            record.started(&self.url, &id).inspect_err(|_| {
                let _ = rt.block_on(self.store.abort_multipart(&self.key, &id));
            })?;
            crate::fault::crash_point(|| "upload-started".into());
            let parts = len.div_ceil(part);
            let sent: Result<Vec<PartId>> = (|| {
                let mut ids = Vec::with_capacity(parts as usize);
                let mut first = 0;
                while first < parts {
                    let last = (first + in_flight).min(parts);
                    let batch = (first..last)
                        .map(|i| {
                            let at = i * part;
                            Ok((i, PutPayload::from(read(at, part.min(len - at))?)))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let done = rt.block_on(async {
                        let mut set = tokio::task::JoinSet::new();
                        for (i, payload) in batch {
                            let (store, key, id) =
                                (Arc::clone(&self.store), self.key.clone(), id.clone());
                            let shown = self.shown.clone();
                            set.spawn(async move {
                                let idx = usize::try_from(i).unwrap_or(usize::MAX);
                                let r = attempts("write", &shown, || {
                                    store.put_part(&key, &id, idx, payload.clone())
                                })
                                .await;
                                (i, r)
                            });
                        }
                        let mut got = Vec::new();
                        while let Some(done) = set.join_next().await {
                            let (i, r) =
                                done.map_err(|e| Error::Internal(format!("an upload task: {e}")))?;
                            got.push((i, r?));
                        }
                        got.sort_by_key(|(i, _)| *i);
                        Ok::<_, Error>(got)
                    })?;
                    ids.extend(done.into_iter().map(|(_, p)| p));
                    crate::fault::crash_point(|| format!("upload-part:{}", last - 1));
                    first = last;
                }
                Ok(ids)
            })();
            let finished = sent.and_then(|ids| {
                rt.block_on(attempts("finish the upload to", &self.shown, || {
                    self.store.complete_multipart(&self.key, &id, ids.clone())
                }))
            });
            if finished.is_err() {
                let _ = rt.block_on(self.store.abort_multipart(&self.key, &id));
            }
            record.ended();
            finished.map(drop)
        }

        /// Aborts the multipart upload `id` to this key (one already gone is fine).
        ///
        /// # Errors
        /// [`Error::Io`] if the store refuses.
        pub fn abort(&self, id: &str) -> Result<()> {
            let rt = runtime().map_err(|e| Error::io("abort", &self.shown, e))?;
            let id = id.to_string();
            let r = rt.block_on(attempts("abort the upload to", &self.shown, || {
                self.store.abort_multipart(&self.key, &id)
            }));
            if not_found(&r) { Ok(()) } else { r }
        }
    }
}

#[cfg(not(feature = "remote"))]
mod imp {
    use std::fs::File;

    use crate::error::{Error, Result};

    /// A destination in an object store: never made in a build without the `remote`
    /// feature (the type is uninhabited).
    #[derive(Debug)]
    pub enum Bucket {}

    /// Refuses: this build writes local files only.
    fn refused(url: &str) -> Error {
        Error::invalid(format!(
            "{}: this build of tilestream writes local files only (it was built without \
             the `remote` feature)",
            crate::error::shown_url(url)
        ))
    }

    impl Bucket {
        /// Refuses: this build writes local files only.
        ///
        /// # Errors
        /// Always [`Error::Invalid`].
        pub fn open(url: &str) -> Result<Self> {
            Err(refused(url))
        }
        /// Never called.
        #[must_use]
        pub fn url_of(&self, _: &str) -> String {
            match *self {}
        }
        /// Never called.
        #[must_use]
        pub fn shown(&self) -> &str {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn exists(&self, _: &str) -> Result<bool> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn is_empty_prefix(&self) -> Result<bool> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn put_many(&self, _: Vec<(String, Vec<u8>)>) -> Result<()> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn delete_many(&self, _: &[String]) -> Result<()> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn upload_file(
            &self,
            _: &File,
            _: u64,
            _: u64,
            _: &mut dyn super::UploadRecord,
        ) -> Result<()> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn abort(&self, _: &str) -> Result<()> {
            match *self {}
        }
    }
}

pub use imp::Bucket;

/// The refusal of a Zarr object output whose prefix holds objects no run of it uploaded:
/// a chunk the new store leaves out (all fill value) would be read from them.
#[must_use]
pub fn prefix_not_empty(bucket: &Bucket) -> crate::error::Error {
    crate::error::Error::invalid(format!(
        "{}: objects are already under this prefix, and no tilestream run to it left them; \
         a Zarr store is written to an empty prefix: delete them or choose another prefix",
        bucket.shown()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_large_enough_and_fit_the_memory() {
        // a small file: one part of the minimum, one in flight whatever the memory
        assert_eq!(part_plan(1 << 20, 0), (MIN_PART, 1));
        assert_eq!(part_plan(100 << 20, 64 << 20), (MIN_PART, 8));
        assert_eq!(part_plan(100 << 20, 20 << 20), (MIN_PART, 2));
        // 200 GB: at most 10,000 parts, whole MiB each
        let (part, _) = part_plan(200 << 30, 1 << 30);
        assert!((200u64 << 30).div_ceil(part) <= 10_000, "{part}");
        assert_eq!(part % (1 << 20), 0);
    }
}
