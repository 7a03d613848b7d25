//! The operator's error type: one enum for everything that can stop a reconcile, variants named
//! after the step that failed and carrying their source, each knowing its class:
//!
//! | class | what | status | retry |
//! |---|---|---|---|
//! | transient | API unreachable, timeouts, 409, 429, 5xx, a missing host, session key or configuration value | Progressing True, `TransientError` | exponential backoff |
//! | transient, fixed delay | an object of the Site's name it does not control, a route of another site, another Site's path (60 s); a previous Site's objects, claim or volume still going away (1 s) | Progressing True (`ObjectConflict`, `RouteConflict`, `PathConflict`: one Warning Event each) | after the delay |
//! | terminal | an invalid Site, an unsupported route, the API server refusing what is rendered (400, 422) | Progressing False, `InvalidConfiguration`, Warning Event | none until the spec changes |
//! | terminal, cluster | a request the API server forbids (403): a permission of the Role is missing | Progressing False, `Forbidden`, Warning Event | slowly ([`CLUSTER_RETRY`]): RBAC is not watched |

use std::time::Duration;

use crate::reasons;
use crate::validation::{self, FieldError};

/// How long a route conflict waits before the next attempt (LIFE-07, RTG-03).
pub const ROUTE_CONFLICT_RETRY: Duration = Duration::from_secs(60);
/// How long an object or path conflict waits before the next attempt (SPEC 4.6).
pub const CONFLICT_RETRY: Duration = Duration::from_secs(60);
/// How long a failed deletion of the other mode's route waits (LIFE-13).
pub const OTHER_MODE_RETRY: Duration = Duration::from_secs(30);
/// How often a Site waiting for a rollout slot looks again (a freed slot queues the first
/// waiting Sites at once).
pub const ROLLOUT_RETRY: Duration = Duration::from_secs(10);
/// How often a Site held by a halted rollout looks again (a configuration change queues every
/// Site at once).
pub const HALTED_RETRY: Duration = Duration::from_secs(60);
/// How long a reconcile waits for a previous claim or volume to go away.
pub const WAIT_RETRY: Duration = Duration::from_secs(1);
/// How often a request the cluster forbids is tried again: the Role may be fixed without any
/// watch event reaching the operator.
pub const CLUSTER_RETRY: Duration = Duration::from_secs(300);

/// The object a step was about: `StatefulSet docs-handbook`, and its API resource
/// (`statefulsets.apps`) for messages about permissions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: String,
    /// `plural` or `plural.group`, as RBAC rules name it.
    pub resource: String,
    pub name: String,
}

impl Target {
    /// The target `name` of kind `K`.
    pub fn of<K: kube::Resource>(name: &str) -> Target
    where
        K::DynamicType: Default,
    {
        let dt = K::DynamicType::default();
        let (plural, group) = (K::plural(&dt), K::group(&dt));
        Target {
            kind: K::kind(&dt).into_owned(),
            resource: if group.is_empty() {
                plural.into_owned()
            } else {
                format!("{plural}.{group}")
            },
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A review (TokenReview, SubjectAccessReview) has no name.
        match self.name.as_str() {
            "" => write!(f, "a {}", self.kind),
            name => write!(f, "{} {name}", self.kind),
        }
    }
}

/// What a write was: how its failure reads, and the verb of the RBAC rule a 403 lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Server-side apply.
    Apply,
    /// A merge or JSON patch of the object.
    Patch,
    /// A merge patch of the status subresource.
    PatchStatus,
    Create,
    /// A replacement (PUT) of the whole object.
    Replace,
    Delete,
}

impl Verb {
    /// The RBAC verb the request needs, and the subresource it is on.
    fn rbac(self) -> (&'static str, &'static str) {
        match self {
            Verb::Apply | Verb::Patch => ("patch", ""),
            Verb::PatchStatus => ("patch", "/status"),
            Verb::Create => ("create", ""),
            Verb::Replace => ("update", ""),
            Verb::Delete => ("delete", ""),
        }
    }
}

/// A write the API server refused, or that got no answer: what was written, to which object,
/// and the answer. Made by [`crate::write::Writer`], the one writer of the product.
#[derive(Debug, thiserror::Error)]
#[error("cannot {} {target}: {}", self.doing(), self.message())]
pub struct WriteError {
    pub verb: Verb,
    pub target: Target,
    #[source]
    pub source: Box<kube::Error>,
}

