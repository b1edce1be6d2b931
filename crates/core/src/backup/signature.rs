//! Signed manifests: a backup Job signs the manifest it writes with its cluster's signing key
//! (HMAC-SHA-256, the key in the operator Secret under
//! [`SIGNING_KEY_KEY`](crate::credentials::SIGNING_KEY_KEY)), and a restore or a drill refuses a
//! manifest whose signature does not verify before it downloads the dump. The manifest names the
//! dump's size and SHA-256, so the signature covers the dump as well: whoever can write to the
//! bucket but does not hold the key cannot have a dump of their own restored, or have one of
//! another cluster's backups taken for this one's (the manifest names its cluster and id).
//!
//! The signature is the manifest's field `signature`, `hmac-sha256:` and 64 lowercase hex digits,
//! over the manifest's JSON without that field, written canonically: object keys sorted, no
//! white space, strings and numbers as `serde_json` writes them. Every other field, including any
//! a reader does not know, is covered. Manifests written before signing have no field: a restore
//! accepts them only when told to skip the check.

use sha2::{Digest as _, Sha256};

use super::hex;

/// The manifest's field holding the signature.
pub const SIGNATURE_FIELD: &str = "signature";
/// What a signature starts with: the algorithm.
pub const SIGNATURE_PREFIX: &str = "hmac-sha256:";
/// The shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 32;

/// A cluster's key for signing its manifests: the bytes of the operator Secret's value.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// A key from the Secret value `bytes` (at least [`MIN_KEY_LEN`] bytes).
    pub fn new(bytes: &[u8]) -> Result<SigningKey, SignatureError> {
        if bytes.len() < MIN_KEY_LEN {
            return Err(SignatureError::KeyTooShort(bytes.len()));
        }
        Ok(SigningKey(bytes.to_vec()))
    }

    /// HMAC-SHA-256 of `message` with this key. Its other use, keyed password fingerprints,
    /// starts its messages with a context of its own, which no canonical manifest (a JSON
    /// object) can start with.
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, message)
    }
}

/// Why a manifest's signature is not accepted, or a manifest could not be signed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The key is too short to sign with.
    #[error("the signing key has {0} bytes; at least {MIN_KEY_LEN} are needed")]
    KeyTooShort(usize),
    /// The manifest has no signature.
    #[error(
        "the manifest is not signed (written before backups were signed, or not by a backup Job)"
    )]
    Unsigned,
    /// The signature is not `hmac-sha256:` and 64 lowercase hex digits.
    #[error("the manifest's signature {0:?} is not hmac-sha256: and 64 lowercase hex digits")]
    Malformed(String),
    /// The signature does not verify with the key.
    #[error(
        "the manifest's signature does not match the signing key (the manifest or the dump was \
         written by someone without the key, or the key is another cluster's)"
    )]
    Mismatch,
    /// The manifest is not a JSON object.
    #[error("the manifest is not a JSON object: {0}")]
    NotJson(String),
}

/// `manifest` (a manifest's JSON) with its signature by `key` in [`SIGNATURE_FIELD`]
/// (replacing any), as pretty JSON.
pub fn sign(manifest: &[u8], key: &SigningKey) -> Result<String, SignatureError> {
    let mut value = object(manifest)?;
    if let Some(map) = value.as_object_mut() {
        map.remove(SIGNATURE_FIELD);
    }
    let mac = hmac_sha256(&key.0, &canonical(&value));
    let signature = [SIGNATURE_PREFIX, &hex(&mac)].concat();
    if let Some(map) = value.as_object_mut() {
        map.insert(
            SIGNATURE_FIELD.to_owned(),
            serde_json::Value::String(signature),
        );
    }
    serde_json::to_string_pretty(&value).map_err(|e| SignatureError::NotJson(e.to_string()))
}

