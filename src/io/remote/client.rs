//! The clients behind every object read and write: one per bucket (or host), built
//! from the environment and the AWS profile files with the retry policy of every
//! request, on a small Tokio runtime of the crate's own; `object_store` errors turned
//! into I/O errors of the right kind with their secrets blanked out; the retry of a
//! request that may pass when made again.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use object_store::{ObjectStore, ObjectStoreScheme, path::Path as Key};

use super::{ATTEMPTS, Whole, redacted};
use crate::error::{Error, Result, shown_url as shown};

pub(super) fn runtime() -> std::io::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tilestream-net")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| std::io::Error::other(format!("cannot start the network runtime: {e}")))
}

/// An `object_store` error as an I/O error of the right kind, its text redacted.
pub(super) fn io_error(e: &object_store::Error) -> std::io::Error {
    use object_store::Error as E;
    use std::io::ErrorKind as K;
    let (kind, text) = match e {
        E::NotFound { .. } => (K::NotFound, "no such object".to_string()),
        E::PermissionDenied { .. } => (
            K::PermissionDenied,
            "access denied: check the credentials and the bucket's policy".to_string(),
        ),
        E::Unauthenticated { .. } => (
            K::PermissionDenied,
            "the store refused the credentials: check AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (or the store's own variables), or set \
             AWS_SKIP_SIGNATURE=true for a public bucket"
                .to_string(),
        ),
        // answers object_store passes on as they came (a listing's, a write's)
        other if other.to_string().contains("<Code>NoSuchBucket</Code>") => {
            (K::NotFound, "no such bucket".to_string())
        }
        other if other.to_string().contains("<Code>AccessDenied</Code>") => (
            K::PermissionDenied,
            "access denied: check the credentials and the bucket's policy".to_string(),
        ),
        other => (K::Other, redacted(&other.to_string())),
    };
    std::io::Error::new(kind, text)
}

/// Whether an error may pass if the request is made again (not a 4xx answer).
pub(super) fn transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    // a 4xx answer passed on as it came: asking again gets the same (but a timeout
    // or throttling: 408, 429)
    if let E::Generic { .. } = e {
        let t = e.to_string();
        if t.contains("non-2xx status code: 4")
            && !t.contains("status code: 408")
            && !t.contains("status code: 429")
        {
            return false;
        }
    }
    !matches!(
        e,
        E::NotFound { .. }
            | E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::NotImplemented
            | E::UnknownConfigurationKey { .. }
    )
}

/// A store's client, of its concrete type: what reading ([`store_for`]) and writing
/// (`super::upload`) make theirs from.
pub(super) enum Built {
    /// `s3://` and S3 endpoints.
    S3(object_store::aws::AmazonS3),
    /// `gs://`.
    Gcs(object_store::gcp::GoogleCloudStorage),
    /// `az://`, `abfs://`.
    Azure(object_store::azure::MicrosoftAzure),
    /// `http(s)://`: read only.
    Http(object_store::http::HttpStore),
}

/// The client of `url`'s store, configured from the environment, with the retry
/// policy of every request, and the object's key.
pub(super) fn build(url: &url::Url) -> Result<(Built, Key)> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::invalid(format!(
            "{}: cannot reach this object store: {}",
            shown(url.as_str()),
            redacted(&e.to_string())
        ))
    };
    let (scheme, key) = ObjectStoreScheme::parse(url).map_err(|e| bad(&e))?;
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 5,
        retry_timeout: Duration::from_secs(120),
    };
    let built = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = object_store::aws::AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            if let Some(p) = super::profile::from_env()? {
                let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
                if let (Some(k), Some(s)) = (p.key_id, p.secret) {
                    b = b.with_access_key_id(k).with_secret_access_key(s);
                    if let Some(t) = p.token {
                        b = b.with_token(t);
                    }
                }
                if let Some(r) = p
                    .region
                    .filter(|_| !set("AWS_REGION") && !set("AWS_DEFAULT_REGION"))
                {
                    b = b.with_region(r);
                }
                if let Some(e) = p
                    .endpoint
                    .filter(|_| !set("AWS_ENDPOINT_URL") && !set("AWS_ENDPOINT"))
                {
                    if e.starts_with("http://") {
                        // the profile names a plain-HTTP endpoint (a local server)
                        b = b.with_allow_http(true);
                    }
                    b = b.with_endpoint(e);
                }
            }
            Built::S3(b.build().map_err(|e| bad(&e))?)
        }
        ObjectStoreScheme::GoogleCloudStorage => Built::Gcs(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry)
                .build()
                .map_err(|e| bad(&e))?,
        ),
        ObjectStoreScheme::MicrosoftAzure => Built::Azure(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry)
                .build()
                .map_err(|e| bad(&e))?,
        ),
        ObjectStoreScheme::Http => {
            let base = format!(
                "{}://{}",
                url.scheme(),
                &url[url::Position::BeforeHost..url::Position::AfterPort]
            );
            Built::Http(
                object_store::http::HttpBuilder::new()
                    .with_url(base)
                    // the URL says http: the user asked for plain HTTP
                    .with_client_options(
                        object_store::ClientOptions::new().with_allow_http(url.scheme() == "http"),
                    )
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(&e))?,
            )
        }
        _ => {
            return Err(Error::invalid(format!(
                "{}: tilestream reads s3://, gs://, az://, http:// and https:// objects",
                shown(url.as_str())
            )));
        }
    };
    Ok((built, key))
}