impl WriteError {
    /// The HTTP status of the API server's answer, if it answered with one.
    pub fn code(&self) -> Option<u16> {
        match self.source.as_ref() {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }

    fn doing(&self) -> &'static str {
        match self.verb {
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::PatchStatus => "write the status of",
            Verb::Create => "create",
            Verb::Replace => "replace",
            Verb::Delete => "delete",
        }
    }

    fn message(&self) -> String {
        let (verb, sub) = self.verb.rbac();
        api_message(
            &self.source,
            verb,
            &format!("{}{sub}", self.target.resource),
        )
    }
}

/// Everything that can go wrong while rendering or reconciling a Site.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Site breaks rules of [`crate::rules`] (stored while the webhook was down, or
    /// before a rule tightened): every violation, with its field path.
    #[error("invalid Site: {}", validation::join(.0))]
    InvalidSite(Vec<FieldError>),
    /// A Site without metadata the operator needs (only objects not read from the API server).
    #[error("the Site has no {field}")]
    MissingMetadata { field: &'static str },
    /// The platform configuration lacks a value this Site needs.
    #[error("the platform configuration has no {key}")]
    MissingConfig { key: &'static str },
    /// The route cannot be expressed in the active routing mode (RTG-09).
    #[error("unsupported route {path:?}: {reason}")]
    UnsupportedRoute { path: String, reason: String },
    /// No public host: neither `routing.host` nor the master Ingress names one.
    #[error("Public host name required: set routing.host in the platform configuration")]
    PublicHostRequired,
    /// The public host found (the master Ingress's) is not a host name.
    #[error("public host: {reason}")]
    InvalidPublicHost { reason: String },
    /// The platform session key Secret is missing, or has no such key, or an empty one.
    #[error("the session key Secret {namespace}/{name} (key {key:?}) is missing or empty")]
    SessionKeyMissing {
        namespace: String,
        name: String,
        key: String,
    },
    /// Gateway mode on a cluster without the Gateway API's HTTPRoute.
    #[error(
        "gateway mode, but the cluster does not serve HTTPRoutes (gateway.networking.k8s.io/v1)"
    )]
    NoHttpRoutes,
    /// An object of an owned object's name exists and this Site does not control it: it is
    /// left untouched (SPEC 4.6).
    #[error(
        "{target} exists and is {controller}; it is left alone and retried in {}s",
        CONFLICT_RETRY.as_secs()
    )]
    ObjectConflict { target: Target, controller: String },
    /// An older Site serves the same public path: this one gets no route (SPEC 4.6).
    #[error(
        "the path {path} is already used by Site {site}; this Site gets no route (retried in {}s)",
        CONFLICT_RETRY.as_secs()
    )]
    PathConflict { path: String, site: String },
    /// A route of the site's name belongs to another site, or to no Site (RTG-03, LIFE-07).
    #[error(
        "a {kind} named {name} belongs to another site ({controller}); it is left alone and retried in {}s",
        ROUTE_CONFLICT_RETRY.as_secs()
    )]
    RouteConflict {
        kind: String,
        name: String,
        /// `controlled by Site a`, `not controlled by any Site`: [`crate::ownership::Control`].
        controller: String,
    },
    /// A platform change would roll the Site's pods and the change budget has no slot free
    /// (ROL-01): everything else is written; its pods roll when a slot frees.
    #[error("{message}")]
    RolloutPending { message: String },
    /// A platform change would roll the Site's pods and its rollout is halted (ROL-02): a
    /// rolled Site was not Available again within the progress deadline.
    #[error("{message}")]
    RolloutHalted { message: String },
    /// The Site is being deleted or was replaced, and the cache has not shown it yet: nothing
    /// more is written for it (its watch event queues it again, if it is still there).
    #[error("not taking over {target}: the Site is being deleted or was replaced")]
    SiteGone { target: Target },
    /// Something the reconcile must wait for (a previous claim or volume going away).
    #[error("waiting for {what}")]
    Waiting { what: String },
    /// Reading an object failed.
    #[error("cannot read {target}: {}", api_message(.source, "get", &.target.resource))]
    Read {
        target: Target,
        source: Box<kube::Error>,
    },
    /// Listing objects failed (the resource of `target`; its name is not used).
    #[error("cannot list {}: {}", .target.resource, api_message(.source, "list", &.target.resource))]
    List {
        target: Target,
        source: Box<kube::Error>,
    },
    /// A write failed (an owned object, a deletion, a volume, the Site status): the writer's
    /// error names what and where.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Deleting this site's route of the other routing mode failed (LIFE-13: retried in 30 s).
    #[error(
        "cannot delete the route of the other routing mode ({}): {}",
        .0.target,
        api_message(&.0.source, "delete", &.0.target.resource)
    )]
    DeleteOtherModeRoute(WriteError),
}

