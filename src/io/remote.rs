//! Inputs that live in object stores — `s3://`, `gs://`, `az://`, `http://`, `https://` —
//! read by byte ranges through the `object_store` crate, never downloaded whole.
//!
//! An object is opened with one metadata request (its size, `ETag` and modification time),
//! then read with ranged GETs: a format asks for the bytes a tile needs exactly as it
//! asks a local file (`read_exact_at`), so the buffers are the ones the planner already
//! counts in the budget. Requests run on a small Tokio runtime of their own; the threads
//! that read tiles in parallel each wait on their own request, so as many ranges are in
//! flight as the read stage has reading threads.
//!
//! What the network can do wrong is handled here, once, for every format:
//! - the transport's own retries (`object_store`'s backoff on 5xx answers and dropped
//!   connections, never on 4xx), then a retry of a range that came back shorter than
//!   asked or failed mid-body, with backoff, [`ATTEMPTS`] times in all;
//! - errors on one line, naming the object by its URL without a query string (a
//!   pre-signed URL's signature is a credential), with the values of the credential
//!   variables in the environment blanked out of anything a server or library said.
//!
//! Credentials and endpoints come from the variables each store's documentation names
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_SKIP_SIGNATURE` for public buckets;
//! `GOOGLE_*`; `AZURE_*`), read by `object_store`'s `from_env` builders.

use std::path::Path;

/// The URL schemes read as objects.
pub const SCHEMES: [&str; 7] = ["s3", "s3a", "gs", "az", "abfs", "http", "https"];

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// How many times a range is asked for before its error is the run's (each attempt
/// already retries 5xx answers and dropped connections inside `object_store`).
pub const ATTEMPTS: u32 = 4;

/// Whether `path` is a URL of an object store rather than a local path: `scheme://`
/// with one of the schemes tilestream reads (`s3`, `gs`, `az`, `http(s)`...).
#[must_use]
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| {
        s.split_once("://").is_some_and(|(scheme, rest)| {
            !rest.is_empty() && SCHEMES.contains(&scheme.to_ascii_lowercase().as_str())
        })
    })
}

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// The environment variables whose values are secrets: blanked out of every message.
const SECRET_VARS: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
];

/// Secrets read from elsewhere than the environment (an AWS profile's keys).
static SECRETS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// Blanks `secret` out of every message from now on, as [`redacted`] does the values of
/// the credential variables.
pub(crate) fn add_secret(secret: &str) {
    if secret.len() >= 4
        && let Ok(mut s) = SECRETS.lock()
        && !s.iter().any(|x| x == secret)
    {
        s.push(secret.to_string());
    }
}

#[cfg_attr(not(feature = "remote"), allow(dead_code))]
/// `text` on one line with every secret of the environment blanked out and every URL's
/// query string cut.
#[must_use]
pub fn redacted(text: &str) -> String {
    let mut t = text.replace(['\n', '\r'], " ");
    for var in SECRET_VARS {
        if let Ok(v) = std::env::var(var)
            && v.len() >= 4
        {
            t = t.replace(&v, "***");
        }
    }
    for v in SECRETS.lock().map(|s| s.clone()).unwrap_or_default() {
        t = t.replace(&v, "***");
    }
    // query strings of URLs the message quotes (a signed request's signature)
    crate::error::redact_urls(&t)
}

/// What [`fetch_whole`] found at a key.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
#[derive(Debug)]
pub enum Whole {
    /// The object's bytes.
    Bytes(Vec<u8>),
    /// Its size, larger than allowed: nothing of it was read.
    TooLarge(u64),
}

#[cfg(feature = "remote")]
mod imp {
    use std::ops::Range;
    use std::sync::{Arc, OnceLock};

    use object_store::{ObjectStore, path::Path as Key};

    use super::client::{
        Attempt, io_error, locate, runtime, transient, whole_checked, with_attempts,
    };
    use super::{ATTEMPTS, Whole, redacted};
    use crate::error::{Error, Result, shown_url as shown};

    /// An object opened for ranged reads.
    #[derive(Debug)]
    pub struct Object {
        store: Arc<dyn ObjectStore>,
        key: Key,
        shown: String,
        len: u64,
        identity: String,
        /// The object's first [`HEAD_BYTES`] (or all of it when smaller), fetched by the
        /// first read that lies within them when opened by [`Object::open_with_head`].
        head: Option<OnceLock<Vec<u8>>>,
    }

