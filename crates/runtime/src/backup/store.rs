//! The bucket, as the backup commands use it: [`BackupStore`] (list a prefix, get, put,
//! delete, multipart uploads) and its S3 implementation on Apache Arrow's `object_store`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::database::statements::Secret;
use database_operator_core::backup::ListedObject;
use futures::TryStreamExt as _;
use jiff::Timestamp;
use object_store::ClientConfigKey;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore as _, ObjectStoreExt as _, PutPayload};

/// A failed call to the bucket. Never holds a credential.
#[derive(Debug, thiserror::Error)]
#[error("{action} {key}: {message}")]
pub struct StoreError {
    /// What was being done (`list`, `get`, `put`, `delete`, `upload part`, ...).
    pub action: &'static str,
    /// The key or prefix.
    pub key: String,
    /// What went wrong.
    pub message: String,
}

impl StoreError {
    /// An error of `action` on `key`.
    pub fn new(action: &'static str, key: &str, message: impl ToString) -> StoreError {
        StoreError {
            action,
            key: key.to_owned(),
            message: message.to_string(),
        }
    }
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UploadId {
    /// The key being written.
    pub key: String,
    /// This process's handle of the upload.
    pub handle: u64,
}

/// The calls the backup commands make to the bucket. An object written by a multipart upload
/// becomes visible only when the upload completes; an aborted upload leaves nothing.
///
/// Used through generics (never `dyn`), so the futures keep their auto traits.
#[allow(async_fn_in_trait)]
#[cfg_attr(test, mockall::automock)]
pub trait BackupStore: Send + Sync {
    /// Every object whose key starts with `prefix` (which ends in `/`).
    async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, StoreError>;
    /// The content of `key`.
    async fn get(&self, key: &str) -> Result<Vec<u8>, StoreError>;
    /// The content of `key`, or `None` when there is no such object.
    async fn get_opt(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Streams the content of `key` into a new file `to` (never held in memory whole); returns
    /// the bytes written.
    async fn download(&self, key: &str, to: &std::path::Path) -> Result<u64, StoreError>;
    /// Writes `key` in one request (small objects: manifests).
    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError>;
    /// Deletes `key` (deleting a missing key succeeds).
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// Starts a multipart upload of `key`.
    async fn start_upload(&self, key: &str) -> Result<UploadId, StoreError>;
    /// Uploads the next part (every part but the last at least 5 MiB).
    async fn upload_part(&self, upload: &UploadId, part: Vec<u8>) -> Result<(), StoreError>;
    /// Completes the upload: the object appears.
    async fn complete_upload(&self, upload: &UploadId) -> Result<(), StoreError>;
    /// Aborts the upload: the uploaded parts are discarded, no object appears.
    async fn abort_upload(&self, upload: &UploadId) -> Result<(), StoreError>;
}

/// Where the bucket is and how to sign requests. The credentials come from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, or the pod's own cloud identity), never from
/// arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// The endpoint URL of an S3-compatible store; `None` for AWS S3.
    pub endpoint: Option<String>,
    /// The region (`us-east-1` when absent).
    pub region: Option<String>,
    /// Keys given explicitly; `None`: from the environment or the pod's cloud identity.
    pub credentials: Option<S3Credentials>,
}

/// An access key pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key (redacted in `Debug`).
    pub secret_access_key: Secret,
}

/// [`BackupStore`] on S3 (AWS or any S3-compatible store), through `object_store`.
#[derive(Debug)]
pub struct S3Store {
    inner: AmazonS3,
    uploads: Mutex<HashMap<u64, Box<dyn MultipartUpload>>>,
    next: AtomicU64,
}

impl S3Store {
    /// A client for `config`, with credentials from the environment. An `http://` endpoint is
    /// allowed (a local test store); path-style requests, which every S3-compatible store
    /// understands.
    pub fn new(config: &S3Config) -> Result<S3Store, StoreError> {
        Self::build(config, None)
    }

    /// As [`S3Store::new`], for a command that must answer within about `deadline` (the
    /// archive command: the server learns of a failure only when it returns, and retries it
    /// itself): each request is bounded by a third of it (connecting by 5 s at most), and
    /// failed requests are retried 3 times within half of it, instead of 10 times within
    /// 3 minutes.
    pub fn within(config: &S3Config, deadline: std::time::Duration) -> Result<S3Store, StoreError> {
        Self::build(config, Some(deadline))
    }

