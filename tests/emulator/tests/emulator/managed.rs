//! Field ownership through the API (managedFields): creates, updates and patches own what they
//! write as `Update` managers, and server-side apply conflicts with them, as on the API server.
//! The emulator keeps no `.` entries (a map or list item owned as such); ownership is compared
//! by leaf fields.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::fidelity::curl;
use crate::support::{api_error, on_both};

/// The leaf fields of a fieldsV1 set, as dotted paths of its keys (`f:data.f:a`), `.` entries
/// left out.
fn leaves(fields: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        let children: Vec<_> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != ".")
            .collect();
        if children.is_empty() {
            out.insert(prefix.to_string());
        }
        for (k, child) in children {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            walk(child, &path, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(fields, "", &mut out);
    out
}

/// The entries (`manager/operation`) owning the leaf field `path`.
fn owners_of(obj: &Value, path: &str) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| leaves(&e["fieldsV1"]).contains(path))
        .map(|e| {
            format!(
                "{}/{}",
                e["manager"].as_str().unwrap_or("<none>"),
                e["operation"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

async fn get(cms: &Api<ConfigMap>, name: &str) -> Value {
    serde_json::to_value(cms.get(name).await.unwrap()).unwrap()
}

on_both! {
/// A field written by a create belongs to its manager: a server-side apply of another value
/// conflicts, naming the manager and the version it wrote, until it is forced; the same value is
/// shared; a field a patch removes leaves every manager.
async fn an_apply_conflicts_with_the_creator_until_forced(c: Cluster) {
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let apply = |data: Value, force: bool| {
        let cms = cms.clone();
        async move {
            let mut pp = PatchParams::apply("kubectl");
            pp.force = force;
            cms.patch("a", &pp, &Patch::Apply(config_map("a", data))).await
        }
    };
    let created: ConfigMap =
        serde_json::from_value(config_map("a", json!({"a": "1", "b": "1"}))).unwrap();
    cms.create(
        &PostParams {
            field_manager: Some("kubectl-client-side-apply".into()),
            ..Default::default()
        },
        &created,
    )
    .await
    .unwrap();
    let cm = get(&cms, "a").await;
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl-client-side-apply/Update"]);

    let e = api_error(apply(json!({"a": "2"}), false).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a"#
    );
    let cause = &e.details.as_ref().unwrap().causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.message.as_str(), cause.field.as_str()),
        (
            "FieldManagerConflict",
            r#"conflict with "kubectl-client-side-apply" using v1"#,
            ".data.a"
        )
    );

    apply(json!({"a": "1"}), false).await.unwrap();
    let cm = get(&cms, "a").await;
    assert_eq!(
        owners_of(&cm, "f:data.f:a"),
        ["kubectl/Apply", "kubectl-client-side-apply/Update"]
    );

    let forced = apply(json!({"a": "2"}), true).await.unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
    let cm = get(&cms, "a").await;
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl/Apply"]);
    assert_eq!(owners_of(&cm, "f:data.f:b"), ["kubectl-client-side-apply/Update"]);

    // An update takes the field it changes; one removing a field leaves it to no one.
    cms.patch(
        "a",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"a": "3", "b": null}})),
    )
    .await
    .unwrap();
    let cm = get(&cms, "a").await;
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl-edit/Update"]);
    assert!(owners_of(&cm, "f:data.f:b").is_empty(), "{:#}", cm["metadata"]);
}
}

on_both! {
/// Without `fieldManager`, the manager is the User-Agent up to its first `/`, or `unknown`.
async fn the_user_agent_names_a_manager_without_field_manager(c: Cluster) {
    for (name, user_agent, manager) in [
        (
            "a",
            "User-Agent: kubectl-client-side-apply/v1.32.0 (linux/amd64) kubernetes/abcdef",
            "kubectl-client-side-apply",
        ),
        ("b", "User-Agent:", "unknown"),
    ] {
        let (code, _, body) = curl(
            &c,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &["Content-Type: application/json", user_agent],
            Some(&config_map(name, json!({"a": "1"})).to_string()),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        let created: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            owners_of(&created, "f:data.f:a"),
            [format!("{manager}/Update")],
            "{user_agent}"
        );
    }
}
}