    /// Bytes a file format's first reads are served from ([`Object::open_with_head`]): a
    /// TIFF's header and directories, a `.npy` header, in one request instead of one
    /// for each of a parser's small reads (at 100 MB/s, 64 KiB costs under 1 ms against
    /// the 10 to 50 ms of a request).
    pub const HEAD_BYTES: u64 = 64 << 10;

    /// The whole object at `url`, in one request, when it is at most `max` bytes (its
    /// size is known from the answer's headers, before its body is read); `None` if
    /// there is no such object.
    ///
    /// # Errors
    /// As [`Object::open`].
    pub fn fetch_whole(url: &str, max: u64) -> Result<Option<Whole>> {
        let (store, key, shown_url) = locate(url)?;
        let rt = runtime().map_err(|e| Error::io("open", &shown_url, e))?;
        rt.block_on(whole_checked(store.as_ref(), &key, max, &shown_url))
    }

    /// [`fetch_whole`] of each of `urls`, all requests in flight at once; the answers in
    /// the order of `urls`.
    ///
    /// # Errors
    /// The first failure, as [`fetch_whole`]'s (the other requests are cancelled).
    pub fn fetch_whole_many(urls: &[String], max: u64) -> Result<Vec<Option<Whole>>> {
        let located = urls.iter().map(|u| locate(u)).collect::<Result<Vec<_>>>()?;
        let Some((_, _, first)) = located.first() else {
            return Ok(Vec::new());
        };
        let rt = runtime().map_err(|e| Error::io("open", first, e))?;
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, (store, key, shown_url)) in located.into_iter().enumerate() {
                set.spawn(async move {
                    (
                        i,
                        whole_checked(store.as_ref(), &key, max, &shown_url).await,
                    )
                });
            }
            let mut out: Vec<Option<Whole>> = (0..urls.len()).map(|_| None).collect();
            while let Some(done) = set.join_next().await {
                let (i, r) = done.map_err(|e| {
                    Error::Internal(format!("a request task: {}", redacted(&e.to_string())))
                })?;
                out[i] = r?;
            }
            Ok(out)
        })
    }

    /// The bytes of `range` of the object at `key`: a range answered short or wrong, or
    /// an error that may pass, is asked for again ([`with_attempts`]).
    async fn range_checked(
        store: &dyn ObjectStore,
        key: &Key,
        range: Range<u64>,
        shown_url: &str,
    ) -> std::io::Result<Vec<u8>> {
        let want = range.end - range.start;
        let got = with_attempts(shown_url, || {
            let range = range.clone();
            async move {
                match store.get_range(key, range).await {
                    Ok(bytes) if bytes.len() as u64 == want => Attempt::Done(Ok(Vec::from(bytes))),
                    Ok(bytes) => Attempt::Again(format!(
                        "the server sent {} bytes for a range of {want}",
                        bytes.len()
                    )),
                    Err(e) if transient(&e) => Attempt::Again(io_error(&e).to_string()),
                    Err(e) => Attempt::Done(Err(io_error(&e))),
                }
            }
        })
        .await;
        got.unwrap_or_else(|last| {
            Err(std::io::Error::other(format!(
                "bytes {}..{} failed {ATTEMPTS} times, last: {last}",
                range.start, range.end
            )))
        })
    }

    impl Object {
        /// Opens the object at `url`: one metadata request for its size and identity.
        ///
        /// # Errors
        /// [`Error::Invalid`] for a URL that does not parse or a store that cannot be
        /// configured; [`Error::Io`] if the object cannot be reached (missing, forbidden,
        /// bad credentials, the server down), on one line.
        pub fn open(url: &str) -> Result<Self> {
            let shown_url = shown(url);
            Self::open_if_exists(url)?.ok_or_else(|| {
                Error::io(
                    "open",
                    &shown_url,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
                )
            })
        }

        /// [`Object::open`], `None` when there is no object at `url`.
        ///
        /// # Errors
        /// As [`Object::open`], but for a missing object.
        pub fn open_if_exists(url: &str) -> Result<Option<Self>> {
            let (store, key, shown_url) = locate(url)?;
            let rt = runtime().map_err(|e| Error::io("open", &shown_url, e))?;
            let meta = match rt.block_on(store.head(&key)) {
                Ok(m) => m,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(Error::io("open", &shown_url, io_error(&e))),
            };
            let identity = format!(
                "{} {} {}",
                meta.size,
                meta.e_tag.as_deref().unwrap_or("-"),
                meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
            );
            Ok(Some(Object {
                store,
                key,
                shown: shown_url,
                len: meta.size,
                identity,
                head: None,
            }))
        }

        /// [`Object::open`], with the object's first [`HEAD_BYTES`] fetched in one request
        /// by the first read within them and kept: what an input opened as a file is
        /// opened with (`Source::open`: a TIFF's directories, a `.npy` header are parsed
        /// by small reads at its start). Not for the many objects of a store (a Zarr
        /// shard's), each of which would keep them. Two threads reading first at once
        /// may each fetch them; the first kept wins.
        ///
        /// # Errors
        /// As [`Object::open`].
        pub fn open_with_head(url: &str) -> Result<Self> {
            let mut o = Self::open(url)?;
            o.head = Some(OnceLock::new());
            Ok(o)
        }

        /// The object's size in bytes, as its metadata said when it was opened.
        #[must_use]
        pub fn len(&self) -> u64 {
            self.len
        }

        /// What identifies this version of the object: its size, `ETag` and modification
        /// time (a resumed run refuses an object changed since).
        #[must_use]
        pub fn identity(&self) -> &str {
            &self.identity
        }

        /// Fills `buf` with the bytes from `offset`: one ranged request, asked again
        /// (with backoff) when it fails in a way that may pass or comes back short.
        ///
        /// # Errors
        /// `UnexpectedEof` past the object's end; the store's error, on one line, when
        /// every attempt failed or the error cannot pass (missing, forbidden).
        pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            if buf.is_empty() {
                return Ok(());
            }
            let end = offset
                .checked_add(buf.len() as u64)
                .filter(|&e| e <= self.len)
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "bytes {offset}..{} asked of an object of {} bytes",
                            offset.saturating_add(buf.len() as u64),
                            self.len
                        ),
                    )
                })?;
            let rt = runtime()?;
            if let Some(head) = &self.head
                && end <= HEAD_BYTES.min(self.len)
            {
                let bytes = match head.get() {
                    Some(b) => b,
                    None => {
                        let first = rt.block_on(range_checked(
                            self.store.as_ref(),
                            &self.key,
                            0..HEAD_BYTES.min(self.len),
                            &self.shown,
                        ))?;
                        head.get_or_init(|| first)
                    }
                };
                buf.copy_from_slice(&bytes[offset as usize..end as usize]);
                return Ok(());
            }
            let bytes = rt.block_on(range_checked(
                self.store.as_ref(),
                &self.key,
                offset..end,
                &self.shown,
            ))?;
            buf.copy_from_slice(&bytes);
            Ok(())
        }

        /// The bytes of each of `ranges`, all requests in flight at once; in the order
        /// of `ranges`.
        ///
        /// # Errors
        /// As [`read_exact_at`](Self::read_exact_at), for the first range that fails (the
        /// other requests are cancelled).
        pub fn read_ranges(&self, ranges: &[Range<u64>]) -> std::io::Result<Vec<Vec<u8>>> {
            if let Some(r) = ranges.iter().find(|r| r.start > r.end || r.end > self.len) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "bytes {}..{} asked of an object of {} bytes",
                        r.start, r.end, self.len
                    ),
                ));
            }
            let rt = runtime()?;
            rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                // an empty range is no request (a store refuses it)
                for (i, r) in ranges.iter().enumerate().filter(|(_, r)| r.start < r.end) {
                    let (store, key, shown) = (
                        Arc::clone(&self.store),
                        self.key.clone(),
                        self.shown.clone(),
                    );
                    let r = r.clone();
                    set.spawn(
                        async move { (i, range_checked(store.as_ref(), &key, r, &shown).await) },
                    );
                }
                let mut out: Vec<Vec<u8>> = vec![Vec::new(); ranges.len()];
                while let Some(done) = set.join_next().await {
                    let (i, r) =
                        done.map_err(|e| std::io::Error::other(redacted(&e.to_string())))?;
                    out[i] = r?;
                }
                Ok(out)
            })
        }

        /// Fills as much of `buf` as the object holds from `offset`; the count read.
        ///
        /// # Errors
        /// As [`read_exact_at`](Self::read_exact_at).
        pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let n = usize::try_from(self.len.saturating_sub(offset))
                .unwrap_or(usize::MAX)
                .min(buf.len());
            self.read_exact_at(&mut buf[..n], offset)?;
            Ok(n)
        }
    }
}

