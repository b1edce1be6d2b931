//! Who may read `/metrics` when it is served securely (`--metrics-secure`): a client with a
//! bearer token the API server authenticates (a TokenReview) whose user may `get` the
//! non-resource URL `/metrics` (a SubjectAccessReview), as controller-runtime's secure metrics
//! and kube-rbac-proxy decide. The ClusterRole `database-operator-metrics-reader` (deploy/rbac)
//! grants exactly that; Prometheus's ServiceAccount is bound to it.
//!
//! Decisions are kept for a minute per token (its SHA-256, never the token), so a scrape every
//! few seconds costs two API requests a minute, and a revoked binding stops a scraper within
//! that minute. A failed review (the API server unreachable, or no answer within 5 s) is
//! answered 503 and not kept. Whoever can reach the port can send made-up tokens, each a review:
//! at most [`MAX_REVIEWS`] run at once (the others wait), and a full cache drops its expired
//! decisions, then its oldest, never the whole of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

/// The path and verb a reader must be allowed.
pub const METRICS_PATH: &str = "/metrics";

/// How long a decision is kept.
pub const DECISION_TTL: Duration = Duration::from_secs(60);

/// Most decisions kept (tokens are few: the scrapers'); past it the expired go, then the oldest.
const MAX_DECISIONS: usize = 1024;

/// Most reviews under way at once.
pub const MAX_REVIEWS: usize = 4;

/// How long one review (a TokenReview and a SubjectAccessReview) may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// What a request with a token is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The token's user may read the metrics.
    Allowed,
    /// No token, or one the API server does not accept: 401.
    Unauthenticated(String),
    /// An authenticated user without the permission: 403.
    Forbidden(String),
}

/// The API server's answers, as the authorizer needs them (the kube implementation is
/// [`KubeReviews`]; tests give their own).
pub trait Reviews: Send + Sync {
    /// The user and groups of `token`, `None` when the API server does not accept it.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<(String, Vec<String>)>, kube::Error>> + Send;
    /// Whether `user` (with `groups`) may `get` [`METRICS_PATH`].
    fn may_read(
        &self,
        user: &str,
        groups: &[String],
    ) -> impl Future<Output = Result<bool, kube::Error>> + Send;
}

/// TokenReview and SubjectAccessReview through the operator's client.
pub struct KubeReviews(pub kube::Client);

impl Reviews for KubeReviews {
    async fn authenticate(
        &self,
        token: &str,
    ) -> Result<Option<(String, Vec<String>)>, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.0.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some((
            user.username.unwrap_or_default(),
            user.groups.unwrap_or_default(),
        )))
    }

    async fn may_read(&self, user: &str, groups: &[String]) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_owned()),
                groups: Some(groups.to_vec()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.0.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// The authorizer: reviews and the decisions of the last minute.
pub struct MetricsAuth<R> {
    reviews: R,
    decisions: Mutex<HashMap<[u8; 32], (Instant, Decision)>>,
    slots: tokio::sync::Semaphore,
}

/// Why a token could not be reviewed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The API server answered with an error or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// No answer within [`REVIEW_TIMEOUT`].
    #[error("no answer from the API server within {REVIEW_TIMEOUT:?}")]
    TimedOut,
}

impl<R: Reviews> MetricsAuth<R> {
    /// An authorizer asking `reviews`.
    pub fn new(reviews: R) -> Self {
        Self {
            reviews,
            decisions: Mutex::new(HashMap::new()),
            slots: tokio::sync::Semaphore::new(MAX_REVIEWS),
        }
    }

    /// The decision for a request carrying `authorization` (the header's value), at `now`.
    /// `Err`: the API server could not be asked (nothing is kept).
    pub async fn decide(
        &self,
        authorization: Option<&str>,
        now: Instant,
    ) -> Result<Decision, ReviewError> {
        let Some(token) = authorization.and_then(bearer_token) else {
            return Ok(Decision::Unauthenticated(
                "a bearer token is required (Authorization: Bearer <token>)".to_owned(),
            ));
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((at, decision)) = self.lock().get(&key)
            && now.saturating_duration_since(*at) < DECISION_TTL
        {
            return Ok(decision.clone());
        }
        let decision = {
            // The semaphore is never closed.
            let _slot = self.slots.acquire().await.ok();
            tokio::time::timeout(REVIEW_TIMEOUT, self.review(token))
                .await
                .map_err(|_| ReviewError::TimedOut)??
        };
        let mut decisions = self.lock();
        if decisions.len() >= MAX_DECISIONS {
            decisions.retain(|_, (at, _)| now.saturating_duration_since(*at) < DECISION_TTL);
        }
        if decisions.len() >= MAX_DECISIONS
            && let Some(oldest) = decisions
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| *k)
        {
            decisions.remove(&oldest);
        }
        decisions.insert(key, (now, decision.clone()));
        Ok(decision)
    }

