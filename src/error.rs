//! The operator's error type: one enum, variants named after what failed, each knowing whether
//! it is transient (retry with backoff) or terminal (wait for a new generation).

/// Everything that can go wrong while rendering or reconciling a Site.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Site without metadata the operator needs (only objects not read from the API server).
    #[error("the Site has no {field}")]
    MissingMetadata { field: &'static str },
}

impl Error {
    /// Whether retrying without a spec change can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::MissingMetadata { .. } => false,
        }
    }

    /// A short, bounded label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingMetadata { .. } => "MissingMetadata",
        }
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