/// Checks the signature of `manifest` (a manifest's JSON as stored) with `key`.
pub fn verify(manifest: &[u8], key: &SigningKey) -> Result<(), SignatureError> {
    let mut value = object(manifest)?;
    let Some(map) = value.as_object_mut() else {
        return Err(SignatureError::NotJson("not an object".to_owned()));
    };
    let signature = match map.remove(SIGNATURE_FIELD) {
        None => return Err(SignatureError::Unsigned),
        Some(serde_json::Value::String(s)) => s,
        Some(other) => return Err(SignatureError::Malformed(other.to_string())),
    };
    let digest = signature
        .strip_prefix(SIGNATURE_PREFIX)
        .filter(|d| super::is_sha256_hex(d))
        .ok_or_else(|| SignatureError::Malformed(signature.clone()))?;
    let expected = hex(&hmac_sha256(&key.0, &canonical(&value)));
    // Every byte compared, whatever differs first.
    let differ = expected
        .bytes()
        .zip(digest.bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differ == 0 {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

fn object(manifest: &[u8]) -> Result<serde_json::Value, SignatureError> {
    let value: serde_json::Value =
        serde_json::from_slice(manifest).map_err(|e| SignatureError::NotJson(e.to_string()))?;
    if !value.is_object() {
        return Err(SignatureError::NotJson("not an object".to_owned()));
    }
    Ok(value)
}

/// `value` as canonical JSON: object keys sorted, no white space.
fn canonical(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(&serde_json::Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend_from_slice(scalar.to_string().as_bytes()),
    }
}

/// HMAC-SHA-256 (RFC 2104) of `message` with `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner_pad = block.map(|b| b ^ 0x36);
    let outer_pad = block.map(|b| b ^ 0x5c);
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> SigningKey {
        SigningKey::new(text.as_bytes()).unwrap()
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 1.
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        // Test case 2 (a key shorter than the block).
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6 (a key longer than the block is hashed first).
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_signed_manifest_verifies_and_any_change_breaks_it() {
        let manifest =
            br#"{"kind":"DatabaseBackup","size":10,"sha256":"ab","tables":{"a.b":{"rows":1}}}"#;
        let signed = sign(manifest, &key(KEY)).unwrap();
        assert!(signed.contains("\"signature\": \"hmac-sha256:"), "{signed}");
        assert_eq!(verify(signed.as_bytes(), &key(KEY)), Ok(()));
        // Signing again gives the same signature (it replaces the old one).
        assert_eq!(sign(signed.as_bytes(), &key(KEY)).unwrap(), signed);
        // Key order and white space do not matter; values, keys and added fields do.
        let mut value: serde_json::Value = serde_json::from_str(&signed).unwrap();
        let compact = serde_json::to_vec(&value).unwrap();
        assert_eq!(verify(&compact, &key(KEY)), Ok(()));
        value["size"] = serde_json::json!(11);
        let changed = serde_json::to_vec(&value).unwrap();
        assert_eq!(verify(&changed, &key(KEY)), Err(SignatureError::Mismatch));
        value["size"] = serde_json::json!(10);
        value["extra"] = serde_json::json!(true);
        let added = serde_json::to_vec(&value).unwrap();
        assert_eq!(verify(&added, &key(KEY)), Err(SignatureError::Mismatch));
        let other = "another-key-of-enough-length-0123456789";
        assert_eq!(
            verify(signed.as_bytes(), &key(other)),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn unsigned_and_malformed_signatures_are_named() {
        assert_eq!(
            verify(br#"{"kind":"DatabaseBackup"}"#, &key(KEY)),
            Err(SignatureError::Unsigned)
        );
        assert!(matches!(
            verify(br#"{"signature":"hmac-sha256:zz"}"#, &key(KEY)),
            Err(SignatureError::Malformed(_))
        ));
        assert!(matches!(
            verify(br#"{"signature":7}"#, &key(KEY)),
            Err(SignatureError::Malformed(_))
        ));
        assert!(matches!(
            verify(b"[1]", &key(KEY)),
            Err(SignatureError::NotJson(_))
        ));
        assert_eq!(
            SigningKey::new(b"short").unwrap_err(),
            SignatureError::KeyTooShort(5)
        );
    }
}
