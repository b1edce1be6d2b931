//! The one error type of the controller, with a category per variant.
//!
//! The category is the `category` label of `database_operator_reconcile_errors_total` and the
//! reason of the Warning event an error produces, so a dashboard and `kubectl describe` speak
//! the same words.

use std::time::Duration;

use database_operator_core::EventReason;

/// Why a reconcile (or one step of it) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed for a reason other than a conflict.
    #[error("{verb} {kind} {namespace}/{name}: {}", describe(source))]
    Kube {
        /// What was attempted: `apply`, `delete`, `patch`, `get`, ...
        verb: &'static str,
        /// Kind of the object.
        kind: &'static str,
        /// Namespace of the object.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server answered 409 Conflict (or a failed JSON-patch precondition): somebody else
    /// wrote the object in between. Harmless; the next reconcile sees the new version.
    #[error("conflict on {verb} {kind} {namespace}/{name}: {message}")]
    Conflict {
        /// What was attempted.
        verb: &'static str,
        /// Kind of the object.
        kind: &'static str,
        /// Namespace of the object.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// Before a database step this replica could not confirm that it still leads (the
    /// operator's leader Lease names another holder, has expired, or could not be read): the
    /// step is not carried out. Whoever leads repeats it from the status.
    #[error("database steps not carried out: leadership not confirmed: {why}")]
    Leadership {
        /// What the check found.
        why: String,
    },
    /// A `DatabaseCluster` could not be read into the typed API (it fails alone; the others go
    /// on).
    #[error("DatabaseCluster {namespace}/{name} cannot be read: {message}")]
    InvalidObject {
        /// Namespace of the object.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The deserialisation error, with the field path.
        message: String,
    },
    /// The referenced password Secret could not be read.
    #[error("reading Secret {namespace}/{name}: {}", describe(source))]
    Secret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Cleanup on deletion failed (the finalizer stays; the cleanup is retried).
    #[error("cleanup of DatabaseCluster {namespace}/{name}: {message}")]
    Cleanup {
        /// Namespace of the cluster.
        namespace: String,
        /// Name of the cluster.
        name: String,
        /// What failed and where to look.
        message: String,
    },
    /// The operating system's random source failed while generating the operator Secret's
    /// passwords (nothing was written).
    #[error("generating the passwords of the operator Secret: the random source failed: {0}")]
    Random(String),
    /// The plan asked to create the operator Secret again with the values last read, but this
    /// process holds none (it restarted since): nothing was written, and the next pass reports
    /// the Secret lost.
    #[error(
        "Secret {namespace}/{name} was deleted and this operator holds no values of it: nothing was created (new passwords would lock the operator out)"
    )]
    NothingToRestore {
        /// Namespace.
        namespace: String,
        /// The operator Secret's name.
        name: String,
    },
    /// An object the cluster needs exists under its name and is not the cluster's (no
    /// controller reference to it): the operator writes nothing to it.
    #[error(
        "{kind} {namespace}/{name} exists and is not this cluster's ({owner}): the operator never takes over an object it did not create; remove or rename that object, or give the cluster another name"
    )]
    NotOwned {
        /// The object's kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Who controls it, in words.
        owner: String,
    },
    /// The cluster's TLS material could not be made or read ([`crate::tls_issuer`]).
    #[error("TLS of DatabaseCluster {namespace}/{name}: {message}")]
    Certificate {
        /// Namespace.
        namespace: String,
        /// The cluster's name.
        name: String,
        /// What failed (making or reading a certificate, a Secret without its keys).
        message: String,
    },
    /// An object could not be turned into a request body (a programming error; reported, not
    /// panicked on).
    #[error("serialising {kind} {name}: {source}")]
    Serialize {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

/// A client error in one line: the API server's message and code for API errors.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            if status.reason.is_empty() {
                format!("{} (HTTP {})", status.message, status.code)
            } else {
                format!(
                    "{} (HTTP {} {})",
                    status.message, status.code, status.reason
                )
            }
        }
        other => other.to_string(),
    }
}

/// The coarse class of an [`Error`]: a metric label and a Warning event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCategory {
    /// API errors other than conflicts.
    Kube,
    /// HTTP 409 or a failed precondition.
    Conflict,
    /// A `DatabaseCluster` that does not deserialise.
    InvalidObject,
    /// The password Secret could not be read.
    Secret,
    /// Cleanup on deletion failed.
    Cleanup,
    /// A request body could not be built.
    Serialize,
    /// An object the cluster needs exists under its name and belongs to someone else.
    NotOwned,
    /// Leadership not confirmed before a database step.
    Leadership,
}

impl ErrorCategory {
    /// Every category, for pre-registering metric series.
    pub const ALL: [ErrorCategory; 8] = [
        ErrorCategory::Kube,
        ErrorCategory::Conflict,
        ErrorCategory::InvalidObject,
        ErrorCategory::Secret,
        ErrorCategory::Cleanup,
        ErrorCategory::Serialize,
        ErrorCategory::NotOwned,
        ErrorCategory::Leadership,
    ];

