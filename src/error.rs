//! The operator's error type: one enum, variants named after what failed, each knowing whether
//! it is transient (retry with backoff) or terminal (wait for a new generation).

/// Everything that can go wrong while rendering or reconciling a Site.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Site without metadata the operator needs (only objects not read from the API server).
    #[error("the Site has no {field}")]
    MissingMetadata { field: &'static str },
    /// The platform configuration lacks a value this Site needs.
    #[error("the platform configuration has no {key}")]
    MissingConfig { key: &'static str },
    /// The route cannot be expressed in the active routing mode (RTG-09).
    #[error("unsupported route {path:?}: {reason}")]
    UnsupportedRoute { path: String, reason: String },
    /// A value that could break out of generated configuration (an nginx directive, a path).
    #[error("{field}: {reason}")]
    UnsafeValue { field: String, reason: String },
    /// A Site the schema admits but the operator cannot render (e.g. a custom application
    /// without an image, two applications on one port).
    #[error("{field}: {reason}")]
    InvalidSpec { field: String, reason: String },
    /// No public host: neither `routing.host` nor the master Ingress names one.
    #[error("Public host name required: set routing.host in the platform configuration")]
    PublicHostRequired,
}

impl Error {
    /// Whether retrying without a spec change can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            // A configuration change restarts the operator, which reconciles again.
            Error::MissingConfig { .. } | Error::PublicHostRequired => true,
            Error::MissingMetadata { .. }
            | Error::UnsupportedRoute { .. }
            | Error::UnsafeValue { .. }
            | Error::InvalidSpec { .. } => false,
        }
    }

    /// A short, bounded label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingMetadata { .. } => "MissingMetadata",
            Error::MissingConfig { .. } => "MissingConfig",
            Error::UnsupportedRoute { .. } => "UnsupportedRoute",
            Error::UnsafeValue { .. } => "UnsafeValue",
            Error::InvalidSpec { .. } => "InvalidSpec",
            Error::PublicHostRequired => "PublicHostRequired",
        }
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
