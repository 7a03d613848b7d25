//! Who may read `/metrics` in a cluster: a caller with a bearer token that a TokenReview
//! authenticates and a SubjectAccessReview allows `get` on the non-resource URL `/metrics` (what
//! controller-runtime's `filters.WithAuthenticationAndAuthorization` and kube-rbac-proxy check).
//! No token or a rejected one is a 401, an authenticated caller without the grant a 403.
//!
//! Verdicts are cached briefly per token and path (by SHA-256 digest: the token itself is never
//! kept, logged or echoed), so a Prometheus scraping every few seconds costs two reviews a
//! minute, and a revoked grant stops working within [`ALLOWED_TTL`]. Failed reviews are not
//! cached: they answer 500 and the next scrape asks again. Concurrent requests with one token
//! share one review, at most [`REVIEWS_AT_ONCE`] reviews run at a time, and a path that is not
//! served is answered 404 before anything is reviewed (the gate is a route layer): a caller
//! cannot make the operator flood the API server with reviews. A request that finds every review
//! slot taken for [`SLOT_WAIT`] (a slow API server) is answered 503 with `Retry-After`, so
//! scrapes do not pile up behind it; a shared review whose every waiter went away (their
//! connections closed) is forgotten with the last of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::write::Writer;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::Api;

/// How long an allowed caller is not reviewed again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused caller (401 or 403) is not reviewed again.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Most verdicts kept; past it, expired ones are dropped, then the ones expiring soonest.
const CAPACITY: usize = 1024;
/// Most reviews (a TokenReview and maybe a SubjectAccessReview each) in flight at once.
pub const REVIEWS_AT_ONCE: usize = 4;
/// How long one review may take before the request answers 500.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request waits for one of the [`REVIEWS_AT_ONCE`] review slots before it is answered
/// 503: half of [`REVIEW_TIMEOUT`], so that a scrape with Prometheus's default 10 s timeout still
/// reads the answer, and a slow API server holding every slot does not gather a queue of scrapes.
pub const SLOT_WAIT: Duration = Duration::from_secs(5);

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

