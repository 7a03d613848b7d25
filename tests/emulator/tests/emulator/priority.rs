//! The Priority admission plugin (pods and PriorityClasses, through the API and for the
//! StatefulSet controller's pods) and the controller's FailedCreate Events.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::fidelity::curl;
use crate::support::{Cluster, api_error, eventually, on_both};

const WAIT: Duration = Duration::from_secs(15);

async fn create_class(c: &Cluster, class: Value) -> PriorityClass {
    let classes: Api<PriorityClass> = Api::all(c.client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(class).unwrap(),
        )
        .await
        .unwrap()
}

fn pod(metadata: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "web", "image": "nginx:1.27"}]);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

on_both! {
async fn pods_get_the_priority_of_their_class_or_are_forbidden(c: Cluster) {
    create_class(&c, json!({"metadata": {"name": "low"}, "value": 100})).await;
    let never = create_class(
        &c,
        json!({"metadata": {"name": "never"}, "value": 50, "preemptionPolicy": "Never"}),
    )
    .await;
    // The class's own default.
    let low: PriorityClass = Api::all(c.client.clone()).get("low").await.unwrap();
    assert_eq!(
        low.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    assert_eq!(never.preemption_policy.as_deref(), Some("Never"));

    // (metadata, spec, Ok((priority, preemptionPolicy, priorityClassName)) or the 403 message)
    type Want = Result<(i64, &'static str, Option<&'static str>), &'static str>;
    let cases: Vec<(Value, Value, Want)> = vec![
        (
            json!({"name": "plain"}),
            json!({}),
            Ok((0, "PreemptLowerPriority", None)),
        ),
        (
            json!({"name": "with-low"}),
            json!({"priorityClassName": "low"}),
            Ok((100, "PreemptLowerPriority", Some("low"))),
        ),
        (
            json!({"name": "with-never"}),
            json!({"priorityClassName": "never"}),
            Ok((50, "Never", Some("never"))),
        ),
        (
            json!({"name": "system"}),
            json!({"priorityClassName": "system-node-critical"}),
            Ok((
                2_000_001_000,
                "PreemptLowerPriority",
                Some("system-node-critical"),
            )),
        ),
        (
            json!({"name": "same-value"}),
            json!({"priorityClassName": "low", "priority": 100}),
            Ok((100, "PreemptLowerPriority", Some("low"))),
        ),
        (
            json!({"name": "missing"}),
            json!({"priorityClassName": "medium-priority"}),
            Err(
                r#"pods "missing" is forbidden: no PriorityClass with name medium-priority was found"#,
            ),
        ),
        (
            json!({"generateName": "gen-"}),
            json!({"priorityClassName": "medium-priority"}),
            Err(
                r#"pods "gen-" is forbidden: no PriorityClass with name medium-priority was found"#,
            ),
        ),
        (
            json!({"name": "other-value"}),
            json!({"priorityClassName": "low", "priority": 7}),
            Err(
                r#"pods "other-value" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 100 from the given PriorityClass name"#,
            ),
        ),
    ];
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    for (metadata, spec, want) in cases {
        let body = pod(metadata.clone(), spec).to_string();
        let (code, _, text) = curl(
            &c,
            "POST",
            "/api/v1/namespaces/default/pods",
            &["Content-Type: application/json"],
            Some(&body),
        )
        .await;
        match want {
            Ok((priority, policy, class)) => {
                assert_eq!(code, 201, "{metadata}: {text}");
                let name = metadata["name"].as_str().unwrap();
                let stored: Value = serde_json::to_value(pods.get(name).await.unwrap()).unwrap();
                assert_eq!(stored["spec"]["priority"], priority, "{metadata}");
                assert_eq!(stored["spec"]["preemptionPolicy"], policy, "{metadata}");
                assert_eq!(
                    stored["spec"]["priorityClassName"].as_str(),
                    class,
                    "{metadata}"
                );
            }
            Err(message) => {
                assert_eq!(code, 403, "{metadata}: {text}");
                let name = metadata["name"]
                    .as_str()
                    .or(metadata["generateName"].as_str())
                    .unwrap();
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": message, "reason": "Forbidden",
                    "details": {"name": name, "kind": "pods"}, "code": 403,
                });
                let got: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(got, status, "{metadata}");
            }
        }
    }
    // The exact body, as the API server writes it.
    let (_, _, text) = curl(
        &c,
        "POST",
        "/api/v1/namespaces/default/pods",
        &["Content-Type: application/json"],
        Some(
            &pod(
                json!({"name": "web"}),
                json!({"priorityClassName": "missing"}),
            )
            .to_string(),
        ),
    )
    .await;
    assert_eq!(
        text.trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"web\" is forbidden: no PriorityClass with name missing was found","reason":"Forbidden","details":{"name":"web","kind":"pods"},"code":403}"#
    );
    // kubectl shows it as the API server's Forbidden.
    let out = c.kubectl_stdin(
        &["create", "-f", "-"],
        Some(
            &pod(
                json!({"name": "web"}),
                json!({"priorityClassName": "missing"}),
            )
            .to_string(),
        ),
    );
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        r#"Error from server (Forbidden): error when creating "STDIN": pods "web" is forbidden: no PriorityClass with name missing was found"#
    );
    // An update that omits the priority keeps it.
    let mut stored: Value = serde_json::to_value(pods.get("with-low").await.unwrap()).unwrap();
    stored["spec"].as_object_mut().unwrap().remove("priority");
    stored["metadata"]["labels"] = json!({"edited": "yes"});
    let replaced = pods
        .replace(
            "with-low",
            &PostParams::default(),
            &serde_json::from_value(stored).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(replaced.spec.unwrap().priority, Some(100));
}
}

