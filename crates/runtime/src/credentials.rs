//! The values of the operator Secret `<name>-operator`: generated here, at the moment the
//! Secret is created, from the operating system's random source, and written once.
//!
//! The core decides that the Secret is created and renders its metadata
//! ([`database_operator_core::credentials::SecretChange::Create`]); this module only fills in the
//! accounts' names and fresh passwords. Nothing here logs, caches or returns a password other
//! than inside the Secret that is sent to the API server.

use std::collections::BTreeMap;

use database_operator_core::credentials::{
    ADMIN_PASSWORD_KEY, ADMIN_USER, ADMIN_USERNAME_KEY, REPLICATION_PASSWORD_KEY, REPLICATION_USER,
    REPLICATION_USERNAME_KEY, SIGNING_KEY_KEY,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use crate::error::Error;

/// Length of a generated password: 32 characters of 62 (about 190 bits).
pub const PASSWORD_LEN: usize = 32;

/// The characters of a generated password: letters and digits only, so a password needs no
/// quoting in SQL, option files, `.pgpass` or connection strings.
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A fresh random password of [`PASSWORD_LEN`] characters from [`ALPHABET`], uniformly
/// distributed (bytes at or above the largest multiple of the alphabet's size are discarded).
pub fn generate_password() -> Result<String, Error> {
    let limit = u8::try_from(256 - 256 % ALPHABET.len()).unwrap_or(u8::MAX);
    let mut password = String::with_capacity(PASSWORD_LEN);
    let mut buf = [0u8; 64];
    while password.len() < PASSWORD_LEN {
        getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
        for &b in &buf {
            if b < limit && password.len() < PASSWORD_LEN {
                password.push(char::from(ALPHABET[usize::from(b) % ALPHABET.len()]));
            }
        }
    }
    Ok(password)
}

/// A fresh backup signing key: 32 bytes from the operating system's random source, as 64
/// lowercase hex digits.
pub fn generate_signing_key() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
    Ok(database_operator_core::backup::hex(&bytes))
}

/// `metadata` (as the core rendered it) with `data` (what an operator Secret held when it was
/// last read: [`database_operator_core::credentials::SecretChange::Restore`]).
pub fn with_values(metadata: &Secret, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        data: Some(data),
        string_data: None,
        ..metadata.clone()
    }
}

/// `metadata` (as the core rendered it) with the accounts and freshly generated passwords.
pub fn with_generated_values(metadata: &Secret) -> Result<Secret, Error> {
    let entry = |key: &str, value: String| (key.to_owned(), ByteString(value.into_bytes()));
    let data = BTreeMap::from([
        entry(ADMIN_USERNAME_KEY, ADMIN_USER.to_owned()),
        entry(ADMIN_PASSWORD_KEY, generate_password()?),
        entry(REPLICATION_USERNAME_KEY, REPLICATION_USER.to_owned()),
        entry(REPLICATION_PASSWORD_KEY, generate_password()?),
        entry(SIGNING_KEY_KEY, generate_signing_key()?),
    ]);
    Ok(Secret {
        data: Some(data),
        string_data: None,
        ..metadata.clone()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn passwords_are_long_alphanumeric_and_different() {
        let passwords: BTreeSet<String> = (0..200).map(|_| generate_password().unwrap()).collect();
        assert_eq!(passwords.len(), 200, "no two alike");
        for p in &passwords {
            assert_eq!(p.len(), PASSWORD_LEN);
            assert!(p.bytes().all(|b| ALPHABET.contains(&b)), "{p}");
        }
        // Every character of the alphabet turns up (6400 draws of 62: missing one is
        // vanishingly unlikely for a uniform source, certain for a broken one).
        let seen: BTreeSet<u8> = passwords.iter().flat_map(|p| p.bytes()).collect();
        assert_eq!(seen.len(), ALPHABET.len());
    }

    #[test]
    fn the_secret_keeps_the_rendered_metadata_and_gets_every_key() {
        let mut rendered = Secret::default();
        rendered.metadata.name = Some("orders-operator".into());
        rendered.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        rendered.type_ = Some("Opaque".into());
        let secret = with_generated_values(&rendered).unwrap();
        assert_eq!(secret.metadata, rendered.metadata);
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        let data = secret.data.unwrap();
        let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(text(ADMIN_USERNAME_KEY), "database_operator");
        assert_eq!(text(REPLICATION_USERNAME_KEY), "replicator");
        assert_eq!(text(ADMIN_PASSWORD_KEY).len(), PASSWORD_LEN);
        assert_ne!(text(ADMIN_PASSWORD_KEY), text(REPLICATION_PASSWORD_KEY));
        let key = text(SIGNING_KEY_KEY);
        assert_eq!(key.len(), 64, "{key}");
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(key, generate_signing_key().unwrap());
    }
}
