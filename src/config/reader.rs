//! A path-aware reader over a parsed YAML document: pulls typed values out of mappings, records
//! a [`FieldError`](crate::validation::FieldError) for every wrong type or unknown key, and keeps going so that every problem of a
//! file is reported in one pass.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::validation::FieldErrors;

/// Path of a child key: `parent.key`, or `parent["key"]` when the key is not a plain identifier.
pub(super) fn child_path(parent: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (true, false) => format!("[{key:?}]"),
        (false, true) => format!("{parent}.{key}"),
        (false, false) => format!("{parent}[{key:?}]"),
    }
}

/// A key that moved elsewhere or is no longer allowed, with the message that says where to.
pub(super) struct Moved {
    pub key: &'static str,
    pub message: &'static str,
}

/// A cursor over one mapping of the document. Every key asked for is remembered as known;
/// [`Section::finish`] reports the keys nobody asked for.
pub(super) struct Section<'a> {
    pub(super) path: String,
    map: Option<&'a Map<String, Value>>,
    known: Vec<&'static str>,
}

impl<'a> Section<'a> {
    /// A section over `value` at `path`; a non-mapping value is reported and read as empty.
    pub(super) fn new(path: String, value: Option<&'a Value>, problems: &mut FieldErrors) -> Self {
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                problems.add(
                    if path.is_empty() {
                        "(document)".to_string()
                    } else {
                        path.clone()
                    },
                    format!("must be a mapping, found {}", describe(other)),
                );
                None
            }
        };
        Section {
            path,
            map,
            known: Vec::new(),
        }
    }

    fn path_of(&self, key: &str) -> String {
        child_path(&self.path, key)
    }

    /// The raw value of `key` (null counts as absent), marking the key as known.
    pub(super) fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map?.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is present (even with a null value).
    pub(super) fn has(&self, key: &str) -> bool {
        self.map.is_some_and(|m| m.contains_key(key))
    }

    /// A nested mapping.
    pub(super) fn section(&mut self, key: &'static str, problems: &mut FieldErrors) -> Section<'a> {
        let path = self.path_of(key);
        let value = self.raw(key);
        Section::new(path, value, problems)
    }

    /// A string; an empty string counts as absent.
    pub(super) fn string(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> Option<String> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => {
                problems.add(path, format!("must be a string; quote the value (\"{n}\")"));
                None
            }
            Value::Bool(b) => {
                problems.add(path, format!("must be a string; quote the value (\"{b}\")"));
                None
            }
            other => {
                problems.add(path, format!("must be a string, found {}", describe(other)));
                None
            }
        }
    }

    /// `Some(string)` when `key` is present (an empty or null value gives `Some(None)`), `None`
    /// when it is absent: lets a file clear a field whose default is set.
    pub(super) fn string_if_present(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> Option<Option<String>> {
        if self.has(key) {
            Some(self.string(key, problems))
        } else {
            self.known.push(key);
            None
        }
    }

    /// A boolean.
    pub(super) fn boolean(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> Option<bool> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Bool(b) => Some(*b),
            other => {
                problems.add(
                    path,
                    format!("must be true or false, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// A non-negative whole number no larger than `max`.
    pub(super) fn uint(
        &mut self,
        key: &'static str,
        max: u64,
        problems: &mut FieldErrors,
    ) -> Option<u64> {
        let path = self.path_of(key);
        let value = self.raw(key)?;
        match value.as_u64() {
            Some(n) if n <= max => Some(n),
            Some(n) => {
                problems.add(path, format!("must be at most {max}, found {n}"));
                None
            }
            None => {
                problems.add(
                    path,
                    format!(
                        "must be a whole number from 0 to {max}, found {}",
                        describe(value)
                    ),
                );
                None
            }
        }
    }

    /// A mapping of strings to strings (annotations, labels).
    pub(super) fn string_map(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> BTreeMap<String, String> {
        let path = self.path_of(key);
        let mut out = BTreeMap::new();
        match self.raw(key) {
            None => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    match v {
                        Value::String(s) => {
                            out.insert(k.clone(), s.clone());
                        }
                        other => problems.add(
                            child_path(&path, k),
                            format!(
                                "must be a string, found {}; quote the value",
                                describe(other)
                            ),
                        ),
                    }
                }
            }
            Some(other) => problems.add(
                path,
                format!("must be a mapping, found {}", describe(other)),
            ),
        }
        out
    }

    /// A list of strings.
    pub(super) fn string_list(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (item_path, item) in self.list(key, problems) {
            match item {
                Value::String(s) => out.push((item_path, s.clone())),
                other => problems.add(
                    item_path,
                    format!("must be a string, found {}", describe(other)),
                ),
            }
        }
        out
    }

    /// A list, with the path of each item.
    pub(super) fn list(
        &mut self,
        key: &'static str,
        problems: &mut FieldErrors,
    ) -> Vec<(String, &'a Value)> {
        let path = self.path_of(key);
        match self.raw(key) {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("{path}[{i}]"), v))
                .collect(),
            Some(other) => {
                problems.add(path, format!("must be a list, found {}", describe(other)));
                Vec::new()
            }
        }
    }

    /// Reports every key nobody asked for: moved keys with their replacement, the rest as
    /// unknown (with the closest known key as a suggestion).
    pub(super) fn finish(self, moved: &[Moved], problems: &mut FieldErrors) {
        let Some(map) = self.map else { return };
        for key in map.keys() {
            if self.known.contains(&key.as_str()) {
                continue;
            }
            let path = child_path(&self.path, key);
            if let Some(m) = moved.iter().find(|m| m.key == key) {
                problems.add(path, m.message);
                continue;
            }
            let suggestion = self
                .known
                .iter()
                .map(|k| {
                    (
                        strsim::damerau_levenshtein(&key.to_lowercase(), &k.to_lowercase()),
                        k,
                    )
                })
                .filter(|(d, k)| *d <= 2.max(k.len() / 4))
                .min_by_key(|(d, _)| *d)
                .map(|(_, k)| format!(" (did you mean {}?)", child_path(&self.path, k)))
                .unwrap_or_default();
            problems.add(path, format!("unknown key{suggestion}"));
        }
    }
}

/// A short description of a value's type for messages.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {:?}", truncate(s, 40)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_paths_quote_keys_that_are_not_identifiers() {
        assert_eq!(child_path("", "routing"), "routing");
        assert_eq!(child_path("routing", "host"), "routing.host");
        assert_eq!(
            child_path("routing.ingress.routeAnnotations", "nginx.org/lb-method"),
            "routing.ingress.routeAnnotations[\"nginx.org/lb-method\"]"
        );
    }

    #[test]
    fn add_once_skips_keys_already_reported() {
        let mut p = FieldErrors::default();
        p.add("routing.host", "must be a string");
        p.add_once("routing.host", "required in gateway mode");
        p.add_once("routing", "something");
        p.add_once("routing.hubHost", "other");
        let keys: Vec<_> = p.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(keys, ["routing.host", "routing.hubHost"]);
    }
}