fn store_for(url: &url::Url) -> Result<(Arc<dyn ObjectStore>, Key)> {
    let (built, key) = build(url)?;
    let store: Arc<dyn ObjectStore> = match built {
        Built::S3(s) => Arc::new(s),
        Built::Gcs(s) => Arc::new(s),
        Built::Azure(s) => Arc::new(s),
        Built::Http(s) => Arc::new(s),
    };
    Ok((store, key))
}

/// The URL of `key` up to the key: scheme, host, and the bucket or container where
/// the path names it (path-style S3 and Azure URLs); the whole URL when a segment
/// holds an encoded `/`, which the key splits in two.
fn client_prefix(url: &url::Url, key: &Key) -> String {
    let segments: Vec<&str> = url
        .path_segments()
        .map(Iterator::collect)
        .unwrap_or_default();
    let above = if segments
        .iter()
        .any(|s| s.to_ascii_lowercase().contains("%2f"))
    {
        segments.len()
    } else {
        segments.len().saturating_sub(key.parts().count())
    };
    format!(
        "{}://{}/{}",
        url.scheme(),
        url.authority(),
        segments[..above].join("/")
    )
}

/// Clients made so far, by the URL up to the object's key (scheme, host, and the
/// bucket or container where the URL's path names it, as path-style S3 and Azure
/// URLs do) and the store variables they were made with: a store of many objects (a
/// Zarr store's chunks) shares one client, its connections and its credentials,
/// rather than building one per object.
fn cached_store(url: &url::Url) -> Result<(Arc<dyn ObjectStore>, Key)> {
    type Clients = std::sync::Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>;
    static CLIENTS: OnceLock<Clients> = OnceLock::new();
    let (_, key) = ObjectStoreScheme::parse(url).map_err(|e| {
        Error::invalid(format!(
            "{}: cannot reach this object store: {}",
            shown(url.as_str()),
            redacted(&e.to_string())
        ))
    })?;
    let mut id = client_prefix(url, &key);
    for (k, v) in std::env::vars_os() {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str())
            && ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p))
        {
            id.push_str(&format!("\0{k}={v}"));
        }
    }
    let clients = CLIENTS.get_or_init(Clients::default);
    if let Some(store) = clients.lock().ok().and_then(|c| c.get(&id).cloned()) {
        return Ok((store, key));
    }
    let (fresh, key) = store_for(url)?;
    if let Ok(mut c) = clients.lock() {
        // a handful of stores in a process; a long-lived one using many is not kept
        // growing
        if c.len() >= 64 {
            c.clear();
        }
        c.insert(id, Arc::clone(&fresh));
    }
    Ok((fresh, key))
}

/// The URL parsed, refused if it carries credentials, and its store's client.
pub(super) fn locate(url: &str) -> Result<(Arc<dyn ObjectStore>, Key, String)> {
    let (parsed, shown_url) = parse(url)?;
    let (store, key) = cached_store(&parsed)?;
    Ok((store, key, shown_url))
}