    /// The `category` metric label.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ErrorCategory::Kube => "Kube",
            ErrorCategory::Conflict => "Conflict",
            ErrorCategory::InvalidObject => "InvalidObject",
            ErrorCategory::Secret => "Secret",
            ErrorCategory::Cleanup => "Cleanup",
            ErrorCategory::Serialize => "Serialize",
            ErrorCategory::NotOwned => "NotOwned",
            ErrorCategory::Leadership => "Leadership",
        }
    }

    /// The reason of the Warning event an error of this category produces (CamelCase).
    pub const fn event_reason(&self) -> EventReason {
        match self {
            ErrorCategory::Kube => EventReason::ApiCallFailed,
            ErrorCategory::Conflict => EventReason::Conflict,
            ErrorCategory::InvalidObject => EventReason::InvalidObject,
            ErrorCategory::Secret => EventReason::SecretUnreadable,
            ErrorCategory::Cleanup => EventReason::CleanupFailed,
            ErrorCategory::Serialize => EventReason::InternalError,
            ErrorCategory::NotOwned => EventReason::ObjectNotOwned,
            // Never published: a replica that may not lead writes no event (see
            // `reconcile::report_error`).
            ErrorCategory::Leadership => EventReason::LeadershipUnconfirmed,
        }
    }
}

impl Error {
    /// The category of this error.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Kube { .. } => ErrorCategory::Kube,
            Error::Conflict { .. } => ErrorCategory::Conflict,
            Error::InvalidObject { .. } => ErrorCategory::InvalidObject,
            Error::Secret { .. } => ErrorCategory::Secret,
            Error::Cleanup { .. } => ErrorCategory::Cleanup,
            Error::Serialize { .. } | Error::Random(_) => ErrorCategory::Serialize,
            Error::NothingToRestore { .. } | Error::Certificate { .. } => ErrorCategory::Secret,
            Error::NotOwned { .. } => ErrorCategory::NotOwned,
            Error::Leadership { .. } => ErrorCategory::Leadership,
        }
    }

    /// Whether this is a conflict (requeue at once, quietly).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Classifies a failed API call: 409 Conflict becomes [`Error::Conflict`], everything else
    /// [`Error::Kube`].
    pub fn api(
        verb: &'static str,
        kind: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
    ) -> Self {
        Self::classify(verb, kind, namespace, name, source, false)
    }

    /// Like [`Error::api`] for a JSON patch guarded by a `test` operation: the API server
    /// answers 422 when the test fails (the object changed in between), which is a conflict too.
    pub fn api_guarded(
        verb: &'static str,
        kind: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
    ) -> Self {
        Self::classify(verb, kind, namespace, name, source, true)
    }

    fn classify(
        verb: &'static str,
        kind: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
        guarded: bool,
    ) -> Self {
        if let kube::Error::Api(status) = &source
            && (status.code == 409 || (guarded && status.code == 422))
        {
            return Error::Conflict {
                verb,
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                message: status.message.clone(),
            };
        }
        Error::Kube {
            verb,
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        }
    }
}

/// Retry delays after errors: exponential per cluster, capped, reset by a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Delay after a conflict (not counted as a failure).
    pub conflict: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(300),
            conflict: Duration::from_millis(500),
        }
    }
}

impl Backoff {
    /// Delay before the next attempt after `failures` consecutive failures (1 = first).
    pub fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(16);
        self.initial.saturating_mul(1u32 << exponent).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.to_owned(),
            reason: "Conflict".to_owned(),
            ..Default::default()
        }))
    }

    #[test]
    fn conflicts_are_classified() {
        let e = Error::api(
            "apply",
            "StatefulSet",
            "db",
            "orders",
            status(409, "the object has been modified"),
        );
        assert_eq!(e.category(), ErrorCategory::Conflict);
        assert!(e.is_conflict());
        let e = Error::api_guarded(
            "patch",
            "DatabaseCluster",
            "db",
            "orders",
            status(
                422,
                "the server rejected our request due to an error in our request",
            ),
        );
        assert!(e.is_conflict());
        let e = Error::api(
            "patch",
            "DatabaseCluster",
            "db",
            "orders",
            status(422, "spec.replicas: Invalid value"),
        );
        assert!(!e.is_conflict());
        let e = Error::api(
            "apply",
            "StatefulSet",
            "db",
            "orders",
            status(403, "forbidden"),
        );
        assert_eq!(e.category(), ErrorCategory::Kube);
        assert_eq!(
            e.to_string(),
            "apply StatefulSet db/orders: forbidden (HTTP 403 Conflict)"
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff::default();
        let delays: Vec<u64> = (1..=9).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn every_category_has_distinct_names() {
        let names: std::collections::BTreeSet<_> =
            ErrorCategory::ALL.iter().map(|c| c.as_str()).collect();
        let reasons: std::collections::BTreeSet<_> = ErrorCategory::ALL
            .iter()
            .map(|c| c.event_reason().as_str())
            .collect();
        assert_eq!(names.len(), ErrorCategory::ALL.len());
        assert_eq!(reasons.len(), ErrorCategory::ALL.len());
    }
}
