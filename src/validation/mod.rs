//! What every validator speaks:
//!
//! - [`FieldError`]: one violated rule, with the field path it is about. Site rules, platform
//!   configuration problems and admission denials all speak it.
//! - [`format`]: format checks shared by the Site rules and the configuration validator
//!   (Kubernetes names, host names, label keys, image references).
//! - [`Valid`]: a Site that passed every rule of [`crate::rules`] (the validating webhook and
//!   the reconciler call them); rendering takes only a `Valid` Site, so it can trust its input.

pub mod format;
pub mod values;

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

/// Most violations a denial or a status message lists: an answer stays small whatever the
/// object (one with 200,000 invalid keys gets 32 of them and a count).
pub const MAX_LISTED: usize = 32;
/// Most violations kept while rules run; past it they are only counted
/// ([`FieldError::unlisted`]), so a hostile object costs its decoding, not a list its size.
pub const MAX_KEPT: usize = 1024;
/// Most characters of a field path or a message in a denial or a status message (the longest
/// a rule allows, a 255-character image repository or a 256-character header name, shows
/// whole).
pub const MAX_PART_CHARS: usize = 512;
/// Most bytes of the violations a denial or a status message lists: with JSON's escapes, the
/// message and the causes together stay well under 64 KiB.
pub const MAX_LISTED_BYTES: usize = 12 * 1024;

/// The field of the entry that stands for violations that were counted, not kept.
const UNLISTED_FIELD: &str = "…";

impl FieldError {
    /// Stands for `n` more violations that were counted but not kept (past [`MAX_KEPT`]). It
    /// names no field of the object, so ratcheting never drops it.
    pub fn unlisted(n: usize) -> FieldError {
        FieldError::new(UNLISTED_FIELD, format!("{n} more violations"))
    }

    /// How many violations this entry stands for: 1, or n for [`FieldError::unlisted`].
    pub fn count(&self) -> usize {
        if self.field == UNLISTED_FIELD {
            self.message
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1)
        } else {
            1
        }
    }

    /// Whether this entry names a violation (not [`FieldError::unlisted`]).
    pub fn is_listed(&self) -> bool {
        self.field != UNLISTED_FIELD
    }
}

/// `s`, or its first [`MAX_PART_CHARS`] characters and `…`.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(MAX_PART_CHARS) {
        None => s.into(),
        Some((end, _)) => format!("{}…", &s[..end]).into(),
    }
}

/// The violations an answer lists (the first [`MAX_LISTED`] at most, within
/// [`MAX_LISTED_BYTES`], each part [`clip`]ped), and how many more there are.
pub fn listed(errors: &[FieldError]) -> (Vec<FieldError>, usize) {
    let total: usize = errors.iter().map(FieldError::count).sum();
    let mut bytes = 0;
    let shown: Vec<FieldError> = errors
        .iter()
        .filter(|e| e.is_listed())
        .take(MAX_LISTED)
        .map(|e| FieldError::new(clip(&e.field), clip(&e.message)))
        .take_while(|e| {
            bytes += e.field.len() + e.message.len();
            bytes <= MAX_LISTED_BYTES
        })
        .collect();
    let more = total - shown.len();
    (shown, more)
}

/// Field errors joined into one line: `a: x; b: y` (denial messages, status conditions); those
/// [`listed`], then `and N more`.
pub fn join(errors: &[FieldError]) -> String {
    let (shown, more) = listed(errors);
    let mut parts: Vec<String> = shown.iter().map(ToString::to_string).collect();
    if more > 0 {
        parts.push(format!("and {more} more"));
    }
    parts.join("; ")
}

