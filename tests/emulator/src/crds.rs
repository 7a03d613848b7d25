//! CustomResourceDefinition lifecycle: a stored CRD registers its resources (and reports
//! Established); deleting it removes its custom resources and unregisters them.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceInfo;
use crate::server::App;

fn is_crd(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "apiextensions.k8s.io" && r.kind == "CustomResourceDefinition"
}

/// Sets the status conditions a working API server reports for an accepted CRD.
pub fn establish(crd: &mut Value) {
    let now = meta::now();
    let names = crd["spec"]["names"].clone();
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    crd["status"] = json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    });
}

/// Called after every committed write: keeps the registry in step with stored CRDs.
pub fn after_write(app: &Arc<App>, r: &ResourceInfo, stored: Option<&Arc<Value>>) {
    if !is_crd(r) {
        return;
    }
    if let Some(crd) = stored {
        let mut st = app.store.lock();
        // Validated before storing; a failure here leaves the old registration.
        let _ = st.registry.register_crd(crd);
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
}
