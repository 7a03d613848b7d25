//! Who may read `/metrics` in a cluster: a caller with a bearer token that a TokenReview
//! authenticates and a SubjectAccessReview allows `get` on the non-resource URL `/metrics` (what
//! controller-runtime's `filters.WithAuthenticationAndAuthorization` and kube-rbac-proxy check).
//! No token or a rejected one is a 401, an authenticated caller without the grant a 403.
//!
//! Verdicts are cached briefly per token and path (by SHA-256 digest: the token itself is never
//! kept, logged or echoed), so a Prometheus scraping every few seconds costs two reviews a
//! minute, and a revoked grant stops working within [`ALLOWED_TTL`]. Failed reviews are not
//! cached: they answer 500 and the next scrape asks again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::{Api, PostParams};

/// How long an allowed caller is not reviewed again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused caller (401 or 403) is not reviewed again.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Most verdicts kept; past it, expired ones are dropped, then all.
const CAPACITY: usize = 1024;
/// How long one review may take before the request answers 500.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request to a protected path may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No bearer token, or one the TokenReview did not authenticate: 401.
    Unauthenticated,
    /// Authenticated as `user`, but the SubjectAccessReview did not allow the request: 403.
    Forbidden {
        user: String,
    },
}

/// The caller as the TokenReview authenticated it.
pub type User = k8s_openapi::api::authentication::v1::UserInfo;

/// The token of an `Authorization` header value `Bearer <token>` (the scheme in any case, as the
/// API server reads it); None for another scheme or an empty token.
pub fn bearer(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let (scheme, token) = text.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// The TokenReview of `token` (no audiences: the API server's own, as controller-runtime asks).
pub fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..Default::default()
    }
}

/// The user a TokenReview's answer authenticated, if it did.
pub fn authenticated(status: Option<&TokenReviewStatus>) -> Option<User> {
    let status = status?;
    if status.authenticated != Some(true) {
        return None;
    }
    status
        .user
        .clone()
        .filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
}

/// The SubjectAccessReview asking whether `user` may `get` the non-resource URL `path`.
pub fn access_review(user: &User, path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some("get".to_string()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    }
}

/// Whether a SubjectAccessReview's answer allows the request (an explicit denial wins).
pub fn allowed(status: Option<&SubjectAccessReviewStatus>) -> bool {
    status.is_some_and(|s| s.allowed && s.denied != Some(true))
}