/// What the queue should do after a failed reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// The key's exponential backoff.
    Backoff,
    /// A fixed delay.
    After(Duration),
    /// Not until the Site changes.
    Never,
}

impl Error {
    /// The API error of a step, if the step talked to the API server.
    fn api(&self) -> Option<&kube::Error> {
        match self {
            Error::Read { source, .. } | Error::List { source, .. } => Some(source.as_ref()),
            Error::Write(w) | Error::DeleteOtherModeRoute(w) => Some(w.source.as_ref()),
            _ => None,
        }
    }

    /// Whether the Site's objects and pods stay as they serve now: a rollout holds back its
    /// StatefulSet write, everything else is written, so its availability is its pods'.
    pub fn holds_rollout(&self) -> bool {
        matches!(
            self,
            Error::RolloutPending { .. } | Error::RolloutHalted { .. }
        )
    }

    /// The HTTP status of the API server's answer, if it answered with one.
    pub fn status_code(&self) -> Option<u16> {
        match self.api() {
            Some(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    /// Whether retrying without a spec change can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::InvalidSite(_)
            | Error::MissingMetadata { .. }
            | Error::UnsupportedRoute { .. }
            | Error::InvalidPublicHost { .. } => false,
            // A configuration or cluster change (host, session key, CRDs) makes these pass.
            Error::MissingConfig { .. }
            | Error::PublicHostRequired
            | Error::SessionKeyMissing { .. }
            | Error::NoHttpRoutes
            | Error::RouteConflict { .. }
            | Error::ObjectConflict { .. }
            | Error::PathConflict { .. }
            | Error::RolloutPending { .. }
            | Error::SiteGone { .. }
            | Error::Waiting { .. } => true,
            // Stalled until the configuration changes: kstatus and Argo CD show it degraded.
            Error::RolloutHalted { .. } => false,
            // 400, 403 and 422 answer the same until the object or the cluster changes; 409,
            // 429, 5xx, timeouts and connection errors pass on a later try.
            _ => !matches!(self.status_code(), Some(400 | 403 | 422)),
        }
    }

    /// What the queue should do next.
    pub fn retry(&self) -> Retry {
        match self {
            Error::RouteConflict { .. } => Retry::After(ROUTE_CONFLICT_RETRY),
            Error::ObjectConflict { .. } | Error::PathConflict { .. } => {
                Retry::After(CONFLICT_RETRY)
            }
            Error::DeleteOtherModeRoute(_) if self.is_transient() => Retry::After(OTHER_MODE_RETRY),
            Error::Waiting { .. } => Retry::After(WAIT_RETRY),
            Error::RolloutPending { .. } => Retry::After(ROLLOUT_RETRY),
            Error::RolloutHalted { .. } => Retry::After(HALTED_RETRY),
            _ if self.status_code() == Some(403) => Retry::After(CLUSTER_RETRY),
            _ if self.is_transient() => Retry::Backoff,
            _ => Retry::Never,
        }
    }

    /// The Progressing condition's reason (and the Event reason of a terminal error or conflict).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::RouteConflict { .. } => reasons::ROUTE_CONFLICT,
            Error::ObjectConflict { .. } => reasons::OBJECT_CONFLICT,
            Error::PathConflict { .. } => reasons::PATH_CONFLICT,
            Error::RolloutPending { .. } => reasons::ROLLOUT_PENDING,
            Error::RolloutHalted { .. } => reasons::ROLLOUT_HALTED,
            _ if self.status_code() == Some(403) => reasons::FORBIDDEN,
            _ if self.is_transient() => reasons::TRANSIENT_ERROR,
            _ => reasons::INVALID_CONFIGURATION,
        }
    }

    /// Whether the problem deserves a Warning Event (once per distinct message): a terminal
    /// error or a conflict, which a user has to act on; transient errors heal by themselves.
    pub fn warns(&self) -> bool {
        // A halt is one Warning Event on the ConfigMap, not one per waiting Site.
        (!self.is_transient() && !matches!(self, Error::RolloutHalted { .. }))
            || matches!(
                self,
                Error::RouteConflict { .. }
                    | Error::ObjectConflict { .. }
                    | Error::PathConflict { .. }
            )
    }
}