#[cfg(not(feature = "remote"))]
mod imp {
    use crate::error::{Error, Result};

    /// An object in an object store: never made in a build without the `remote`
    /// feature (the type is uninhabited).
    #[derive(Debug)]
    pub enum Object {}

    /// Refuses: this build reads local files only.
    ///
    /// # Errors
    /// Always [`Error::Invalid`].
    pub fn fetch_whole(url: &str, _max: u64) -> Result<Option<super::Whole>> {
        Object::open(url).map(|o| match o {})
    }

    /// Refuses: this build reads local files only.
    ///
    /// # Errors
    /// Always [`Error::Invalid`] (when `urls` is not empty).
    pub fn fetch_whole_many(urls: &[String], max: u64) -> Result<Vec<Option<super::Whole>>> {
        urls.iter().map(|u| fetch_whole(u, max)).collect()
    }

    impl Object {
        /// Refuses: this build reads local files only.
        ///
        /// # Errors
        /// Always [`Error::Invalid`].
        pub fn open_if_exists(url: &str) -> Result<Option<Self>> {
            Self::open(url).map(Some)
        }

        /// Refuses: this build reads local files only.
        ///
        /// # Errors
        /// Always [`Error::Invalid`].
        pub fn open_with_head(url: &str) -> Result<Self> {
            Self::open(url)
        }