/// `url` parsed, refused if it carries credentials, and as errors show it.
pub(super) fn parse(url: &str) -> Result<(url::Url, String)> {
    let shown_url = shown(url);
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::invalid(format!("{shown_url}: not a URL tilestream can read: {e}")))?;
    if parsed.query().is_some() || !parsed.username().is_empty() {
        // object_store sends neither: a pre-signed URL would be asked for unsigned
        return Err(Error::invalid(format!(
            "{shown_url}: URLs carrying credentials (a query string such as a \
             pre-signed URL's, or user:password@) are not read; give the object as \
             s3://, gs:// or az:// with the store's credential variables"
        )));
    }
    Ok((parsed, shown_url))
}

/// What one attempt at a request came to: its answer (or an error that cannot pass),
/// or why it is to be made again.
pub(super) enum Attempt<T> {
    Done(T),
    Again(String),
}

/// Makes a request up to [`ATTEMPTS`] times: the transport has retried with backoff
/// already, so a second attempt goes at once (a short body, a range answered wrong),
/// later ones after a backoff. `Err` holds why the last attempt failed.
pub(super) async fn with_attempts<T, F, Fut>(
    shown_url: &str,
    mut once: F,
) -> std::result::Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Attempt<T>>,
{
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        match once().await {
            Attempt::Done(v) => return Ok(v),
            Attempt::Again(why) => last = why,
        }
        tracing::debug!(object = %shown_url, attempt, "{last}");
    }
    Err(last)
}

/// The whole object at `key`, when it is at most `max` bytes; `None` if there is no
/// such object. A body of another length than its headers gave, or an error that
/// may pass, is asked for again ([`with_attempts`]).
pub(super) async fn whole_checked(
    store: &dyn ObjectStore,
    key: &Key,
    max: u64,
    shown_url: &str,
) -> Result<Option<Whole>> {
    let got = with_attempts(shown_url, || async move {
        let got = async {
            let r = store.get(key).await?;
            let size = r.meta.size;
            if size > max {
                return Ok((size, None));
            }
            // hyper holds the body to the length its headers gave
            Ok::<_, object_store::Error>((size, Some(Vec::from(r.bytes().await?))))
        }
        .await;
        match got {
            Ok((size, None)) => Attempt::Done(Ok(Some(Whole::TooLarge(size)))),
            Ok((size, Some(body))) if body.len() as u64 == size => {
                Attempt::Done(Ok(Some(Whole::Bytes(body))))
            }
            Ok((size, Some(body))) => {
                Attempt::Again(format!("the server sent {} bytes of {size}", body.len()))
            }
            Err(object_store::Error::NotFound { .. }) => Attempt::Done(Ok(None)),
            Err(e) if transient(&e) => Attempt::Again(io_error(&e).to_string()),
            Err(e) => Attempt::Done(Err(Error::io("read", shown_url, io_error(&e)))),
        }
    })
    .await;
    got.unwrap_or_else(|last| {
        Err(Error::io(
            "read",
            shown_url,
            std::io::Error::other(format!("failed {ATTEMPTS} times, last: {last}")),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_shared_within_a_bucket_only() {
        let prefix = |u: &str| {
            let url = url::Url::parse(u).expect("a URL");
            let (_, key) = ObjectStoreScheme::parse(&url).expect("a store URL");
            client_prefix(&url, &key)
        };
        // virtual-hosted and scheme URLs: the bucket is the host
        assert_eq!(prefix("s3://a/x/y.tif"), prefix("s3://a/z.tif"));
        assert_ne!(prefix("s3://a/k"), prefix("s3://b/k"));
        // path-style: the bucket is the first segment
        let (pa, pb) = (
            prefix("https://s3.us-west-2.amazonaws.com/bucket-a/a.tif"),
            prefix("https://s3.us-west-2.amazonaws.com/bucket-b/a.tif"),
        );
        assert_ne!(pa, pb);
        assert_eq!(
            pa,
            prefix("https://s3.us-west-2.amazonaws.com/bucket-a/d/c/0/0")
        );
        assert_ne!(
            prefix("https://acct.blob.core.windows.net/c1/k"),
            prefix("https://acct.blob.core.windows.net/c2/k")
        );
        // a plain HTTP server: one client per host
        assert_eq!(
            prefix("http://127.0.0.1:9/a/b"),
            prefix("http://127.0.0.1:9/c")
        );
        // an encoded slash: never shared
        assert_ne!(
            prefix("https://s3.us-west-2.amazonaws.com/bucket-a/x%2Fy"),
            prefix("https://s3.us-west-2.amazonaws.com/bucket-b/x%2Fy")
        );
    }
}