/// An API error as one line: the API server's code and message (a 403 also names the missing
/// permission: `verb` on `resource`), or the client's own error.
fn api_message(e: &kube::Error, verb: &str, resource: &str) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "API error 403: {} (the operator's Role must grant {verb} on {resource})",
            s.message
        ),
        kube::Error::Api(s) => format!("API error {}: {}", s.code, s.message),
        other => other.to_string(),
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&format!("refused with {code}"), "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    fn write(verb: Verb, code: u16) -> WriteError {
        WriteError {
            verb,
            target: Target::of::<StatefulSet>("docs"),
            source: Box::new(api(code)),
        }
    }

    fn apply(code: u16) -> Error {
        Error::Write(write(Verb::Apply, code))
    }

    #[test]
    fn errors_are_classified_by_step_and_status_code() {
        let cases: Vec<(&str, Error, bool, Retry, &str)> = vec![
            (
                "409 conflict",
                apply(409),
                true,
                Retry::Backoff,
                "TransientError",
            ),
            (
                "429 throttled",
                apply(429),
                true,
                Retry::Backoff,
                "TransientError",
            ),
            ("500", apply(500), true, Retry::Backoff, "TransientError"),
            ("503", apply(503), true, Retry::Backoff, "TransientError"),
            (
                "400",
                apply(400),
                false,
                Retry::Never,
                "InvalidConfiguration",
            ),
            (
                "422",
                apply(422),
                false,
                Retry::Never,
                "InvalidConfiguration",
            ),
            (
                "403",
                apply(403),
                false,
                Retry::After(CLUSTER_RETRY),
                "Forbidden",
            ),
            (
                "connection error",
                Error::Read {
                    target: Target::of::<StatefulSet>("docs"),
                    source: Box::new(kube::Error::LinesCodecMaxLineLengthExceeded),
                },
                true,
                Retry::Backoff,
                "TransientError",
            ),
            (
                "other-mode route delete 500",
                Error::DeleteOtherModeRoute(write(Verb::Delete, 500)),
                true,
                Retry::After(OTHER_MODE_RETRY),
                "TransientError",
            ),
            (
                "invalid Site",
                Error::InvalidSite(vec![FieldError::new("spec.name", "must not be empty")]),
                false,
                Retry::Never,
                "InvalidConfiguration",
            ),
            (
                "route conflict",
                Error::RouteConflict {
                    kind: "Ingress".into(),
                    name: "docs".into(),
                    controller: "controlled by Site other".into(),
                },
                true,
                Retry::After(ROUTE_CONFLICT_RETRY),
                "RouteConflict",
            ),
            (
                "object conflict",
                Error::ObjectConflict {
                    target: Target::of::<k8s_openapi::api::core::v1::Secret>("sites-session"),
                    controller: "not controlled by any Site".into(),
                },
                true,
                Retry::After(CONFLICT_RETRY),
                "ObjectConflict",
            ),
            (
                "path conflict",
                Error::PathConflict {
                    path: "/docs/handbook/".into(),
                    site: "docs-handbook".into(),
                },
                true,
                Retry::After(CONFLICT_RETRY),
                "PathConflict",
            ),
            (
                "waiting",
                Error::Waiting {
                    what: "volume v".into(),
                },
                true,
                Retry::After(WAIT_RETRY),
                "TransientError",
            ),
            (
                "rollout pending",
                Error::RolloutPending {
                    message: "waiting".into(),
                },
                true,
                Retry::After(ROLLOUT_RETRY),
                "RolloutPending",
            ),
            (
                "rollout halted",
                Error::RolloutHalted {
                    message: "halted".into(),
                },
                false,
                Retry::After(HALTED_RETRY),
                "RolloutHalted",
            ),
            (
                "missing host",
                Error::PublicHostRequired,
                true,
                Retry::Backoff,
                "TransientError",
            ),
            (
                "unsupported route",
                Error::UnsupportedRoute {
                    path: "/x".into(),
                    reason: "r".into(),
                },
                false,
                Retry::Never,
                "InvalidConfiguration",
            ),
        ];
        for (case, error, transient, retry, reason) in cases {
            assert_eq!(error.is_transient(), transient, "{case}");
            assert_eq!(error.retry(), retry, "{case}");
            assert_eq!(error.reason(), reason, "{case}");
            assert_eq!(error.holds_rollout(), case.starts_with("rollout"), "{case}");
        }
        // A halt is reported once, on the ConfigMap; an invalid Site warns on itself.
        let halted = Error::RolloutHalted {
            message: "halted".into(),
        };
        assert!(!halted.warns());
        assert!(Error::InvalidSite(Vec::new()).warns());
    }

    #[test]
    fn messages_name_the_step_the_object_and_a_missing_permission() {
        assert_eq!(
            apply(500).to_string(),
            "cannot apply StatefulSet docs: API error 500: refused with 500"
        );
        let forbidden = apply(403).to_string();
        assert!(
            forbidden.starts_with("cannot apply StatefulSet docs: API error 403: refused with 403"),
            "{forbidden}"
        );
        assert!(
            forbidden.ends_with("(the operator's Role must grant patch on statefulsets.apps)"),
            "{forbidden}"
        );
        assert_eq!(
            Error::ObjectConflict {
                target: Target::of::<k8s_openapi::api::core::v1::Secret>("sites-session"),
                controller: "not controlled by any Site".into(),
            }
            .to_string(),
            "Secret sites-session exists and is not controlled by any Site; it is left alone and retried in 60s"
        );
        // Each kind of write reads as what it did, and a 403 names the verb its rule lacks.
        let forbidden = |verb| {
            let w = WriteError {
                verb,
                target: Target::of::<crate::crd::Site>("docs"),
                source: Box::new(api(403)),
            };
            w.to_string()
        };
        for (verb, doing, rule) in [
            (
                Verb::Apply,
                "cannot apply Site docs",
                "patch on sites.sites.ecmwf.int)",
            ),
            (
                Verb::Patch,
                "cannot patch Site docs",
                "patch on sites.sites.ecmwf.int)",
            ),
            (
                Verb::PatchStatus,
                "cannot write the status of Site docs",
                "patch on sites.sites.ecmwf.int/status)",
            ),
            (
                Verb::Create,
                "cannot create Site docs",
                "create on sites.sites.ecmwf.int)",
            ),
            (
                Verb::Replace,
                "cannot replace Site docs",
                "update on sites.sites.ecmwf.int)",
            ),
            (
                Verb::Delete,
                "cannot delete Site docs",
                "delete on sites.sites.ecmwf.int)",
            ),
        ] {
            let message = forbidden(verb);
            assert!(message.starts_with(doing), "{verb:?}: {message}");
            assert!(message.ends_with(rule), "{verb:?}: {message}");
        }
        let review = WriteError {
            verb: Verb::Create,
            target: Target::of::<k8s_openapi::api::authentication::v1::TokenReview>(""),
            source: Box::new(api(500)),
        };
        assert_eq!(
            review.to_string(),
            "cannot create a TokenReview: API error 500: refused with 500"
        );
        assert_eq!(review.code(), Some(500));
        assert_eq!(Target::of::<StatefulSet>("x").resource, "statefulsets.apps");
        assert_eq!(
            Target::of::<k8s_openapi::api::core::v1::Secret>("x").resource,
            "secrets"
        );
        assert_eq!(
            Error::InvalidSite(vec![
                FieldError::new("spec.name", "a"),
                FieldError::new("spec.owner", "b")
            ])
            .to_string(),
            "invalid Site: spec.name: a; spec.owner: b"
        );
    }
}