/// Every field error joined as [`join`] does, but all of them, each part [`clip`]ped (what
/// `check-config` and the start-up print: the list is [`MAX_KEPT`] long at most).
pub fn join_all(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", clip(&e.field), clip(&e.message)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Collects field errors while rules run, so that every problem is reported at once: the first
/// [`MAX_KEPT`], and a count of the rest.
#[derive(Debug, Default)]
pub struct FieldErrors {
    kept: Vec<FieldError>,
    unlisted: usize,
    /// The field of each kept violation and every field that holds it (its path up to each
    /// `.` or `[`): what [`FieldErrors::add_once`] looks up, in constant time however many are
    /// kept.
    held: std::collections::HashSet<Box<str>>,
}

impl FieldErrors {
    /// Records a violation of `field`.
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        if self.kept.len() < MAX_KEPT {
            let error = FieldError::new(field, message);
            let field = error.field.as_str();
            for (i, _) in field.match_indices(['.', '[']) {
                if !self.held.contains(&field[..i]) {
                    self.held.insert(field[..i].into());
                }
            }
            if !self.held.contains(field) {
                self.held.insert(field.into());
            }
            self.kept.push(error);
        } else {
            self.unlisted += 1;
        }
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
            if self.kept.len() < MAX_KEPT {
                self.add(field(), m);
            } else {
                self.unlisted += 1;
            }
        }
    }

    /// Adds a violation unless one is already recorded for `field` or a field inside it: a value
    /// that was unreadable should not also be reported as, say, missing.
    pub fn add_once(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let field = field.into();
        if !self.held.contains(field.as_str()) {
            self.add(field, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.unlisted == 0
    }

    /// How many violations were recorded, kept or only counted.
    pub fn len(&self) -> usize {
        self.kept.len() + self.unlisted
    }

    /// The violations kept.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.kept.iter()
    }

    /// The violations kept, and [`FieldError::unlisted`] for those only counted.
    pub fn into_vec(mut self) -> Vec<FieldError> {
        if self.unlisted > 0 {
            self.kept.push(FieldError::unlisted(self.unlisted));
        }
        self.kept
    }
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

    /// Rules that find 5,000 violations keep 1,024 and count the rest; an answer lists 32, the
    /// count of the others, and parts clipped to their bound.
    #[test]
    fn a_violation_added_once_is_left_out_when_its_field_or_one_inside_it_has_one() {
        let mut errors = FieldErrors::default();
        errors.add("a.b[2].c", "x");
        errors.add("d", "y");
        for (field, added) in [
            ("a.b[2].c", false),
            ("a.b[2]", false),
            ("a.b", false),
            ("a", false),
            ("d", false),
            // A prefix that is no field holding it, and fields beside or inside it.
            ("a.b[2].c.e", true),
            ("a.b[1]", true),
            ("a.", true),
            ("a.b[", true),
            ("dd", true),
            ("", true),
        ] {
            let before = errors.len();
            errors.add_once(field, "z");
            assert_eq!(errors.len() > before, added, "{field:?}");
        }
        // Past MAX_KEPT they are counted, and the fields kept still decide.
        let mut errors = FieldErrors::default();
        for i in 0..MAX_KEPT + 10 {
            errors.add_once(format!("list[{i}].name"), "required");
        }
        errors.add_once("list[3]", "other");
        assert_eq!(errors.len(), MAX_KEPT + 10);
        errors.add_once(format!("list[{}]", MAX_KEPT + 5), "other");
        assert_eq!(errors.len(), MAX_KEPT + 11);
    }

    #[test]
    fn violations_are_kept_listed_and_counted_within_bounds() {
        let mut p = FieldErrors::default();
        for i in 0..5000 {
            p.check_at(|| format!("env[{i}]"), Err("bad".into()));
        }
        assert_eq!((p.len(), p.iter().count()), (5000, MAX_KEPT));
        let all = p.into_vec();
        assert_eq!(all.len(), MAX_KEPT + 1);
        assert!(!all[MAX_KEPT].is_listed());
        assert_eq!(all.iter().map(FieldError::count).sum::<usize>(), 5000);
        let (shown, more) = listed(&all);
        assert_eq!((shown.len(), more), (MAX_LISTED, 5000 - MAX_LISTED));
        let message = join(&all);
        assert!(
            message.starts_with("env[0]: bad; env[1]: bad;"),
            "{message}"
        );
        assert!(
            message.ends_with("env[31]: bad; and 4968 more"),
            "{message}"
        );

        let long = FieldError::new("x".repeat(3000), "é".repeat(3000));
        let (shown, more) = listed(std::slice::from_ref(&long));
        assert_eq!(more, 0);
        assert_eq!(shown[0].field.chars().count(), MAX_PART_CHARS + 1);
        assert!(shown[0].message.ends_with("é…"));
        // Long parts: fewer than 32 fit in the listed bytes.
        let (shown, more) = listed(&vec![long; 100]);
        assert!(shown.len() < MAX_LISTED && shown.len() + more == 100);
        let bytes: usize = shown.iter().map(|e| e.field.len() + e.message.len()).sum();
        assert!(bytes <= MAX_LISTED_BYTES, "{bytes}");
        assert_eq!(join(&[]), "");
    }
}
