//! Object metadata rules: names, labels, annotations, server-stamped fields, timestamps.

use serde_json::{Map, Value};

use crate::registry::{NameRule, ResourceInfo};

/// ObjectMeta fields; anything else under `metadata` is dropped (or rejected under Strict).
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Total size limit of annotations (keys plus values), as the API server enforces.
pub const ANNOTATIONS_LIMIT: usize = 262_144;

/// Current time, RFC 3339 to the second.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `metadata` of an object as a map (created when missing).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The resourceVersion of a stored object as a number.
pub fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Removes unknown ObjectMeta fields, returning their paths (`metadata.foo`).
pub fn prune_meta(obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let keys: Vec<String> = meta.keys().cloned().collect();
        for k in keys {
            if !OBJECT_META_FIELDS.contains(&k.as_str()) {
                meta.remove(&k);
                unknown.push(format!("metadata.{k}"));
            }
        }
    }
    unknown
}

/// Validates name, labels and annotations; returns API causes (field, reason, message).
pub fn validate_meta(r: &ResourceInfo, obj: &Value) -> Vec<(String, &'static str, String)> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name").unwrap_or_default();
    if let Err(msg) = check_name(r.name_rule, name) {
        causes.push((
            "metadata.name".to_string(),
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: {msg}"),
        ));
    }
    let meta = &obj["metadata"];
    if let Some(labels) = meta.get("labels") {
        match labels.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if let Err(msg) = check_qualified_name(k) {
                        causes.push((
                            "metadata.labels".into(),
                            "FieldValueInvalid",
                            format!("Invalid value: {k:?}: {msg}"),
                        ));
                    }
                    match v.as_str() {
                        Some(v) => {
                            if let Err(msg) = check_label_value(v) {
                                causes.push((
                                    "metadata.labels".into(),
                                    "FieldValueInvalid",
                                    format!("Invalid value: {v:?}: {msg}"),
                                ));
                            }
                        }
                        None => causes.push((
                            "metadata.labels".into(),
                            "FieldValueTypeInvalid",
                            format!("Invalid value: {v}: label values must be strings"),
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => causes.push((
                "metadata.labels".into(),
                "FieldValueTypeInvalid",
                "Invalid value: must be a map of strings".into(),
            )),
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in annotations {
            if let Err(msg) = check_qualified_name(&k.to_ascii_lowercase()) {
                causes.push((
                    "metadata.annotations".into(),
                    "FieldValueInvalid",
                    format!("Invalid value: {k:?}: {msg}"),
                ));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_LIMIT {
            causes.push((
                "metadata.annotations".into(),
                "FieldValueTooLong",
                format!("Too long: must have at most {ANNOTATIONS_LIMIT} bytes"),
            ));
        }
    }
    causes
}

/// Checks an object name against a resource's naming rule.
pub fn check_name(rule: NameRule, name: &str) -> Result<(), String> {
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 || !name.split('.').all(label_ok) {
                return Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
            }
        }
        NameRule::Label => {
            if !label_ok(name) {
                return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
            }
        }
        NameRule::PathSegment => {
            for bad in [".", ".."] {
                if name == bad {
                    return Err(format!("may not be '{bad}'"));
                }
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    return Err(format!("may not contain '{bad}'"));
                }
            }
        }
        NameRule::Dns1035 => {
            if !label_ok(name) || !name.as_bytes()[0].is_ascii_lowercase() {
                return Err("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into());
            }
        }
    }
    Ok(())
}

/// Checks a label or annotation key (qualified name).
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || check_name(NameRule::Subdomain, p).is_err())
    {
        return Err("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
    }
    if name.is_empty() || name.len() > 63 || !name_part_ok(name) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 characters of the name-part alphabet.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    if v.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !name_part_ok(v) {
        return Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    Ok(())
}

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `generateName` suffix: five random lowercase alphanumerics.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}
