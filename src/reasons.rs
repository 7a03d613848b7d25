//! Condition types and the reasons of conditions and Events: one place, so that status, Events,
//! docs and tests spell them the same way.

/// Condition type: the site's objects exist and its pods are Running and Ready.
pub const AVAILABLE: &str = "Available";
/// Condition type: another reconcile is expected before the status reflects the spec.
pub const PROGRESSING: &str = "Progressing";
/// Condition type (kstatus): Available and not Progressing at the current generation, or scaled
/// to zero on purpose.
pub const READY: &str = "Ready";
/// Condition type (kstatus): work is under way; the same status and reason as Progressing.
pub const RECONCILING: &str = "Reconciling";
/// Condition type (kstatus): a terminal error stops the reconciles until something changes.
pub const STALLED: &str = "Stalled";

/// Condition type, and its reason: the Site is paused (ROL-03); present only while it is.
pub const PAUSED: &str = "Paused";

// Condition reasons.
/// Available: every wanted pod is ready.
pub const AVAILABLE_REASON: &str = "Available";
/// Available False / Progressing False: the site is archived and scaled to zero.
pub const DISABLED: &str = "Disabled";
/// Available False / Progressing False: `settings.replicas` is 0.
pub const SCALED_TO_ZERO: &str = "ScaledToZero";
/// Available False: the reconcile stopped before every object was written.
pub const OBJECTS_NOT_READY: &str = "ObjectsNotReady";
/// Available False / Progressing True: waiting for pods to become ready.
pub const PODS_NOT_READY: &str = "PodsNotReady";
/// Available False / Progressing True: the StatefulSet cannot create the site's pods (its
/// `FailedCreate` Event: a missing PriorityClass, a quota, an admission policy); the message is
/// the API server's.
pub const FAILED_CREATE: &str = "FailedCreate";
/// Progressing False: nothing more to do.
pub const UP_TO_DATE: &str = "UpToDate";
/// Progressing True: a retryable failure (API unreachable, 5xx, 409, 429, missing host, ...).
pub const TRANSIENT_ERROR: &str = "TransientError";
/// Progressing False: the Site cannot be rendered, or the API server refused what it renders
/// (400, 422); nothing is retried until the spec changes. Also a Warning Event.
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
/// Progressing False: the API server refused the operator a request (403): the Role lacks a
/// permission. Also a Warning Event.
pub const FORBIDDEN: &str = "Forbidden";
/// Progressing True: a route of the site's name belongs to another site (RTG-03, LIFE-07).
/// Also a Warning Event.
pub const ROUTE_CONFLICT: &str = "RouteConflict";
/// Progressing True: an object of an owned object's name exists and this Site does not control
/// it; it and the objects after it are not written (SPEC 4.6). Also a Warning Event.
pub const OBJECT_CONFLICT: &str = "ObjectConflict";
/// Progressing True: an older Site serves the same public path; this Site gets no route (SPEC
/// 4.6). Also a Warning Event.
pub const PATH_CONFLICT: &str = "PathConflict";

/// Progressing True: a platform change rolls this Site's pods when the change budget has a slot
/// free (ROL-01).
pub const ROLLOUT_PENDING: &str = "RolloutPending";
/// Progressing False, Stalled True: the rollout of the configuration in force is halted; this
/// Site's pods do not roll until the configuration changes (ROL-02). Also one Warning Event on
/// the `sites-config` ConfigMap.
pub const ROLLOUT_HALTED: &str = "RolloutHalted";

/// Stalled False: no terminal error.
pub const NO_TERMINAL_ERROR: &str = "NoTerminalError";

// Event reasons (Normal).
/// The reconcile created objects (one Event listing them).
pub const CREATED: &str = "Created";
/// A new version of the `sites-config` ConfigMap is in force (Event on the ConfigMap; its
/// Warning counterpart, a refused version, is [`INVALID_CONFIGURATION`]).
pub const CONFIGURATION_APPLIED: &str = "ConfigurationApplied";
/// A qualifying change or upgrade request rolls the site pods.
pub const RESTARTED: &str = "Restarted";
/// A retained volume is re-bound to the new claim.
pub const VOLUME_REATTACHED: &str = "VolumeReattached";
