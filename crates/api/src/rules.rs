//! Rules shared by the schema, the CEL expressions in the CRD and [`crate::validate`]:
//! quantity parsing, S3 bucket names, and the garde validators that the spec types use.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::schedule::Schedule;

/// Longest `metadata.name` a cluster may have. Owned objects and pods derive their names from it
/// (`<name>-replicas`, `<name>-headless`, `<name>-backup`), and the StatefulSet controller puts
/// `<name>-<hash>` into a 63-character label on every pod, which leaves 52 characters.
pub const MAX_NAME_LEN: usize = 52;

/// Suffix of the read-only Service's name: `<name>-replicas`.
pub const REPLICAS_SERVICE_SUFFIX: &str = "-replicas";
/// Suffix of the headless governing Service's name: `<name>-headless`.
pub const HEADLESS_SERVICE_SUFFIX: &str = "-headless";
/// Suffixes of the Secrets the operator writes for a cluster's TLS: `<name>-tls` (the members'
/// certificate), `<name>-ca` (the published authority), `<name>-ca-key` (its own authority).
pub const OPERATOR_TLS_SECRET_SUFFIXES: [&str; 3] = ["-tls", "-ca", "-ca-key"];

/// The cluster whose Service names `name` would share, if any: a cluster `x-replicas` (or
/// `x-headless`) names its read-write Service like cluster `x`'s read-only (or headless) one.
///
/// ```
/// use database_operator_api::rules::service_name_shared_with;
/// assert_eq!(service_name_shared_with("orders-replicas"), Some("orders"));
/// assert_eq!(service_name_shared_with("orders"), None);
/// ```
pub fn service_name_shared_with(name: &str) -> Option<&str> {
    [REPLICAS_SERVICE_SUFFIX, HEADLESS_SERVICE_SUFFIX]
        .into_iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .filter(|prefix| !prefix.is_empty())
}

/// `(rule, message)`: the cluster name fits the objects derived from it.
pub const CEL_NAME_LENGTH: (&str, &str) = (
    "size(self.metadata.name) <= 52",
    "metadata.name must be at most 52 characters: the StatefulSet, Services, CronJob and pod labels derived from it must stay within Kubernetes name limits",
);

/// `(rule, message)`: the cluster name is a DNS-1035 label, since Services are named after it.
pub const CEL_NAME_FORMAT: (&str, &str) = (
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): Services are named after it",
);

/// `(rule, message)`: the engine never changes.
pub const CEL_ENGINE_IMMUTABLE: (&str, &str) = (
    "self.spec.engine == oldSelf.spec.engine",
    "spec.engine is immutable: the data on disk belongs to one engine; create a new cluster and migrate the data instead",
);

/// `(rule, message)`: `spec.bootstrap` is set at creation only; it may be removed later, never
/// added or changed (it only acts on the first start of a cluster).
pub const CEL_BOOTSTRAP_IMMUTABLE: (&str, &str) = (
    "!has(self.spec.bootstrap) || (has(oldSelf.spec.bootstrap) && self.spec.bootstrap == oldSelf.spec.bootstrap)",
    "spec.bootstrap may only be set when the cluster is created (it acts once, on the first start of its first member); it may be removed, not added or changed",
);

/// `(rule, message)`: the storage class, once set, never changes.
pub const CEL_STORAGE_CLASS_IMMUTABLE: (&str, &str) = (
    "!has(oldSelf.spec.storage.storageClassName) || (has(self.spec.storage.storageClassName) && self.spec.storage.storageClassName == oldSelf.spec.storage.storageClassName)",
    "spec.storage.storageClassName is immutable once set: existing volumes cannot move to another storage class",
);

/// `(rule, message)`: storage never shrinks.
pub const CEL_STORAGE_NO_SHRINK: (&str, &str) = (
    "quantity(self.spec.storage.size).compareTo(quantity(oldSelf.spec.storage.size)) >= 0",
    "spec.storage.size may not shrink: volumes cannot be made smaller without losing data",
);

/// The storage size pattern the schema enforces: a positive Kubernetes quantity in bytes, with
/// an optional binary (`Ki`..`Ei`) or decimal (`k`..`E`) suffix or an exponent.
pub const STORAGE_QUANTITY_PATTERN: &str =
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[kMGTPE]|([eE][+]?[0-9]+))?$";

