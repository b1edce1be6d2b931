//! A local S3-compatible server for backups: versitygw (Apache-2.0) with its posix backend,
//! built from the `xtask/go/versitygw` wrapper module into its own cache directory (so that
//! adding or bumping it never invalidates the control-plane binaries), started on 127.0.0.1
//! with credentials generated at start, and described to the cluster by a Secret.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::binaries::{self, GoBuild};
use super::progress::Progress;

/// The Go module whose server is built.
pub const MODULE: &str = "github.com/versity/versitygw";
/// Bumped whenever the way the server is built changes.
const BUILD_RECIPE: &str = "s3-recipe-1 CGO_ENABLED=0 -trimpath -ldflags=-s,-w";
/// The bucket created at start.
pub const BUCKET: &str = "backups";
/// The Secret describing the server, in the `default` namespace.
pub const SECRET_NAME: &str = "local-s3";
/// The namespace of that Secret.
pub const SECRET_NAMESPACE: &str = "default";

/// The cached server binary.
#[derive(Debug, Clone)]
pub struct S3Binary {
    /// `<cache>/database-operator/control-plane/s3-versitygw-<version>-<hash>/`.
    pub root: PathBuf,
    /// The versitygw version, from the wrapper `go.mod`.
    pub version: String,
}

impl S3Binary {
    /// The executable.
    pub fn path(&self) -> PathBuf {
        self.root.join("bin").join("versitygw")
    }
}

/// Where the server binary is (or will be) cached. Builds nothing.
pub fn locate(workspace_root: &Path) -> Result<S3Binary> {
    let module = binaries::go_dir(workspace_root).join("versitygw");
    let version = binaries::required_version(&module.join("go.mod"), MODULE)?;
    let mut hasher = Sha256::new();
    hasher.update(BUILD_RECIPE.as_bytes());
    for file in ["go.mod", "go.sum"] {
        let path = module.join(file);
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(format!("\0versitygw/{file}\0").as_bytes());
        hasher.update(&bytes);
    }
    let hash: String = hasher.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let root = binaries::cache_base()?.join(format!("s3-versitygw-{version}-{hash}"));
    Ok(S3Binary { root, version })
}

/// The cached server, built when missing (a few minutes on 2 cores, once per version).
pub fn ensure(workspace_root: &Path, progress: &Progress) -> Result<S3Binary> {
    let binary = locate(workspace_root)?;
    if binary.path().is_file() {
        progress.step(format!(
            "S3 server (versitygw {}) cached in {}",
            binary.version,
            binary.root.display()
        ));
        return Ok(binary);
    }
    progress.say(format!(
        "Building the local S3 server (versitygw {}) from its Go module; once per version, \
         cached in {}.",
        binary.version,
        binary.root.display()
    ));
    let bin_dir = binary.root.join("bin");
    fs::create_dir_all(&bin_dir)?;
    let logs = binary.root.join("build-logs");
    fs::create_dir_all(&logs)?;
    binaries::go_build(
        &GoBuild {
            label: "versitygw",
            module_dir: &binaries::go_dir(workspace_root).join("versitygw"),
            packages: &[format!("{MODULE}/cmd/versitygw")],
            ldflags: "-s -w",
            tags: "",
            out_dir: &bin_dir,
            single_output: Some("versitygw"),
            log: &logs.join("versitygw.log"),
        },
        progress,
    )?;
    Ok(binary)
}

/// Credentials generated for one start of the server.
pub struct Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Fresh random credentials (from the kernel's random source).
    pub fn generate() -> Result<Credentials> {
        let mut bytes = [0u8; 30];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .context("reading /dev/urandom")?;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        let text: String = bytes
            .iter()
            .map(|b| ALPHABET[usize::from(b & 31)] as char)
            .collect();
        Ok(Credentials {
            access_key_id: format!("LOCAL{}", &text[..15]),
            secret_access_key: text[..].to_owned() + &text[..10],
        })
    }

    /// The environment versitygw reads its root credentials from (never argv).
    pub fn server_env(&self) -> Vec<(String, String)> {
        vec![
            ("ROOT_ACCESS_KEY_ID".to_owned(), self.access_key_id.clone()),
            (
                "ROOT_SECRET_ACCESS_KEY".to_owned(),
                self.secret_access_key.clone(),
            ),
        ]
    }
}

/// The server's arguments: listen on `127.0.0.1:<port>`, serve the directories under `data`
/// as buckets.
pub fn server_args(port: u16, data: &Path) -> Vec<String> {
    vec![
        format!("--port=127.0.0.1:{port}"),
        "posix".to_owned(),
        data.display().to_string(),
    ]
}

/// The Secret that tells backups where the server is: endpoint, bucket and keys, under the
/// key names `spec.backup.credentialsSecretRef` defaults to.
pub fn secret_manifest(port: u16, credentials: &Credentials) -> String {
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": SECRET_NAMESPACE},
        "type": "Opaque",
        "stringData": {
            "endpoint": format!("http://127.0.0.1:{port}"),
            "bucket": BUCKET,
            "AWS_ACCESS_KEY_ID": credentials.access_key_id,
            "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        },
    });
    object.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_keyed_by_the_wrapper_module() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let binary = locate(root).unwrap();
        assert_eq!(binary.version, "v1.8.0");
        let name = binary
            .root
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(name.starts_with("s3-versitygw-v1.8.0-"), "{name}");
        assert!(binary.path().ends_with("bin/versitygw"));
    }

    #[test]
    fn credentials_are_fresh_and_stay_out_of_argv() {
        let a = Credentials::generate().unwrap();
        let b = Credentials::generate().unwrap();
        assert_ne!(a.secret_access_key, b.secret_access_key);
        assert_eq!(a.secret_access_key.len(), 40);
        let args = server_args(9000, Path::new("/tmp/s3"));
        assert_eq!(args, ["--port=127.0.0.1:9000", "posix", "/tmp/s3"]);
        assert!(!format!("{a:?}").contains(&a.secret_access_key));
        let secret = secret_manifest(9000, &a);
        assert!(secret.contains("http://127.0.0.1:9000"));
        assert!(secret.contains(&a.secret_access_key));
    }
}
