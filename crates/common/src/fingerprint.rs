//! Password fingerprints: what the status shows of a password instead of the password. The
//! operator computes them from the Secrets it reads, the kubectl plugin's `plan` the same way,
//! so that a plan never shows a password change that is not there.

use database_operator_core::{PasswordProblem, SecretState};
use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

/// Length of a fingerprint in hex characters (64 bits).
pub const FINGERPRINT_LEN: usize = 16;

/// `hex(sha256(uid + ":" + value))`, first [`FINGERPRINT_LEN`] characters.
///
/// The Secret's uid salts the hash, so the same password in two Secrets (or in a re-created
/// Secret) gives different fingerprints, and a fingerprint cannot be looked up in a table of
/// hashed common passwords.
pub fn fingerprint(secret_uid: &str, value: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(secret_uid.as_bytes());
    hasher.update(b":");
    hasher.update(value);
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(FINGERPRINT_LEN);
    for byte in digest.iter().take(FINGERPRINT_LEN / 2) {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
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