    async fn review(&self, token: &str) -> Result<Decision, kube::Error> {
        Ok(match self.reviews.authenticate(token).await? {
            None => Decision::Unauthenticated("the token was not accepted".to_owned()),
            Some((user, groups)) => {
                if self.reviews.may_read(&user, &groups).await? {
                    Decision::Allowed
                } else {
                    Decision::Forbidden(format!(
                        "{user} may not get {METRICS_PATH} (bind it to the ClusterRole \
                         database-operator-metrics-reader)"
                    ))
                }
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Instant, Decision)>> {
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The token of an `Authorization` header value: the `Bearer` scheme in any case (RFC 7235), a
/// non-empty token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The middleware that puts the authorizer in front of a router's routes.
pub async fn require<R: Reviews + 'static>(
    State(auth): State<Arc<MetricsAuth<R>>>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match auth.decide(authorization.as_deref(), Instant::now()).await {
        Ok(Decision::Allowed) => next.run(request).await,
        Ok(Decision::Unauthenticated(why)) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{why}\n"),
        )
            .into_response(),
        Ok(Decision::Forbidden(why)) => (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "reviewing a metrics reader's token failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the API server could not review the token\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Tokens `reader` (allowed), `other` (authenticated, not allowed); anything else refused.
    #[derive(Default)]
    struct Fake {
        asked: AtomicUsize,
        down: bool,
    }

    impl Reviews for Fake {
        async fn authenticate(
            &self,
            token: &str,
        ) -> Result<Option<(String, Vec<String>)>, kube::Error> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.down {
                return Err(kube::Error::LinesCodecMaxLineLengthExceeded);
            }
            Ok(match token {
                "reader" => Some(("system:serviceaccount:monitoring:prometheus".into(), vec![])),
                "other" => Some(("system:serviceaccount:apps:web".into(), vec![])),
                _ => None,
            })
        }
        async fn may_read(&self, user: &str, _: &[String]) -> Result<bool, kube::Error> {
            Ok(user.ends_with(":prometheus"))
        }
    }

    #[tokio::test]
    async fn tokens_are_reviewed_and_decisions_kept_for_a_minute() {
        let auth = MetricsAuth::new(Fake::default());
        let now = Instant::now();
        assert!(matches!(
            auth.decide(None, now).await.unwrap(),
            Decision::Unauthenticated(_)
        ));
        assert!(matches!(
            auth.decide(Some("Basic abc"), now).await.unwrap(),
            Decision::Unauthenticated(_)
        ));
        assert!(matches!(
            auth.decide(Some("Bearer  "), now).await.unwrap(),
            Decision::Unauthenticated(_)
        ));
        assert_eq!(
            auth.decide(Some("bearer reader"), now).await.unwrap(),
            Decision::Allowed
        );
        let forbidden = auth.decide(Some("Bearer other"), now).await.unwrap();
        assert!(
            matches!(&forbidden, Decision::Forbidden(m) if m.contains("system:serviceaccount:apps:web may not get /metrics")),
            "{forbidden:?}"
        );
        assert!(matches!(
            auth.decide(Some("Bearer forged"), now).await.unwrap(),
            Decision::Unauthenticated(_)
        ));
        assert_eq!(auth.reviews.asked.load(Ordering::SeqCst), 3);
        // Within the minute: from the cache; after it: asked again.
        auth.decide(Some("Bearer reader"), now + Duration::from_secs(59))
            .await
            .unwrap();
        assert_eq!(auth.reviews.asked.load(Ordering::SeqCst), 3);
        auth.decide(Some("Bearer reader"), now + DECISION_TTL)
            .await
            .unwrap();
        assert_eq!(auth.reviews.asked.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_full_cache_drops_the_expired_and_then_the_oldest_never_the_scrapers_fresh_one() {
        let auth = MetricsAuth::new(Fake::default());
        let start = Instant::now();
        auth.decide(Some("Bearer reader"), start).await.unwrap();
        // Made-up tokens fill the cache, the scraper's decision stays the freshest.
        for i in 0..MAX_DECISIONS {
            let token = format!("Bearer forged-{i}");
            auth.decide(Some(&token), start - Duration::from_secs(1))
                .await
                .unwrap();
        }
        assert_eq!(auth.lock().len(), MAX_DECISIONS);
        let asked = auth.reviews.asked.load(Ordering::SeqCst);
        auth.decide(Some("Bearer reader"), start).await.unwrap();
        assert_eq!(
            auth.reviews.asked.load(Ordering::SeqCst),
            asked,
            "the scraper's decision is still kept"
        );
    }

    #[tokio::test]
    async fn an_unreachable_api_server_is_an_error_and_not_kept() {
        let auth = MetricsAuth::new(Fake {
            down: true,
            ..Fake::default()
        });
        let now = Instant::now();
        assert!(auth.decide(Some("Bearer reader"), now).await.is_err());
        assert!(auth.decide(Some("Bearer reader"), now).await.is_err());
        assert_eq!(auth.reviews.asked.load(Ordering::SeqCst), 2);
    }
}
