//! Logging what changed in a Site (SPEC section 6): the changed field paths at info, old and new
//! values at debug, values of secret-looking fields masked, long values cut at 120 characters.

use serde_json::Value;

/// Values longer than this are cut in logs.
pub const MAX_VALUE_CHARS: usize = 120;
const MASK: &str = "********";

/// One changed field.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

/// Whether a new version of a Site holds a change worth logging: its spec, annotations or
/// labels differ. A status write changes none of them, so the most common update costs a
/// comparison, not two serialisations.
pub fn site_edited(old: &crate::crd::Site, new: &crate::crd::Site) -> bool {
    old.spec != new.spec
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.labels != new.metadata.labels
}

/// Whether a new version of a Site can change what its reconcile does: [`site_edited`], or a
/// change of its deletion, owners or finalizers. A status-only update cannot; the watch still
/// queues one that the operator did not write
/// ([`Statuses`](crate::controller::own_writes::Statuses)), so that the status is
/// repaired.
pub fn site_changed(old: &crate::crd::Site, new: &crate::crd::Site) -> bool {
    site_edited(old, new)
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.owner_references != new.metadata.owner_references
        || old.metadata.finalizers != new.metadata.finalizers
        || old.metadata.uid != new.metadata.uid
}

/// Whether a new version of a persistent volume can change what a reconcile does. The one change
/// that cannot: the site labels added to the volume bound to that site's own claim (the
/// operator's delayed label patch, [`crate::controller::volumes::label_later`]; the reconcile of
/// that site only schedules it). Any other change (a claim reference, labels of another site,
/// labels removed) is queued.
pub fn volume_changed(old: &crate::watched::Volume, new: &crate::watched::Volume) -> bool {
    use kube::ResourceExt as _;
    if old == new {
        return false;
    }
    let Some(id) = new.labels().get(crate::crd::ID_LABEL) else {
        return true;
    };
    let own_claim = new
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|c| c.name.as_deref())
        == Some(id.as_str());
    let was = old.labels().get(crate::crd::ID_LABEL);
    let wanted = crate::labels::labels(id);
    if !own_claim
        || was.is_some_and(|w| w != id)
        || !wanted.iter().all(|(k, v)| new.labels().get(k) == Some(v))
    {
        return true;
    }
    let without = |pv: &crate::watched::Volume| {
        let mut pv = pv.clone();
        if let Some(labels) = pv.metadata.labels.as_mut() {
            labels.retain(|k, _| !wanted.contains_key(k));
            if labels.is_empty() {
                pv.metadata.labels = None;
            }
        }
        pv
    };
    without(old) != without(new)
}

/// Every leaf that differs between `old` and `new`, as dotted paths (`spec.configuration.quota`,
/// `spec.configuration.applications[1].image`). Lists of different lengths are one change.
pub fn changes(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &mut out);
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk(path: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<Change>) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                walk(&join(path, k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}[{i}]"), Some(x), Some(y), out);
            }
        }
        (a, b) if a != b => out.push(Change {
            path: path.to_string(),
            old: a.cloned(),
            new: b.cloned(),
        }),
        _ => {}
    }
}

/// Whether a field's name looks like it holds a secret.
pub fn secret_looking(path: &str) -> bool {
    let last = path
        .rsplit(['.', '['])
        .next()
        .unwrap_or(path)
        .trim_end_matches(']')
        .trim_matches('"')
        .to_ascii_lowercase();
    [
        "password",
        "passwd",
        "secret",
        "token",
        "key",
        "credential",
        "auth",
        "cookie",
        "private",
    ]
    .iter()
    .any(|w| last.contains(w))
}