/// Why a request could not be reviewed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unreviewed {
    /// Every review slot stayed taken for [`SLOT_WAIT`]: 503 with `Retry-After`.
    #[error("no review slot free within {SLOT_WAIT:?} ({REVIEWS_AT_ONCE} reviews in flight)")]
    Busy,
    /// A TokenReview or SubjectAccessReview failed or timed out: 500.
    #[error("{0}")]
    Failed(String),
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
        let key = digest(path, token);
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= CAPACITY {
                // Evicted one at a time: the verdicts of steady callers stay.
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| *k);
                if let Some(k) = soonest {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key, (verdict, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A review in flight, shared by the requests that wait for it.
type Pending = Arc<tokio::sync::OnceCell<Result<Verdict, Unreviewed>>>;

/// Reviews in flight by digest of (path, token).
type PendingMap = Mutex<HashMap<[u8; 32], Pending>>;

/// One request's hold on a shared review. Dropping it (the verdict was read, or the request went
/// away: its connection closed and its future was dropped) removes the entry once the review has
/// ended or nobody else waits for it, so entries do not outlive their waiters.
struct Waiting<'a> {
    pending: &'a PendingMap,
    key: [u8; 32],
    review: Pending,
}

impl<'a> Waiting<'a> {
    /// Joins the review in flight for `key`, or starts waiting for a new one.
    fn join(pending: &'a PendingMap, key: [u8; 32]) -> Waiting<'a> {
        let review = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone();
        Waiting {
            pending,
            key,
            review,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if !pending
            .get(&self.key)
            .is_some_and(|p| Arc::ptr_eq(p, &self.review))
        {
            return;
        }
        // Waiters clone the entry under this lock, so the count cannot change while it is held:
        // two is the map's and this waiter's.
        let last = Arc::strong_count(&self.review) == 2;
        if last || self.review.initialized() {
            pending.remove(&self.key);
        }
    }
}

/// Reviews callers through the API server.
pub struct Gate {
    client: kube::Client,
    cache: Cache,
    pending: PendingMap,
    reviews: tokio::sync::Semaphore,
}

impl Gate {
    pub fn new(client: kube::Client) -> Arc<Gate> {
        Arc::new(Gate {
            client,
            cache: Cache::default(),
            pending: Mutex::default(),
            reviews: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE),
        })
    }

    /// The verdict for a request with this `Authorization` header on `path`; Err when a review
    /// could not be made.
    pub async fn check(
        &self,
        authorization: Option<&HeaderValue>,
        path: &str,
    ) -> Result<Verdict, Unreviewed> {
        let Some(token) = authorization.and_then(bearer) else {
            return Ok(Verdict::Unauthenticated);
        };
        if let Some(v) = self.cache.get(path, token, Instant::now()) {
            return Ok(v);
        }
        let waiting = Waiting::join(&self.pending, digest(path, token));
        // The first request reviews; the others wait for its verdict (and one of them takes over
        // if the first goes away before the review ends).
        let verdict = waiting
            .review
            .get_or_init(|| async {
                let _turn = tokio::time::timeout(SLOT_WAIT, self.reviews.acquire())
                    .await
                    .map_err(|_| Unreviewed::Busy)?
                    .map_err(|e| Unreviewed::Failed(e.to_string()))?;
                let verdict = self.review(token, path).await.map_err(Unreviewed::Failed)?;
                self.cache.put(path, token, verdict.clone(), Instant::now());
                Ok(verdict)
            })
            .await
            .clone();
        drop(waiting);
        verdict
    }

    async fn review(&self, token: &str, path: &str) -> Result<Verdict, String> {
        let tokens = Writer::<TokenReview>::new(Api::all(self.client.clone()));
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, tokens.create_object(&token_review(token)))
                .await
                .map_err(|_| "TokenReview timed out".to_string())?
                .map_err(|e| e.to_string())?;
        let Some(user) = authenticated(answer.status.as_ref()) else {
            return Ok(Verdict::Unauthenticated);
        };
        let reviews = Writer::<SubjectAccessReview>::new(Api::all(self.client.clone()));
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            reviews.create_object(&access_review(&user, path)),
        )
        .await
        .map_err(|_| "SubjectAccessReview timed out".to_string())?
        .map_err(|e| e.to_string())?;
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

/// The response to a request that could not be reviewed: 503 with `Retry-After` when every
/// review slot stayed taken, 500 when a review failed.
pub fn unreviewed(e: &Unreviewed) -> Response {
    match e {
        Unreviewed::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, SLOT_WAIT.as_secs().to_string())],
            "too many requests are being authenticated and authorized; try again later\n",
        )
            .into_response(),
        Unreviewed::Failed(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request could not be authenticated or authorized\n",
        )
            .into_response(),
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
            unreviewed(&e)
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
    fn verdicts_expire_refusals_sooner() {
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
    }

    /// Past the capacity, the verdicts expiring soonest go, one at a time: a flood of unknown
    /// tokens (each refused, kept [`REFUSED_TTL`]) cannot push out an allowed caller's verdict
    /// (kept [`ALLOWED_TTL`]), whether it was put before, amid or after the flood. Evicting by
    /// insertion order, by age, at random or all at once each loses the allowed verdict or keeps
    /// the wrong refusals in one of the three orders.
    #[test]
    fn a_flood_of_refused_tokens_cannot_evict_an_allowed_verdict_wherever_it_was_put() {
        let flood = CAPACITY * 4;
        let t0 = Instant::now();
        for steady_at in [0, flood / 2, flood - 1] {
            let cache = Cache::default();
            for i in 0..flood {
                // A millisecond apart: no two verdicts expire at the same instant, and none of
                // them expires during the flood.
                let at = t0 + Duration::from_millis(i as u64);
                if i == steady_at {
                    cache.put("/metrics", "steady", Verdict::Allowed, at);
                }
                cache.put("/metrics", &format!("t{i}"), Verdict::Unauthenticated, at);
                assert!(cache.len() <= CAPACITY);
            }
            assert_eq!(cache.len(), CAPACITY, "steady put at {steady_at}");
            let end = t0 + Duration::from_millis(flood as u64);
            assert_eq!(
                cache.get("/metrics", "steady", end),
                Some(Verdict::Allowed),
                "steady put at {steady_at}"
            );
            // The rest of the capacity holds the refusals expiring last, and only them.
            let kept: Vec<usize> = (0..flood)
                .filter(|i| cache.get("/metrics", &format!("t{i}"), end).is_some())
                .collect();
            let want: Vec<usize> = (flood - (CAPACITY - 1)..flood).collect();
            assert_eq!(kept, want, "steady put at {steady_at}");
        }
    }

    /// An API server that counts the reviews it is asked for (and the most it answered at
    /// once), answers them after `gate` opens while `hold` is set, and authenticates any token as
    /// the user of that name: "good" is allowed, any other user is not, and the token "broken"
    /// fails with 500.
    #[derive(Clone, Default)]
    struct Reviewer {
        token_reviews: Arc<std::sync::atomic::AtomicUsize>,
        access_reviews: Arc<std::sync::atomic::AtomicUsize>,
        in_flight: Arc<std::sync::atomic::AtomicUsize>,
        most_in_flight: Arc<std::sync::atomic::AtomicUsize>,
        gate: Arc<tokio::sync::Notify>,
        hold: Arc<std::sync::atomic::AtomicBool>,
    }

    /// Counts one review in flight until dropped (also when the caller gives up on it).
    struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for InFlight {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Reviewer {
        fn client(&self) -> kube::Client {
            let me = self.clone();
            let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let me = me.clone();
                async move {
                    use http_body_util::BodyExt as _;
                    use std::sync::atomic::Ordering::SeqCst;
                    let path = req.uri().path().to_string();
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let tokens = path.ends_with("/tokenreviews");
                    if tokens {
                        me.token_reviews.fetch_add(1, SeqCst);
                    } else {
                        me.access_reviews.fetch_add(1, SeqCst);
                    }
                    let now = me.in_flight.fetch_add(1, SeqCst) + 1;
                    me.most_in_flight.fetch_max(now, SeqCst);
                    let _in_flight = InFlight(me.in_flight.clone());
                    if me.hold.load(SeqCst) {
                        me.gate.notified().await;
                    }
                    let status = if tokens {
                        let token = review["spec"]["token"].as_str().unwrap().to_string();
                        if token == "broken" {
                            return Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(500)
                                    .body(axum::body::Body::from("{}"))
                                    .unwrap(),
                            );
                        }
                        serde_json::json!({"authenticated": true, "user": {"username": token}})
                    } else {
                        let user = review["spec"]["user"].as_str().unwrap().to_string();
                        serde_json::json!({"allowed": user == "good"})
                    };
                    review["status"] = status;
                    Ok(http::Response::new(axum::body::Body::from(
                        review.to_string(),
                    )))
                }
            });
            kube::Client::new(service, "default")
        }

        fn hold(&self) {
            self.hold.store(true, std::sync::atomic::Ordering::SeqCst);
        }

        fn release(&self) {
            self.hold.store(false, std::sync::atomic::Ordering::SeqCst);
            self.gate.notify_waiters();
        }

        fn most_in_flight(&self) -> usize {
            self.most_in_flight
                .load(std::sync::atomic::Ordering::SeqCst)
        }

        fn counts(&self) -> (usize, usize) {
            use std::sync::atomic::Ordering::SeqCst;
            (
                self.token_reviews.load(SeqCst),
                self.access_reviews.load(SeqCst),
            )
        }
    }

    fn protected(gate: Arc<Gate>) -> axum::Router {
        axum::Router::new()
            .route("/metrics", axum::routing::get(|| async { "metrics" }))
            .route_layer(axum::middleware::from_fn_with_state(gate, require))
    }

    async fn request(app: &axum::Router, path: &str, token: &str) -> Response {
        use tower::ServiceExt as _;
        let req = http::Request::get(path)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap();
        app.clone().oneshot(req).await.unwrap()
    }

    async fn get(app: &axum::Router, path: &str, token: &str) -> StatusCode {
        request(app, path, token).await.status()
    }

    fn pending(gate: &Gate) -> usize {
        gate.pending.lock().unwrap().len()
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_with_one_token_share_one_review() {
        let reviewer = Reviewer::default();
        reviewer.hold();
        let app = protected(Gate::new(reviewer.client()));
        let requests: Vec<_> = (0..16)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { get(&app, "/metrics", "good").await })
            })
            .collect();
        // With the clock paused, this returns once every task waits: all sixteen requests wait
        // for the one review in flight.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (1, 0));
        reviewer.release();
        for r in requests {
            assert_eq!(r.await.unwrap(), StatusCode::OK);
        }
        assert_eq!(reviewer.counts(), (1, 1));
        // Cached: no further review.
        assert_eq!(get(&app, "/metrics", "good").await, StatusCode::OK);
        assert_eq!(reviewer.counts(), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_whose_waiters_all_went_away_is_forgotten() {
        let reviewer = Reviewer::default();
        reviewer.hold();
        let gate = Gate::new(reviewer.client());
        let app = protected(gate.clone());
        let requests: Vec<_> = (0..3)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { get(&app, "/metrics", "good").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (1, 0));
        assert_eq!(pending(&gate), 1);
        // The scrapes' connections close before the API server answers: their futures are
        // dropped, the reviewing one among them (all at once: none takes the review over).
        for r in &requests {
            r.abort();
        }
        for r in requests {
            assert!(r.await.unwrap_err().is_cancelled());
        }
        assert_eq!(reviewer.counts(), (1, 0));
        assert_eq!(pending(&gate), 0, "the review outlived its waiters");
        assert_eq!(gate.reviews.available_permits(), REVIEWS_AT_ONCE);
        // A waiter that goes away while others still wait leaves the review to them.
        let first = {
            let app = app.clone();
            tokio::spawn(async move { get(&app, "/metrics", "good").await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (2, 0));
        let second = {
            let app = app.clone();
            tokio::spawn(async move { get(&app, "/metrics", "good").await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            reviewer.counts(),
            (2, 0),
            "the second waits for the first's review"
        );
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        assert_eq!(pending(&gate), 1);
        // The second takes the review over.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (3, 0));
        reviewer.release();
        assert_eq!(second.await.unwrap(), StatusCode::OK);
        assert_eq!(reviewer.counts(), (3, 1));
        assert_eq!(pending(&gate), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_four_reviews_run_at_once() {
        assert_eq!(REVIEWS_AT_ONCE, 4, "README and SEC-05 say four");
        let reviewer = Reviewer::default();
        reviewer.hold();
        let app = protected(Gate::new(reviewer.client()));
        // Sixteen callers with tokens of their own: nothing to share.
        let requests: Vec<_> = (0..16)
            .map(|i| {
                let app = app.clone();
                tokio::spawn(async move { get(&app, "/metrics", &format!("t{i}")).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (REVIEWS_AT_ONCE, 0));
        reviewer.release();
        for r in requests {
            // Authenticated, not allowed: every one was reviewed, none refused for want of a slot.
            assert_eq!(r.await.unwrap(), StatusCode::FORBIDDEN);
        }
        assert_eq!(reviewer.counts(), (16, 16));
        assert_eq!(reviewer.most_in_flight(), REVIEWS_AT_ONCE);
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_review_slot_stalled_the_next_request_is_answered_503_within_the_slot_wait()
    {
        let reviewer = Reviewer::default();
        reviewer.hold();
        let app = protected(Gate::new(reviewer.client()));
        // An API server that does not answer: four reviews take every slot.
        let stalled: Vec<_> = (0..REVIEWS_AT_ONCE)
            .map(|i| {
                let app = app.clone();
                tokio::spawn(async move { get(&app, "/metrics", &format!("t{i}")).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(reviewer.counts(), (REVIEWS_AT_ONCE, 0));
        let start = tokio::time::Instant::now();
        let answer = tokio::time::timeout(
            SLOT_WAIT + Duration::from_secs(1),
            request(&app, "/metrics", "fifth"),
        )
        .await
        .expect("answered within the slot wait, before any stalled review times out");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer.headers()[header::RETRY_AFTER],
            SLOT_WAIT.as_secs().to_string()
        );
        assert!(start.elapsed() >= SLOT_WAIT);
        assert!(SLOT_WAIT + Duration::from_secs(1) < REVIEW_TIMEOUT);
        // The fifth was never reviewed; the four are still in flight, no more.
        assert_eq!(reviewer.counts(), (REVIEWS_AT_ONCE, 0));
        assert_eq!(reviewer.most_in_flight(), REVIEWS_AT_ONCE);
        // The stalled reviews end with their own timeout: 500, their slots free again.
        for r in stalled {
            assert_eq!(r.await.unwrap(), StatusCode::INTERNAL_SERVER_ERROR);
        }
        reviewer.release();
        assert_eq!(get(&app, "/metrics", "good").await, StatusCode::OK);
    }

    #[tokio::test]
    async fn unknown_paths_are_404_before_any_review_and_failed_reviews_500() {
        let reviewer = Reviewer::default();
        let app = protected(Gate::new(reviewer.client()));
        for (path, token) in [("/other", "good"), ("/metrics/x", "t1"), ("/", "t2")] {
            assert_eq!(
                get(&app, path, token).await,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
        assert_eq!(reviewer.counts(), (0, 0));
        assert_eq!(get(&app, "/metrics", "other").await, StatusCode::FORBIDDEN);
        assert_eq!(reviewer.counts(), (1, 1));
        // A review that fails is a 500, not kept: the next request asks again.
        assert_eq!(
            get(&app, "/metrics", "broken").await,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            get(&app, "/metrics", "broken").await,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(reviewer.counts(), (3, 1));
        assert_eq!(get(&app, "/metrics", "good").await, StatusCode::OK);
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
        let r = unreviewed(&Unreviewed::Busy);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().contains_key(header::RETRY_AFTER));
        let r = unreviewed(&Unreviewed::Failed("TokenReview timed out".into()));
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
