//! Validation: the one place where input rules live, for every caller.
//!
//! - [`FieldError`]: one violated rule, with the field path it is about. Site rules, platform
//!   configuration problems and admission denials all speak it.
//! - [`format`]: format checks shared by the Site rules and the configuration validator
//!   (Kubernetes names, host names, label keys, image references).
//! - [`site`]: every Site rule. The validating webhook calls it; the reconciler calls it before
//!   rendering, and rendering takes only a [`site::Valid`] Site, so it can trust its input.

pub mod format;
pub mod site;

use std::fmt;

pub use format::*;

/// One violated rule: the field path (`spec.configuration.applications[2].port`,
/// `routing.gateway.name`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Field errors joined into one line: `a: x; b: y` (denial messages, status conditions).
pub fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Collects field errors while rules run, so that every problem is reported at once.
#[derive(Debug, Default)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// Records a violation of `field`.
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    /// Records the message of a failed check of `field`.
    pub fn check(&mut self, field: impl Into<String>, result: Result<(), String>) {
        if let Err(m) = result {
            self.add(field, m);
        }
    }

    /// Adds a violation unless one is already recorded for `field` or a field inside it: a value
    /// that was unreadable should not also be reported as, say, missing.
    pub fn add_once(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let field = field.into();
        let already = self.0.iter().any(|e| {
            e.field == field
                || e.field.starts_with(&format!("{field}."))
                || e.field.starts_with(&format!("{field}["))
        });
        if !already {
            self.add(field, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }
}
