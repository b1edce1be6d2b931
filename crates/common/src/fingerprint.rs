//! Password fingerprints: what the status shows of a password instead of the password. The
//! operator computes them from the Secrets it reads, the kubectl plugin's `plan` the same way,
//! so that a plan never shows a password change that is not there.

use database_operator_core::backup::signature::SigningKey;
use database_operator_core::{PasswordProblem, SecretState};
use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

/// Length of a fingerprint in hex characters (64 bits).
pub const FINGERPRINT_LEN: usize = 16;

/// What a keyed fingerprint's message starts with: it sets these messages apart from the
/// key's other use (signing backup manifests, which are JSON objects).
const KEYED_CONTEXT: &[u8] = b"database-operator password fingerprint\0";

/// `hex(sha256(uid + ":" + value))`, first [`FINGERPRINT_LEN`] characters: the unkeyed
/// fingerprint, of releases before keyed fingerprints and of a cluster without its key yet.
///
/// The Secret's uid salts the hash, so the same password in two Secrets (or in a re-created
/// Secret) gives different fingerprints, and a fingerprint cannot be looked up in a table of
/// hashed common passwords. Anyone who can read it can still test guesses of the password
/// offline: [`keyed_fingerprint`] is what the operator records once the cluster has its key.
pub fn fingerprint(secret_uid: &str, value: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(secret_uid.as_bytes());
    hasher.update(b":");
    hasher.update(value);
    hex(&hasher.finalize())
}

/// `hex(hmac-sha256(key, context + uid + ":" + value))`, first [`FINGERPRINT_LEN`] characters,
/// with the cluster's key (the operator Secret's `backup-signing-key`): without the key, a
/// fingerprint in the status or an event tells nothing about the password and cannot be used
/// to test guesses.
pub fn keyed_fingerprint(key: &SigningKey, secret_uid: &str, value: &[u8]) -> String {
    let mut message = Vec::with_capacity(KEYED_CONTEXT.len() + secret_uid.len() + 1 + value.len());
    message.extend_from_slice(KEYED_CONTEXT);
    message.extend_from_slice(secret_uid.as_bytes());
    message.push(b':');
    message.extend_from_slice(value);
    hex(&key.mac(&message))
}