    fn build(
        config: &S3Config,
        deadline: Option<std::time::Duration>,
    ) -> Result<S3Store, StoreError> {
        // reqwest is built with rustls but without a provider of its own: use ring, the one
        // the rest of the binary uses. Installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&config.bucket);
        if let Some(endpoint) = &config.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        if let Some(keys) = &config.credentials {
            builder = builder
                .with_access_key_id(&keys.access_key_id)
                .with_secret_access_key(keys.secret_access_key.expose());
        }
        if let Some(deadline) = deadline {
            builder = builder
                .with_retry(object_store::RetryConfig {
                    max_retries: 3,
                    retry_timeout: deadline / 2,
                    ..object_store::RetryConfig::default()
                })
                // Set key by key: `with_client_options` would replace every option set above
                // (allowing http to the endpoint among them).
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                    format!("{}ms", (deadline / 3).as_millis()),
                )
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                    format!(
                        "{}ms",
                        (deadline / 3)
                            .min(std::time::Duration::from_secs(5))
                            .as_millis()
                    ),
                );
        }
        let inner = builder
            .build()
            .map_err(|e| StoreError::new("connect", &config.bucket, e))?;
        Ok(S3Store {
            inner,
            uploads: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        })
    }

    fn take(&self, upload: &UploadId) -> Result<Box<dyn MultipartUpload>, StoreError> {
        self.uploads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&upload.handle)
            .ok_or_else(|| StoreError::new("upload", &upload.key, "no such upload"))
    }
}

fn path(action: &'static str, key: &str) -> Result<Path, StoreError> {
    Path::parse(key).map_err(|e| StoreError::new(action, key, e))
}

impl BackupStore for S3Store {
    async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, StoreError> {
        let p = path("list", prefix)?;
        let metas: Vec<object_store::ObjectMeta> = self
            .inner
            .list(Some(&p))
            .try_collect()
            .await
            .map_err(|e| StoreError::new("list", prefix, e))?;
        metas
            .into_iter()
            .map(|m| {
                let millis = m.last_modified.timestamp_millis();
                let last_modified = Timestamp::from_millisecond(millis)
                    .map_err(|e| StoreError::new("list", m.location.as_ref(), e))?;
                Ok(ListedObject {
                    key: m.location.to_string(),
                    size: m.size,
                    last_modified,
                })
            })
            .collect()
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        let p = path("get", key)?;
        let result = self
            .inner
            .get(&p)
            .await
            .map_err(|e| StoreError::new("get", key, e))?;
        let bytes = result
            .bytes()
            .await
            .map_err(|e| StoreError::new("get", key, e))?;
        Ok(bytes.to_vec())
    }

    async fn get_opt(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let p = path("get", key)?;
        let result = match self.inner.get(&p).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(StoreError::new("get", key, e)),
        };
        let bytes = result
            .bytes()
            .await
            .map_err(|e| StoreError::new("get", key, e))?;
        Ok(Some(bytes.to_vec()))
    }

    async fn download(&self, key: &str, to: &std::path::Path) -> Result<u64, StoreError> {
        use futures::StreamExt as _;
        use std::io::Write as _;
        let p = path("get", key)?;
        let mut stream = self
            .inner
            .get(&p)
            .await
            .map_err(|e| StoreError::new("get", key, e))?
            .into_stream();
        // A command-line process with nothing else to do: plain blocking writes.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(to)
            .map_err(|e| StoreError::new("download", key, e))?;
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| StoreError::new("get", key, e))?;
            file.write_all(&chunk)
                .map_err(|e| StoreError::new("download", key, e))?;
            written += chunk.len() as u64;
        }
        file.sync_all()
            .map_err(|e| StoreError::new("download", key, e))?;
        Ok(written)
    }

    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        let p = path("put", key)?;
        self.inner
            .put(&p, PutPayload::from(body))
            .await
            .map(|_| ())
            .map_err(|e| StoreError::new("put", key, e))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let p = path("delete", key)?;
        self.inner
            .delete(&p)
            .await
            .map_err(|e| StoreError::new("delete", key, e))
    }

    async fn start_upload(&self, key: &str) -> Result<UploadId, StoreError> {
        let p = path("start upload", key)?;
        let upload = self
            .inner
            .put_multipart(&p)
            .await
            .map_err(|e| StoreError::new("start upload", key, e))?;
        let handle = self.next.fetch_add(1, Ordering::Relaxed);
        self.uploads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle, upload);
        Ok(UploadId {
            key: key.to_owned(),
            handle,
        })
    }

    async fn upload_part(&self, upload: &UploadId, part: Vec<u8>) -> Result<(), StoreError> {
        // The part's future owns what it needs: the lock is not held across the await.
        let future = {
            let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            let Some(u) = uploads.get_mut(&upload.handle) else {
                return Err(StoreError::new(
                    "upload part",
                    &upload.key,
                    "no such upload",
                ));
            };
            u.put_part(PutPayload::from(part))
        };
        future
            .await
            .map_err(|e| StoreError::new("upload part", &upload.key, e))
    }

    async fn complete_upload(&self, upload: &UploadId) -> Result<(), StoreError> {
        let mut u = self.take(upload)?;
        u.complete()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::new("complete upload", &upload.key, e))
    }

    async fn abort_upload(&self, upload: &UploadId) -> Result<(), StoreError> {
        let mut u = self.take(upload)?;
        u.abort()
            .await
            .map_err(|e| StoreError::new("abort upload", &upload.key, e))
    }
}