/// Schema of a storage quantity: a string with [`STORAGE_QUANTITY_PATTERN`].
pub fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": STORAGE_QUANTITY_PATTERN,
    })
}

/// Parses a Kubernetes quantity of bytes (`20Gi`, `500M`, `1.5Ti`, `1e9`) into a byte count.
/// Returns `None` when the text is not a non-negative quantity of the shape
/// [`STORAGE_QUANTITY_PATTERN`] describes.
///
/// ```
/// use database_operator_api::rules::quantity_bytes;
/// assert_eq!(quantity_bytes("20Gi"), Some(20.0 * 1024.0 * 1024.0 * 1024.0));
/// assert_eq!(quantity_bytes("1.5k"), Some(1500.0));
/// assert_eq!(quantity_bytes("ten"), None);
/// ```
pub fn quantity_bytes(s: &str) -> Option<f64> {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exp if exp.starts_with(['e', 'E']) => {
            let digits = exp[1..].strip_prefix('+').unwrap_or(&exp[1..]);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(digits.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    let bytes = value * multiplier;
    bytes.is_finite().then_some(bytes)
}

/// garde rule for `spec.storage.size`: a positive quantity of bytes.
pub fn storage_size(size: &Quantity, _: &()) -> garde::Result {
    match quantity_bytes(&size.0) {
        None => Err(garde::Error::new(format!(
            "{:?} is not a storage quantity such as 20Gi (pattern {STORAGE_QUANTITY_PATTERN})",
            size.0
        ))),
        Some(b) if b < 1.0 => Err(garde::Error::new(format!(
            "{:?} must be greater than zero",
            size.0
        ))),
        Some(_) => Ok(()),
    }
}

/// garde rule for `spec.bootstrap.fromBackup.targetTime`: an RFC 3339 time with a zone.
pub fn rfc3339_time(text: &str, _: &()) -> garde::Result {
    text.parse::<jiff::Timestamp>().map(|_| ()).map_err(|e| {
        garde::Error::new(format!(
            "{text:?} is not an RFC 3339 time with a zone, such as 2026-03-01T04:04:00Z: {e}"
        ))
    })
}

/// garde rule for `spec.backup.schedule`: a cron expression the CronJob controller accepts and
/// that fires at least once.
pub fn cron_schedule(expr: &str, _: &()) -> garde::Result {
    Schedule::parse(expr)
        .map(|_| ())
        .map_err(|e| garde::Error::new(format!("invalid cron schedule {expr:?}: {e}")))
}

/// Checks an S3 bucket name against the S3 naming rules for general purpose buckets.
///
/// ```
/// use database_operator_api::rules::check_s3_bucket;
/// assert!(check_s3_bucket("my-db-backups").is_ok());
/// assert!(check_s3_bucket("My_Bucket").is_err());
/// assert!(check_s3_bucket("192.168.5.4").is_err());
/// ```
pub fn check_s3_bucket(name: &str) -> Result<(), String> {
    let len = name.len();
    if !(3..=63).contains(&len) {
        return Err(format!("must be 3 to 63 characters long (has {len})"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '.' || *c == '-'))
    {
        return Err(format!(
            "may contain only lowercase letters, digits, '.' and '-' (found {c:?})"
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err("must start and end with a lowercase letter or digit".into());
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return Err("must not contain '..', '.-' or '-.'".into());
    }
    let octets: Vec<&str> = name.split('.').collect();
    if octets.len() == 4
        && octets
            .iter()
            .all(|o| !o.is_empty() && o.len() <= 3 && o.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("must not be formatted as an IP address".into());
    }
    for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(prefix) {
            return Err(format!(
                "must not start with the reserved prefix {prefix:?}"
            ));
        }
    }
    for suffix in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(suffix) {
            return Err(format!("must not end with the reserved suffix {suffix:?}"));
        }
    }
    Ok(())
}

/// garde rule for `spec.backup.s3Bucket`.
pub fn s3_bucket(name: &str, _: &()) -> garde::Result {
    check_s3_bucket(name)
        .map_err(|e| garde::Error::new(format!("invalid S3 bucket name {name:?}: {e}")))
}

/// A cluster name (for `spec.bootstrap.fromBackup.cluster`), as [`check_cluster_name`].
pub fn cluster_name(name: &str, _: &()) -> garde::Result {
    check_cluster_name(name)
        .map_err(|e| garde::Error::new(format!("invalid cluster name {name:?}: {e}")))
}

/// Checks that `name` is a DNS-1035 label of at most [`MAX_NAME_LEN`] characters.
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "must be at most {MAX_NAME_LEN} characters (has {}): the StatefulSet, Services, CronJob and pod labels derived from it must stay within Kubernetes name limits",
            name.len()
        ));
    }
    let bytes = name.as_bytes();
    let ok_inner = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !ok_inner || !bytes[0].is_ascii_lowercase() || bytes[bytes.len() - 1] == b'-' {
        return Err("must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): Services are named after it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let gi = 1024f64.powi(3);
        for (q, want) in [
            ("20Gi", Some(20.0 * gi)),
            ("1Ti", Some(1024.0 * gi)),
            ("500M", Some(5e8)),
            ("1.5Gi", Some(1.5 * gi)),
            (".5Ki", Some(512.0)),
            ("1e9", Some(1e9)),
            ("1E+3", Some(1e3)),
            ("100", Some(100.0)),
            ("", None),
            ("Gi", None),
            ("20GB", None),
            ("20gi", None),
            ("-1Gi", None),
            ("1..2Gi", None),
            ("1e", None),
        ] {
            assert_eq!(quantity_bytes(q), want, "{q}");
        }
    }

    #[test]
    fn quantity_pattern_and_parser_agree() {
        let re = regex_lite(STORAGE_QUANTITY_PATTERN);
        for q in [
            "20Gi", "1.5Ti", "10", ".5Mi", "1e9", "1E+3", "3k", "x", "20GB", "-1", "1m", "", "5.",
            "1.2.3",
        ] {
            assert_eq!(re(q), quantity_bytes(q).is_some(), "{q}");
        }
    }

    // A tiny matcher for the one pattern above, so the test does not depend on a regex crate's
    // dialect: it walks the grammar the pattern spells out.
    fn regex_lite(_pattern: &str) -> impl Fn(&str) -> bool {
        |s: &str| {
            let num_end = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(s.len());
            let (num, suffix) = s.split_at(num_end);
            let num_ok = match num.split_once('.') {
                None => !num.is_empty(),
                Some((a, b)) => !b.contains('.') && (!a.is_empty() || !b.is_empty()),
            };
            let suffix_ok = matches!(
                suffix,
                "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "k" | "M" | "G" | "T" | "P" | "E"
            ) || (suffix.starts_with(['e', 'E']) && {
                let d = suffix[1..].strip_prefix('+').unwrap_or(&suffix[1..]);
                !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
            });
            num_ok && suffix_ok
        }
    }

    #[test]
    fn bucket_names() {
        for ok in ["my-db-backups", "abc", "a.b.c", "backups-2026", "0bucket0"] {
            assert!(check_s3_bucket(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("ab", "3 to 63"),
            (&"a".repeat(64), "3 to 63"),
            ("My-Bucket", "lowercase"),
            ("my_bucket", "lowercase"),
            ("-bucket", "start and end"),
            ("bucket.", "start and end"),
            ("my..bucket", "'..'"),
            ("my.-bucket", "'..'"),
            ("192.168.5.4", "IP address"),
            ("xn--bucket", "reserved prefix"),
            ("sthree-bucket", "reserved prefix"),
            ("bucket-s3alias", "reserved suffix"),
            ("bucket--ol-s3", "reserved suffix"),
        ] {
            let err = check_s3_bucket(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn cluster_names() {
        assert!(check_cluster_name("my-mysql").is_ok());
        assert!(check_cluster_name(&"a".repeat(52)).is_ok());
        assert!(
            check_cluster_name(&"a".repeat(53))
                .unwrap_err()
                .contains("at most 52")
        );
        for bad in ["1db", "My-db", "db-", "db.prod", "db_prod", ""] {
            assert!(check_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