        /// Refuses: this build reads local files only.
        ///
        /// # Errors
        /// Always [`Error::Invalid`].
        pub fn open(url: &str) -> Result<Self> {
            Err(Error::invalid(format!(
                "{}: this build of tilestream reads local files only (it was built without \
                 the `remote` feature)",
                crate::error::shown_url(url)
            )))
        }
        /// Never called.
        #[must_use]
        pub fn len(&self) -> u64 {
            match *self {}
        }
        /// Never called.
        #[must_use]
        pub fn identity(&self) -> &str {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn read_exact_at(&self, _: &mut [u8], _: u64) -> std::io::Result<()> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn read_ranges(&self, _: &[std::ops::Range<u64>]) -> std::io::Result<Vec<Vec<u8>>> {
            match *self {}
        }
        /// Never called.
        ///
        /// # Errors
        /// Never.
        pub fn read_at(&self, _: &mut [u8], _: u64) -> std::io::Result<usize> {
            match *self {}
        }
    }
}

pub use imp::{Object, fetch_whole, fetch_whole_many};

#[cfg(feature = "remote")]
mod client;
#[cfg(feature = "remote")]
mod profile;
pub mod upload;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        for u in [
            "s3://b/k.tif",
            "HTTPS://h/x.npy",
            "gs://b/k",
            "az://c/k",
            "http://127.0.0.1:9/a",
        ] {
            assert!(is_url(Path::new(u)), "{u}");
        }
        for p in [
            "x.tif",
            "/tmp/s3://x",
            "s3:/b/k",
            "ftp://h/x",
            "s3://",
            "dir/http://x",
        ] {
            assert!(!is_url(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn shown_urls_lose_queries_and_user_information() {
        use crate::error::shown_url as shown;
        assert_eq!(shown("s3://b/k.tif"), "s3://b/k.tif");
        assert_eq!(
            shown("https://h.example/k.tif?X-Amz-Signature=abcd&X-Amz-Credential=AKIA"),
            "https://h.example/k.tif?…"
        );
        assert_eq!(
            shown("https://user:secret@h.example/k"),
            "https://h.example/k"
        );
        let r = redacted("GET https://h/k?sig=zz failed\nretry: \"http://a:b@h2/x?y\"");
        assert!(
            !r.contains("sig=zz") && !r.contains("a:b") && !r.contains('\n'),
            "{r}"
        );
        assert!(
            r.contains("https://h/k?…") && r.contains("http://h2/x?…"),
            "{r}"
        );
    }
}