/// A value as logged: masked for secret-looking fields, cut at [`MAX_VALUE_CHARS`].
pub fn shown(path: &str, value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "<unset>".into();
    };
    if secret_looking(path) {
        return MASK.into();
    }
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > MAX_VALUE_CHARS {
        let cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Logs the changes between two versions of a Site's spec and annotations.
pub fn log_site_changes(name: &str, old: &Value, new: &Value) {
    let changes = changes(old, new);
    if changes.is_empty() {
        return;
    }
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    tracing::info!(site = name, changed = ?paths, "Site changed");
    for c in &changes {
        tracing::debug!(
            site = name,
            field = %c.path,
            old = %shown(&c.path, c.old.as_ref()),
            new = %shown(&c.path, c.new.as_ref()),
            "Site field changed"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_site_label_of_the_sites_own_volume_is_not_a_change() {
        use crate::watched::Volume;
        let pv = |labels: Option<&str>, extra: Option<(&str, &str)>, claim: &str| {
            let mut labels = labels.map(crate::labels::labels).unwrap_or_default();
            if let Some((k, v)) = extra {
                labels.insert(k.into(), v.into());
            }
            serde_json::from_value::<Volume>(serde_json::json!({
                "metadata": {"name": "pv-1", "labels": labels},
                "spec": {"claimRef": {"name": claim, "namespace": "sites"}},
            }))
            .unwrap()
        };
        let cases = [
            // (old, new, changed)
            (pv(None, None, "a"), pv(Some("a"), None, "a"), false),
            (pv(Some("a"), None, "a"), pv(Some("a"), None, "a"), false),
            (
                pv(None, Some(("team", "x")), "a"),
                pv(Some("a"), Some(("team", "x")), "a"),
                false,
            ),
            // Another site's volume, a relabel, a removal, a claim change, a foreign label.
            (pv(None, None, "b"), pv(Some("a"), None, "b"), true),
            (pv(Some("b"), None, "a"), pv(Some("a"), None, "a"), true),
            (pv(Some("a"), None, "a"), pv(None, None, "a"), true),
            (pv(Some("a"), None, "a"), pv(Some("a"), None, "c"), true),
            (
                pv(Some("a"), None, "a"),
                pv(Some("a"), Some(("team", "x")), "a"),
                true,
            ),
        ];
        for (i, (old, new, want)) in cases.iter().enumerate() {
            assert_eq!(super::volume_changed(old, new), *want, "case {i}");
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn changed_paths_are_the_differing_leaves() {
        let old = json!({"spec": {"name": "a", "configuration": {"quota": "1Gi", "headers": {"X": "1"},
            "applications": [{"name": "static"}, {"name": "app", "image": "x:1"}]}}});
        let new = json!({"spec": {"name": "a", "configuration": {"quota": "2Gi", "headers": {"Y": "1"},
            "applications": [{"name": "static"}, {"name": "app", "image": "x:2"}]}}});
        let paths: Vec<String> = changes(&old, &new).into_iter().map(|c| c.path).collect();
        assert_eq!(
            paths,
            [
                "spec.configuration.applications[1].image",
                "spec.configuration.headers.X",
                "spec.configuration.headers.Y",
                "spec.configuration.quota"
            ]
        );
        assert!(changes(&old, &old).is_empty());
    }

    #[test]
    fn secret_looking_values_are_masked_and_long_ones_cut() {
        // (path, value, shown)
        let long = "a".repeat(200);
        let cases = [
            (
                "spec.configuration.applications[0].env.DB_PASSWORD",
                json!("hunter2"),
                MASK.to_string(),
            ),
            (
                "spec.configuration.applications[0].env.API_TOKEN",
                json!("t"),
                MASK.to_string(),
            ),
            (
                "spec.configuration.applications[0].env[\"SECRET_KEY\"]",
                json!("k"),
                MASK.to_string(),
            ),
            ("spec.configuration.quota", json!("2Gi"), "2Gi".to_string()),
            (
                "spec.description",
                json!(long),
                format!("{}...", "a".repeat(120)),
            ),
            (
                "spec.configuration.settings.replicas",
                json!(3),
                "3".to_string(),
            ),
        ];
        for (path, value, want) in cases {
            assert_eq!(shown(path, Some(&value)), want, "{path}");
        }
        assert_eq!(shown("x", None), "<unset>");
    }
}
