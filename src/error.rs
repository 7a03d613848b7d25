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
}

impl Error {
    /// Whether retrying without a spec change can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            // A configuration change restarts the operator, which reconciles again.
            Error::MissingConfig { .. } => true,
            Error::MissingMetadata { .. }
            | Error::UnsupportedRoute { .. }
            | Error::UnsafeValue { .. } => false,
        }
    }

    /// A short, bounded label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingMetadata { .. } => "MissingMetadata",
            Error::MissingConfig { .. } => "MissingConfig",
            Error::UnsupportedRoute { .. } => "UnsupportedRoute",
            Error::UnsafeValue { .. } => "UnsafeValue",
        }
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