on_both! {
async fn the_global_default_class_applies_to_pods_without_one(c: Cluster) {
    create_class(
        &c,
        json!({"metadata": {"name": "fallback"}, "value": 1000, "globalDefault": true, "preemptionPolicy": "Never"}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod(json!({"name": "web"}), json!({}))).unwrap(),
        )
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("fallback"));
    assert_eq!(spec.priority, Some(1000));
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
    // A second default is refused.
    let classes: Api<PriorityClass> = Api::all(c.client.clone());
    let e = api_error(
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": "another"}, "value": 5, "globalDefault": true}),
                )
                .unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        r#"priorityclasses.scheduling.k8s.io "another" is forbidden: PriorityClass fallback is already marked as default. Only one default can exist"#
    );
}
}

on_both! {
async fn a_statefulset_pod_with_a_missing_class_waits_for_it_with_a_failed_create_event(c: Cluster) {
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let events: Api<Event> = Api::namespaced(c.client.clone(), "default");
    let set = sts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 1,
                    "serviceName": "web",
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "priorityClassName": "medium-priority",
                            "containers": [{"name": "web", "image": "nginx:1.27"}]
                        }
                    }
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let failed =
        ListParams::default().fields("involvedObject.kind=StatefulSet,reason=FailedCreate");
    // Retried with a back-off: the one Event counts the failures.
    let event = eventually("a repeated FailedCreate Event", WAIT, || async {
        let list = events.list(&failed).await.unwrap().items;
        (list.len() == 1 && list[0].count.unwrap_or(0) >= 2).then(|| list[0].clone())
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            r#"create Pod web-0 in StatefulSet web failed error: pods "web-0" is forbidden: no PriorityClass with name medium-priority was found"#
        )
    );
    let name = event.metadata.name.clone().unwrap();
    let suffix = name.strip_prefix("web.").unwrap();
    assert!(
        suffix.len() == 16 && suffix.chars().all(|c| c.is_ascii_hexdigit()),
        "{name}"
    );
    let involved = &event.involved_object;
    assert_eq!(
        (
            involved.kind.as_deref(),
            involved.namespace.as_deref(),
            involved.name.as_deref(),
            involved.api_version.as_deref(),
        ),
        (
            Some("StatefulSet"),
            Some("default"),
            Some("web"),
            Some("apps/v1")
        )
    );
    assert_eq!(involved.uid, set.metadata.uid);
    assert!(involved.resource_version.is_some());
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("statefulset-controller")
    );
    assert_eq!(event.reporting_component.as_deref(), Some(""));
    assert_eq!(event.reporting_instance.as_deref(), Some(""));
    assert!(event.first_timestamp.is_some() && event.last_timestamp.is_some());
    // No pod, and the status is left as it was.
    assert!(pods.get_opt("web-0").await.unwrap().is_none());
    let status = sts.get("web").await.unwrap().status.unwrap();
    assert_eq!((status.replicas, status.observed_generation), (0, None));

    // The class appears: the pod is created with its priority.
    create_class(
        &c,
        json!({"metadata": {"name": "medium-priority"}, "value": 500}),
    )
    .await;
    let pod = eventually("web-0", WAIT, || async {
        pods.get_opt("web-0").await.unwrap()
    })
    .await;
    assert_eq!(pod.spec.unwrap().priority, Some(500));
    eventually("the status counts the pod", WAIT, || async {
        let s = sts.get("web").await.unwrap().status?;
        (s.replicas == 1 && s.observed_generation == Some(1)).then_some(())
    })
    .await;
    assert_eq!(events.list(&failed).await.unwrap().items.len(), 1);
}
}