/// Recent verdicts by digest of (path, token).
#[derive(Default)]
pub struct Cache {
    entries: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

fn digest(path: &str, token: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(path.as_bytes());
    ctx.update(&[0]);
    ctx.update(token.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl Cache {
    /// The verdict for `token` on `path` if one was kept and has not expired at `now`.
    pub fn get(&self, path: &str, token: &str, now: Instant) -> Option<Verdict> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(&digest(path, token))
            .filter(|(_, until)| now < *until)
            .map(|(v, _)| v.clone())
    }

    /// Keeps `verdict` for [`ALLOWED_TTL`] or [`REFUSED_TTL`] from `now`.
    pub fn put(&self, path: &str, token: &str, verdict: Verdict, now: Instant) {
        let ttl = if verdict == Verdict::Allowed {
            ALLOWED_TTL
        } else {
            REFUSED_TTL
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CAPACITY {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(digest(path, token), (verdict, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reviews callers through the API server.
pub struct Gate {
    client: kube::Client,
    cache: Cache,
}

impl Gate {
    pub fn new(client: kube::Client) -> Arc<Gate> {
        Arc::new(Gate {
            client,
            cache: Cache::default(),
        })
    }

    /// The verdict for a request with this `Authorization` header on `path`; Err when a review
    /// could not be made.
    pub async fn check(
        &self,
        authorization: Option<&HeaderValue>,
        path: &str,
    ) -> Result<Verdict, String> {
        let Some(token) = authorization.and_then(bearer) else {
            return Ok(Verdict::Unauthenticated);
        };
        if let Some(v) = self.cache.get(path, token, Instant::now()) {
            return Ok(v);
        }
        let verdict = self.review(token, path).await?;
        self.cache.put(path, token, verdict.clone(), Instant::now());
        Ok(verdict)
    }

    async fn review(&self, token: &str, path: &str) -> Result<Verdict, String> {
        let pp = PostParams::default();
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, tokens.create(&pp, &token_review(token)))
            .await
            .map_err(|_| "TokenReview timed out".to_string())?
            .map_err(|e| format!("TokenReview: {e}"))?;
        let Some(user) = authenticated(answer.status.as_ref()) else {
            return Ok(Verdict::Unauthenticated);
        };
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            reviews.create(&pp, &access_review(&user, path)),
        )
        .await
        .map_err(|_| "SubjectAccessReview timed out".to_string())?
        .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        Ok(if allowed(answer.status.as_ref()) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden {
                user: user.username.unwrap_or_default(),
            }
        })
    }
}

/// The response to a refused request: 401 with a `WWW-Authenticate` challenge, 403 naming the
/// user and what it lacks.
pub fn refusal(verdict: &Verdict, path: &str) -> Option<Response> {
    match verdict {
        Verdict::Allowed => None,
        Verdict::Unauthenticated => Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "Unauthorized: a bearer token the API server authenticates is required\n",
            )
                .into_response(),
        ),
        Verdict::Forbidden { user } => Some(
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: user {user:?} may not get the non-resource URL {path}\n"),
            )
                .into_response(),
        ),
    }
}

/// Middleware: lets the request through only when [`Gate::check`] allows it.
pub async fn require(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match gate
        .check(req.headers().get(header::AUTHORIZATION), &path)
        .await
    {
        Ok(verdict) => match refusal(&verdict, &path) {
            None => next.run(req).await,
            Some(refused) => {
                tracing::debug!(%path, ?verdict, "metrics request refused");
                refused
            }
        },
        Err(e) => {
            tracing::warn!(%path, error = %e, "cannot review a metrics request");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the request could not be authenticated or authorized\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    #[test]
    fn bearer_tokens_are_read_as_the_api_server_reads_them() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Bearer abc.def", Some("abc.def")),
            ("bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("Bearer  abc ", Some("abc")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic dXNlcjpwYXNz", None),
            ("Bearer a b", None),
            ("abc", None),
        ];
        for (header, want) in cases {
            let value = HeaderValue::from_str(header).unwrap();
            assert_eq!(bearer(&value), *want, "{header:?}");
        }
    }

    fn status(authenticated: Option<bool>, user: Option<&str>) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated,
            user: user.map(|u| UserInfo {
                username: Some(u.to_string()),
                groups: Some(vec!["system:serviceaccounts".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_an_authenticated_named_user_passes_the_token_review() {
        let cases = [
            (None, None),
            (Some(status(Some(false), Some("u"))), None),
            (Some(status(None, Some("u"))), None),
            (Some(status(Some(true), None)), None),
            (Some(status(Some(true), Some(""))), None),
            (Some(status(Some(true), Some("u"))), Some("u")),
        ];
        for (i, (status, want)) in cases.iter().enumerate() {
            let got = authenticated(status.as_ref());
            assert_eq!(
                got.as_ref().and_then(|u| u.username.as_deref()),
                *want,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_access_review_asks_for_get_on_the_path_as_the_user() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            uid: Some("u-1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: Some([("scopes".to_string(), vec!["a".to_string()])].into()),
        };
        let review = serde_json::to_value(access_review(&user, "/metrics")).unwrap();
        assert_eq!(
            review["spec"],
            serde_json::json!({
                "user": "system:serviceaccount:monitoring:prometheus",
                "uid": "u-1",
                "groups": ["system:serviceaccounts"],
                "extra": {"scopes": ["a"]},
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            })
        );
        assert_eq!(review["kind"], "SubjectAccessReview");
        assert_eq!(review["apiVersion"], "authorization.k8s.io/v1");
        let token = serde_json::to_value(token_review("t")).unwrap();
        assert_eq!(token["spec"], serde_json::json!({"token": "t"}));
    }

    #[test]
    fn an_explicit_denial_wins_over_allowed() {
        let s = |allowed, denied| SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        };
        assert!(!allowed(None));
        assert!(!allowed(Some(&s(false, None))));
        assert!(allowed(Some(&s(true, None))));
        assert!(allowed(Some(&s(true, Some(false)))));
        assert!(!allowed(Some(&s(true, Some(true)))));
    }

    #[test]
    fn verdicts_expire_refusals_sooner_and_the_cache_stays_bounded() {
        let cache = Cache::default();
        let t0 = Instant::now();
        cache.put("/metrics", "good", Verdict::Allowed, t0);
        cache.put("/metrics", "bad", Verdict::Unauthenticated, t0);
        assert_eq!(cache.get("/metrics", "good", t0), Some(Verdict::Allowed));
        // Per path: a verdict on /metrics says nothing about another path.
        assert_eq!(cache.get("/other", "good", t0), None);
        let later = t0 + REFUSED_TTL;
        assert_eq!(cache.get("/metrics", "bad", later), None);
        assert_eq!(cache.get("/metrics", "good", later), Some(Verdict::Allowed));
        assert_eq!(cache.get("/metrics", "good", t0 + ALLOWED_TTL), None);
        // Past the capacity, expired verdicts go first, then all.
        for i in 0..CAPACITY * 2 {
            cache.put("/metrics", &format!("t{i}"), Verdict::Allowed, later);
        }
        assert!(cache.len() <= CAPACITY, "{}", cache.len());
        assert!(!cache.is_empty());
    }

    #[test]
    fn refusals_say_why_without_the_token() {
        assert!(refusal(&Verdict::Allowed, "/metrics").is_none());
        let r = refusal(&Verdict::Unauthenticated, "/metrics").unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let r = refusal(
            &Verdict::Forbidden {
                user: "system:anonymous".into(),
            },
            "/metrics",
        )
        .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
}
