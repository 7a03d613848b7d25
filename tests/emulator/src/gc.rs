//! Garbage collection by ownerReferences (background, foreground, orphan) and namespace
//! deletion, run asynchronously after deletions as the kube-controller-manager does.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::meta::{self, meta_str, rv_of};
use crate::state::App;

/// Runs the collector until the process ends.
pub async fn run(app: Arc<App>) {
    loop {
        tokio::select! {
            _ = app.store.gc_wakeup.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        collect(&app);
    }
}

/// One pass: deletes dependents whose owners are all gone, drops dangling references when some
/// owners remain, and completes foreground deletions whose blocking dependents are gone. The
/// dependents looked at are those of the owners deleted (or found absent) since the last pass
/// and of owners some dependent does not see alive ([`crate::store::State::gc_candidates`]).
pub fn collect(app: &Arc<App>) {
    let (orphans, dangling, foreground) = {
        let mut st = app.store.lock();
        if st.gc_pending.is_empty() && !st.foreground_active {
            return;
        }
        let pending = std::mem::take(&mut st.gc_pending);
        let mut orphans = Vec::new();
        let mut dangling = Vec::new();
        for (key, o) in st.gc_candidates(&pending) {
            let uids = o.owners();
            if uids.is_empty() {
                continue;
            }
            let value = o.value();
            let namespace = meta_str(&value, "namespace").unwrap_or_default();
            let alive = |uid: &str| {
                st.by_uid(uid)
                    .is_some_and(|(_, (owner_ns, _))| owner_ns.is_empty() || owner_ns == namespace)
            };
            let live = uids.iter().filter(|u| alive(&u[..])).count();
            let touched = uids.iter().any(|u| pending.contains(&**u)) || live < uids.len();
            if !touched {
                continue;
            }
            if live == 0 {
                orphans.push((key, Arc::new(value)));
            } else if live < uids.len() {
                dangling.push((key, Arc::new(value)));
            }
        }
        let foreground = st.in_foreground_deletion();
        st.foreground_active = !foreground.is_empty();
        (orphans, dangling, foreground)
    };
    for (key, o) in orphans {
        delete_object(app, &key, &o);
    }
    for (key, o) in dangling {
        let Some(r) = app.store.lock().registry.by_key(&key) else {
            continue;
        };
        let mut updated = (*o).clone();
        let st = app.store.lock();
        if let Some(refs) = updated["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"].as_str().is_some_and(|u| st.by_uid(u).is_some()));
        }
        drop(st);
        let _ = app.store.commit_update(&r, rv_of(&o), updated);
    }
    for (key, owner) in foreground {
        let uid = meta_str(&owner, "uid").unwrap_or_default().to_string();
        let dependents = app.store.lock().dependents_of(&uid);
        let mut blocking = false;
        for (dkey, d) in &dependents {
            if d["metadata"]["deletionTimestamp"].is_null() {
                delete_object(app, dkey, d);
            }
            let blocks = d["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["uid"] == json!(uid) && r["blockOwnerDeletion"] == json!(true))
                });
            let still_there = {
                let st = app.store.lock();
                st.by_uid(meta_str(d, "uid").unwrap_or_default()).is_some()
            };
            blocking |= blocks && still_there;
        }
        if !blocking {
            let Some(r) = app.store.lock().registry.by_key(&key) else {
                continue;
            };
            let mut updated = (*owner).clone();
            if let Some(f) = updated["metadata"]["finalizers"].as_array_mut() {
                f.retain(|f| f != "foregroundDeletion");
            }
            let _ = app.store.commit_update(&r, rv_of(&owner), updated);
        }
    }
}

/// Deletes an object the way the collector does (background propagation): objects with
/// finalizers get a deletionTimestamp, others are removed.
fn delete_object(app: &Arc<App>, key: &str, o: &Arc<Value>) {
    let Some(r) = app.store.lock().registry.by_key(key) else {
        return;
    };
    let ns = meta_str(o, "namespace").unwrap_or_default().to_string();
    let name = meta_str(o, "name").unwrap_or_default().to_string();
    let has_finalizers = o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if has_finalizers {
        if o["metadata"]["deletionTimestamp"].is_null() {
            let mut marked = (**o).clone();
            meta::meta_mut(&mut marked).insert("deletionTimestamp".into(), json!(meta::now()));
            let _ = app.store.commit_update(&r, rv_of(o), marked);
        }
    } else {
        let _ = app
            .store
            .commit_remove(&r, &ns, &name, Some(rv_of(o)), None);
    }
}

/// Orphan propagation: removes references to `owner_uid` from its dependents.
pub fn orphan_dependents(app: &Arc<App>, owner_uid: &str) {
    let dependents = app.store.lock().dependents_of(owner_uid);
    for (key, d) in dependents {
        let Some(r) = app.store.lock().registry.by_key(&key) else {
            continue;
        };
        let mut updated = (*d).clone();
        if let Some(refs) = updated["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"] != json!(owner_uid));
        }
        let _ = app.store.commit_update(&r, rv_of(&d), updated);
    }
}

/// Namespace deletion: removes everything in the namespace, then the namespace itself.
pub fn purge_namespace(app: &Arc<App>, ns: &str) {
    let app = app.clone();
    let ns = ns.to_string();
    tokio::spawn(async move {
        let resources: Vec<_> = app
            .store
            .lock()
            .registry
            .all()
            .filter(|r| r.namespaced)
            .cloned()
            .collect();
        let mut seen = std::collections::HashSet::new();
        for r in resources {
            if !seen.insert(r.key()) {
                continue;
            }
            let objects = app.store.lock().stored_of(&r.key(), Some(&ns));
            for ((_, name), _) in objects {
                let _ = app.store.commit_remove(&r, &ns, &name, None, None);
            }
        }
        let namespaces = app.store.lock().registry.get("", "v1", "namespaces");
        if let Some(r) = namespaces {
            let _ = app.store.commit_remove(&r, "", &ns, None, None);
        }
    });
}
