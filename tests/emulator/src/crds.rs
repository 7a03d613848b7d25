//! CustomResourceDefinition lifecycle: a stored CRD registers its resources (and reports
//! Established); deleting it removes its custom resources and unregisters them.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceInfo;
use crate::state::App;

pub fn is_crd(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "apiextensions.k8s.io" && r.kind == "CustomResourceDefinition"
}

/// Sets what the API server's CRD controllers report for a new CRD: the defaulted names
/// (`singular` = lower-case kind, `listKind` = kind + "List"), `acceptedNames`,
/// `storedVersions` and the conditions. The naming controller accepts each name unless another
/// CRD of the same group already uses it (NamesAccepted False with `PluralConflict`,
/// `SingularConflict`, `ShortNamesConflict`, `KindConflict` or `ListKindConflict`, and
/// Established False `NotAccepted`); the establishing controller then reports Established True.
pub fn establish(crd: &mut Value, others: &[Arc<Value>]) {
    let now = meta::now();
    let names = &mut crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_ascii_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let names = names.clone();
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let own = crd["metadata"]["name"].as_str().unwrap_or_default();
    let mut resources: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    for other in others {
        if other["spec"]["group"].as_str() != Some(group)
            || other["metadata"]["name"].as_str() == Some(own)
        {
            continue;
        }
        let accepted = &other["status"]["acceptedNames"];
        let s = |k: &str| accepted[k].as_str().unwrap_or_default().to_string();
        resources.extend([s("plural"), s("singular")]);
        if let Some(short) = accepted["shortNames"].as_array() {
            resources.extend(short.iter().filter_map(|n| n.as_str().map(str::to_string)));
        }
        kinds.extend([s("kind"), s("listKind")]);
    }
    let in_use = |name: &str, used: &[String]| !name.is_empty() && used.iter().any(|u| u == name);
    // In the naming controller's order; the last conflict found names the condition.
    let mut accepted = serde_json::Map::new();
    let mut conflict: Option<(&str, String)> = None;
    for (field, reason) in [
        ("plural", "PluralConflict"),
        ("singular", "SingularConflict"),
        ("shortNames", "ShortNamesConflict"),
        ("kind", "KindConflict"),
        ("listKind", "ListKindConflict"),
    ] {
        if field == "shortNames" {
            let Some(short) = names["shortNames"].as_array() else {
                continue;
            };
            let taken: Vec<String> = short
                .iter()
                .filter_map(Value::as_str)
                .filter(|n| in_use(n, &resources))
                .map(|n| format!("{n:?} is already in use"))
                .collect();
            match taken.len() {
                0 => {
                    accepted.insert(field.into(), json!(short));
                }
                1 => conflict = Some((reason, taken[0].clone())),
                _ => conflict = Some((reason, format!("[{}]", taken.join(", ")))),
            }
            continue;
        }
        let used = if field.ends_with("ind") {
            &kinds
        } else {
            &resources
        };
        let name = names[field].as_str().unwrap_or_default();
        if in_use(name, used) {
            conflict = Some((reason, format!("{name:?} is already in use")));
        } else if !name.is_empty() {
            accepted.insert(field.into(), json!(name));
        }
    }
    if let Some(c) = names.get("categories") {
        accepted.insert("categories".into(), c.clone());
    }
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let conditions = match conflict {
        None => json!([
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]),
        Some((reason, message)) => json!([
            {"type": "NamesAccepted", "status": "False", "reason": reason, "message": message, "lastTransitionTime": now},
            {"type": "Established", "status": "False", "reason": "NotAccepted", "message": "not all names are accepted", "lastTransitionTime": now},
        ]),
    };
    crd["status"] = json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": conditions,
    });
}

/// Whether a stored CRD's names were accepted (only then are its resources served).
fn names_accepted(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_none_or(|cs| {
        cs.iter()
            .filter(|c| c["type"] == "NamesAccepted")
            .all(|c| c["status"] == "True")
    })
}

/// Called after every committed write: keeps the registry in step with stored CRDs.
pub fn after_write(app: &Arc<App>, r: &ResourceInfo, stored: Option<&Arc<Value>>) {
    if !is_crd(r) {
        return;
    }
    if let Some(crd) = stored.filter(|crd| names_accepted(crd)) {
        let mut st = app.store.lock();
        // Validated before storing; a failure here leaves the old registration.
        let _ = st.registry.register_crd(crd);
        drop(st);
        crate::apiservices::sync(app, false);
    }
}

/// Removes every custom resource of a deleted CRD and unregisters its resources.
pub fn removed(app: &Arc<App>, crd_name: &str) {
    let resources: Vec<Arc<ResourceInfo>> = {
        let st = app.store.lock();
        st.registry
            .all()
            .filter(|r| r.custom.as_ref().is_some_and(|c| c.crd_name == crd_name))
            .cloned()
            .collect()
    };
    if let Some(r) = resources.first() {
        let objects = app.store.lock().objects_of(&r.key(), None);
        for o in objects {
            let ns = meta::meta_str(&o, "namespace")
                .unwrap_or_default()
                .to_string();
            let name = meta::meta_str(&o, "name").unwrap_or_default().to_string();
            let _ = app.store.commit_remove(r, &ns, &name, None, None);
        }
    }
    app.store.lock().registry.unregister_crd(crd_name);
    crate::apiservices::sync(app, false);
}
