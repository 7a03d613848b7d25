//! What every validator speaks:
//!
//! - [`FieldError`]: one violated rule, with the field path it is about. Site rules, platform
//!   configuration problems and admission denials all speak it.
//! - [`format`]: format checks shared by the Site rules and the configuration validator
//!   (Kubernetes names, host names, label keys, image references).
//! - [`Valid`]: a Site that passed every rule of [`crate::rules`] (the validating webhook and
//!   the reconciler call them); rendering takes only a `Valid` Site, so it can trust its input.

pub mod format;

use std::fmt;

use crate::crd::Site;

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

    /// [`FieldErrors::check`] with the field's path built only when the check failed (a valid
    /// object formats no paths).
    pub fn check_at(&mut self, field: impl FnOnce() -> String, result: Result<(), String>) {
        if let Err(m) = result {
            self.add(field(), m);
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

/// The value a field path (`spec.configuration.applications[2].port`,
/// `spec.configuration.headers["X-Frame-Options"]`) names in a JSON document, if the path is
/// well-formed and the value exists. Map keys are in the quoting of [`map_field`].
pub fn value_at<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    let mut value = doc;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            if let Some(quoted) = inner.strip_prefix('"') {
                let (key, after) = unquote(quoted)?;
                value = value.get(key.as_str())?;
                rest = after.strip_prefix(']')?;
            } else {
                let end = inner.find(']')?;
                value = value.get(inner[..end].parse::<usize>().ok()?)?;
                rest = &inner[end + 1..];
            }
        } else {
            let rest_after_dot = rest.strip_prefix('.').unwrap_or(rest);
            let end = rest_after_dot
                .find(['.', '['])
                .unwrap_or(rest_after_dot.len());
            value = value.get(&rest_after_dot[..end])?;
            rest = &rest_after_dot[end..];
        }
    }
    Some(value)
}

/// Reads a string quoted by Rust's `{:?}` (the closing quote not yet read); returns the string
/// and what follows the closing quote.
fn unquote(quoted: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &quoted[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                'u' => {
                    // \u{XXXX}
                    let (_, open) = chars.next()?;
                    if open != '{' {
                        return None;
                    }
                    let mut hex = String::new();
                    for (_, h) in chars.by_ref() {
                        if h == '}' {
                            break;
                        }
                        hex.push(h);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// A Site that satisfies every rule for the configuration it was checked against: the only
/// input rendering accepts. Only [`crate::rules::validate`] makes one.
#[derive(Clone, Copy, Debug)]
pub struct Valid<'a>(&'a Site);

impl<'a> Valid<'a> {
    /// A Site [`crate::rules::validate`] found to satisfy every rule.
    pub(crate) fn checked(site: &'a Site) -> Valid<'a> {
        Valid(site)
    }

    /// The Site.
    pub fn site(self) -> &'a Site {
        self.0
    }
}

impl std::ops::Deref for Valid<'_> {
    type Target = Site;

    fn deref(&self) -> &Site {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths_name_their_value() {
        let doc = json!({"spec": {"name": "a", "configuration": {
            "applications": [{"name": "x"}, {"name": "y", "port": 9}],
            "headers": {"X-A": "1", "we\"ird\\key\n\u{1}": "2", "a.b[0]": "3"}
        }}});
        let weird = map_field("spec.configuration.headers", "we\"ird\\key\n\u{1}");
        let dotted = map_field("spec.configuration.headers", "a.b[0]");
        let cases: Vec<(&str, Option<serde_json::Value>)> = vec![
            ("spec.name", Some(json!("a"))),
            ("spec.configuration.applications[1].port", Some(json!(9))),
            (
                "spec.configuration.applications[1]",
                Some(json!({"name": "y", "port": 9})),
            ),
            ("spec.configuration.headers[\"X-A\"]", Some(json!("1"))),
            (weird.as_str(), Some(json!("2"))),
            (dotted.as_str(), Some(json!("3"))),
            ("spec.configuration.applications[2].port", None),
            ("spec.missing", None),
            ("spec.configuration.headers[\"X-A", None),
            ("spec.configuration.applications[x]", None),
        ];
        for (path, want) in cases {
            assert_eq!(value_at(&doc, path).cloned(), want, "{path}");
        }
    }
}