on_both! {
/// kubectl: `kubectl create` owns what it created, so a server-side apply of another value
/// fails until `--force-conflicts`. After a client-side `kubectl apply`, kubectl's own
/// server-side apply takes over the fields still as last applied (another manager conflicts),
/// and kubectl then moves the client-side manager's fields to its apply entry.
async fn kubectl_server_side_apply_after_create_and_after_client_side_apply(c: Cluster) {
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let manifest = |name: &str, a: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: \"{a}\"\n")
    };
    let kubectl = |args: &[&str], name: &str, a: &str| {
        let mut all = args.to_vec();
        all.extend(["-f", "-"]);
        c.kubectl_stdin(&all, Some(&manifest(name, a)))
    };

    let out = kubectl(&["create"], "created", "1");
    assert!(out.status.success(), "{out:?}");
    let out = kubectl(&["apply", "--server-side"], "created", "2");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.a"#
        ),
        "{stderr}"
    );
    let out = kubectl(&["apply", "--server-side", "--force-conflicts"], "created", "2");
    assert!(out.status.success(), "{out:?}");
    let cm = get(&cms, "created").await;
    assert_eq!(cm["data"]["a"], "2");
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl/Apply"]);

    let out = kubectl(&["apply"], "applied", "1");
    assert!(out.status.success(), "{out:?}");
    let cm = get(&cms, "applied").await;
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl-client-side-apply/Update"]);
    let out = kubectl(&["apply", "--server-side", "--field-manager=other"], "applied", "2");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a"#
        ),
        "{stderr}"
    );
    let out = kubectl(&["apply", "--server-side"], "applied", "2");
    assert!(out.status.success(), "{out:?}");
    let cm = get(&cms, "applied").await;
    assert_eq!(cm["data"]["a"], "2");
    assert_eq!(owners_of(&cm, "f:data.f:a"), ["kubectl/Apply"], "{:#}", cm["metadata"]);
    assert!(
        cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap()
            .contains(r#""data":{"a":"2"}"#),
        "{:#}",
        cm["metadata"]
    );
}
}

on_both! {
/// A uid in an applied object holds the apply to that object: with nothing of that name it is
/// a conflict, not a creation (patch.go's applyPatch); with another object of that name it is
/// invalid, `metadata.uid` being immutable (kubernetes/kubernetes#127625), and the object is
/// left as it was; a merge patch naming another uid is refused alike, and a PUT's uid is its
/// precondition (409).
async fn a_uid_holds_an_apply_to_the_object_it_names(c: Cluster) {
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let pp = PatchParams::apply("owner").force();
    let with_uid = |uid: &str, data: Value| {
        let mut cm = config_map("u", data);
        cm["metadata"]["uid"] = json!(uid);
        cm
    };
    let ghost = "0b4d6f2e-1c1a-4f55-9a52-7d4c2a8e9f10";
    let e = api_error(
        cms.patch("u", &pp, &Patch::Apply(with_uid(ghost, json!({"a": "1"}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"u\": uid mismatch: the provided object specified uid {ghost}, and no existing object was found"
        )
    );
    assert!(cms.get_opt("u").await.unwrap().is_none(), "nothing created");

    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(config_map("u", json!({"theirs": "1"}))).unwrap(),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let e = api_error(
        cms.patch("u", &pp, &Patch::Apply(with_uid(ghost, json!({"a": "1"}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        format!("ConfigMap \"u\" is invalid: metadata.uid: Invalid value: \"{ghost}\": field is immutable")
    );
    let e = api_error(
        cms.patch(
            "u",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"uid": ghost}, "data": {"a": "1"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let e = api_error(
        cms.replace(
            "u",
            &PostParams::default(),
            &serde_json::from_value(with_uid(ghost, json!({"a": "1"}))).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message
            .contains(&format!("Precondition failed: UID in precondition: {ghost}, UID in object meta: {uid}")),
        "{}",
        e.message
    );
    let unchanged = cms.get("u").await.unwrap();
    assert_eq!(unchanged.data, created.data);
    assert_eq!(unchanged.metadata.resource_version, created.metadata.resource_version);

    // Its own uid: applied.
    let applied = cms
        .patch("u", &pp, &Patch::Apply(with_uid(&uid, json!({"a": "1"}))))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["a"], "1");
}
}