/// The first [`FINGERPRINT_LEN`] hex digits of `digest`.
fn hex(digest: &[u8]) -> String {
    let mut hex = String::with_capacity(FINGERPRINT_LEN);
    for byte in digest.iter().take(FINGERPRINT_LEN / 2) {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

/// The fingerprints of `value` in Secret `secret_uid`: keyed with `key` when the cluster has one
/// (with the unkeyed one beside it, for a status that records that), else unkeyed alone.
pub fn fingerprints(
    key: Option<&SigningKey>,
    secret_uid: &str,
    value: &[u8],
) -> (String, Option<String>) {
    let unkeyed = fingerprint(secret_uid, value);
    match key {
        Some(key) => (keyed_fingerprint(key, secret_uid, value), Some(unkeyed)),
        None => (unkeyed, None),
    }
}

/// [`state_of`] with the cluster's fingerprint key: the state, and the unkeyed fingerprint of
/// the value when the state's is keyed
/// ([`Observed::secret_unkeyed_fingerprint`](database_operator_core::Observed::secret_unkeyed_fingerprint)).
pub fn state_of_keyed(
    secret: &Secret,
    key_name: &str,
    fingerprint_key: Option<&SigningKey>,
) -> (SecretState, Option<String>) {
    match secret.data.as_ref().and_then(|d| d.get(key_name)) {
        Some(value) => match PasswordProblem::of(&value.0) {
            Some(problem) => (SecretState::Unusable { problem }, None),
            None => {
                let uid = secret.metadata.uid.as_deref().unwrap_or_default();
                let (fingerprint, unkeyed) = fingerprints(fingerprint_key, uid, &value.0);
                (SecretState::Present { fingerprint }, unkeyed)
            }
        },
        None => (SecretState::KeyMissing, None),
    }
}

/// What [`SecretState`] a Secret gives for `key`: a value that cannot be a password
/// ([`PasswordProblem::of`]) is [`SecretState::Unusable`], never fingerprinted.
pub fn state_of(secret: &Secret, key: &str) -> SecretState {
    match secret.data.as_ref().and_then(|d| d.get(key)) {
        Some(value) => match PasswordProblem::of(&value.0) {
            Some(problem) => SecretState::Unusable { problem },
            None => SecretState::Present {
                fingerprint: fingerprint(
                    secret.metadata.uid.as_deref().unwrap_or_default(),
                    &value.0,
                ),
            },
        },
        None => SecretState::KeyMissing,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn secret(uid: &str, key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                uid: Some(uid.to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                key.to_owned(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[test]
    fn a_keyed_fingerprint_needs_the_key_and_differs_from_the_unkeyed_one() {
        let key = SigningKey::new(&[7u8; 64]).unwrap();
        let other = SigningKey::new(&[8u8; 64]).unwrap();
        let a = keyed_fingerprint(&key, "uid-a", b"hunter2");
        assert_eq!(a.len(), FINGERPRINT_LEN);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, keyed_fingerprint(&key, "uid-a", b"hunter2"));
        assert_ne!(a, keyed_fingerprint(&other, "uid-a", b"hunter2"));
        assert_ne!(a, keyed_fingerprint(&key, "uid-b", b"hunter2"));
        assert_ne!(a, keyed_fingerprint(&key, "uid-a", b"hunter3"));
        assert_ne!(a, fingerprint("uid-a", b"hunter2"));
        // HMAC-SHA-256 with the context (Python's hmac computed the value): a change would
        // re-key every status.
        assert_eq!(keyed_fingerprint(&key, "u", b"v"), "94bb5f5feb0a54b1");
        let s = secret("uid-a", "password", "hunter2");
        assert_eq!(
            state_of_keyed(&s, "password", Some(&key)),
            (
                SecretState::Present { fingerprint: a },
                Some(fingerprint("uid-a", b"hunter2"))
            )
        );
        assert_eq!(
            state_of_keyed(&s, "password", None),
            (state_of(&s, "password"), None),
            "without a key, the unkeyed fingerprint alone"
        );
    }

    #[test]
    fn a_fingerprint_is_salted_by_the_secret_and_changes_with_the_value() {
        let a = fingerprint("uid-a", b"hunter2");
        assert_eq!(a.len(), FINGERPRINT_LEN);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, fingerprint("uid-a", b"hunter2"));
        assert_ne!(a, fingerprint("uid-b", b"hunter2"));
        assert_ne!(a, fingerprint("uid-a", b"hunter3"));
    }

    #[test]
    fn state_of_reads_the_key_or_says_it_is_missing() {
        let s = secret("uid-a", "password", "hunter2");
        assert_eq!(
            state_of(&s, "password"),
            SecretState::Present {
                fingerprint: fingerprint("uid-a", b"hunter2")
            }
        );
        assert_eq!(state_of(&s, "other"), SecretState::KeyMissing);
    }

    #[test]
    fn a_value_that_cannot_be_a_password_is_unusable_and_never_fingerprinted() {
        for (value, problem) in [
            (&b"line\nbreak"[..], PasswordProblem::LineBreak),
            (b"carriage\rreturn", PasswordProblem::LineBreak),
            (b"trailing newline\n", PasswordProblem::LineBreak),
            (b"nul\0byte", PasswordProblem::Nul),
            (b"", PasswordProblem::Empty),
            (b"\xff\xfe latin", PasswordProblem::NotText),
        ] {
            let mut s = secret("uid-a", "password", "x");
            s.data
                .as_mut()
                .unwrap()
                .insert("password".into(), ByteString(value.to_vec()));
            assert_eq!(
                state_of(&s, "password"),
                SecretState::Unusable { problem },
                "{value:?}"
            );
        }
        // Spaces, quotes, backslashes and non-ASCII text are passwords like any other.
        for value in ["with space", "quote ' and \" \\", "pässwört ✓", "tab\there"] {
            let s = secret("uid-a", "password", value);
            assert!(
                matches!(state_of(&s, "password"), SecretState::Present { .. }),
                "{value:?}"
            );
        }
    }
}
