//! The API server's `Priority` admission plugin (`plugin/pkg/admission/priority`), one of its
//! built-in plugins: it runs before the mutating webhooks (admit) and before the validating
//! webhooks (validate), for writes through the API and for the pods the emulator's own
//! controllers create.
//!
//! - A new pod naming a `priorityClassName` gets `spec.priority` = the class's value and
//!   `spec.preemptionPolicy` = the class's policy; a class that does not exist is 403
//!   Forbidden (`pods "web-0" is forbidden: no PriorityClass with name x was found`). Without a
//!   class name the pod gets the `globalDefault` class (the lowest value when several are) and
//!   its name, or priority 0 and `PreemptLowerPriority`. A `spec.priority` or
//!   `spec.preemptionPolicy` the pod sets itself must equal the computed one (403 otherwise).
//! - An update keeps the stored priority and policy when the new object omits them.
//! - A PriorityClass marked `globalDefault` while another one is: 403
//!   (`PriorityClass x is already marked as default. Only one default can exist`).
//!
//! Subresources are not looked at.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta::meta_str;
use crate::registry::ResourceInfo;
use crate::state::App;
use crate::status::ApiError;

/// The preemption policy of a class that sets none, and of pods without a class when no class
/// is the global default.
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

fn is_pod(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group.is_empty() && r.kind == "Pod"
}

fn is_priority_class(r: &ResourceInfo) -> bool {
    r.is_builtin() && r.group == "scheduling.k8s.io" && r.kind == "PriorityClass"
}

/// The stored PriorityClasses.
fn classes(app: &App) -> Vec<Arc<Value>> {
    let st = app.store.lock();
    match st
        .registry
        .get("scheduling.k8s.io", "v1", "priorityclasses")
    {
        Some(r) => st.objects_of(&r.key(), None),
        None => Vec::new(),
    }
}

/// The global default class: among those marked `globalDefault`, the one with the lowest value
/// (several can exist after a race; the API server picks the lowest).
fn global_default(classes: &[Arc<Value>]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| c["globalDefault"] == json!(true))
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0))
        .map(|c| c.as_ref())
}

fn policy_of(class: &Value) -> String {
    class["preemptionPolicy"]
        .as_str()
        .unwrap_or(PREEMPT_LOWER_PRIORITY)
        .to_string()
}

/// The mutating half, for `object` about to be created (`old` None) or to replace `old`.
/// `name` is the name the request gave (its `generateName` when it gave none), as the API
/// server's admission errors name the object.
pub fn admit(
    app: &App,
    r: &ResourceInfo,
    subresource: Option<&str>,
    name: &str,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !is_pod(r) || subresource.is_some() || !object.is_object() {
        return Ok(());
    }
    admit_pod(&classes(app), r, name, object, old)
}

/// [`admit`] for a pod, given the stored PriorityClasses.
fn admit_pod(
    classes: &[Arc<Value>],
    r: &ResourceInfo,
    name: &str,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !object["spec"].is_object() {
        object["spec"] = json!({});
    }
    if let Some(old) = old {
        // Validation forbids changing them; an update that omits them keeps them.
        for field in ["priority", "preemptionPolicy"] {
            if object["spec"][field].is_null() && !old["spec"][field].is_null() {
                object["spec"][field] = old["spec"][field].clone();
            }
        }
        return Ok(());
    }
    let forbidden = |why: String| ApiError::forbidden(r, name, &why);
    let class_name = object["spec"]["priorityClassName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (priority, policy) = if class_name.is_empty() {
        match global_default(classes) {
            Some(class) => {
                object["spec"]["priorityClassName"] = class["metadata"]["name"].clone();
                (class["value"].as_i64().unwrap_or(0), policy_of(class))
            }
            None => {
                if let Some(spec) = object["spec"].as_object_mut() {
                    spec.remove("priorityClassName");
                }
                (0, PREEMPT_LOWER_PRIORITY.to_string())
            }
        }
    } else {
        let class = classes
            .iter()
            .find(|c| meta_str(c, "name") == Some(class_name.as_str()))
            .ok_or_else(|| {
                forbidden(format!("no PriorityClass with name {class_name} was found"))
            })?;
        (class["value"].as_i64().unwrap_or(0), policy_of(class))
    };
    if let Some(given) = object["spec"]["priority"].as_i64()
        && given != priority
    {
        return Err(forbidden(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
        )));
    }
    object["spec"]["priority"] = json!(priority);
    if let Some(given) = object["spec"]["preemptionPolicy"].as_str()
        && given != policy
    {
        return Err(forbidden(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    object["spec"]["preemptionPolicy"] = json!(policy);
    Ok(())
}

/// The validating half: a second `globalDefault` PriorityClass is refused.
pub fn validate(
    app: &App,
    r: &ResourceInfo,
    subresource: Option<&str>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !is_priority_class(r) || subresource.is_some() || object["globalDefault"] != json!(true) {
        return Ok(());
    }
    validate_class(&classes(app), r, object, old)
}

/// [`validate`] for a PriorityClass marked `globalDefault`, given the stored ones.
fn validate_class(
    classes: &[Arc<Value>],
    r: &ResourceInfo,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = meta_str(object, "name").unwrap_or_default();
    let Some(default) = global_default(classes) else {
        return Ok(());
    };
    let default_name = meta_str(default, "name").unwrap_or_default();
    if old.is_none() || default_name != name {
        return Err(ApiError::forbidden(
            r,
            name,
            &format!(
                "PriorityClass {default_name} is already marked as default. Only one default can exist"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, policy: Option<&str>) -> Arc<Value> {
        let mut c = json!({"metadata": {"name": name}, "value": value, "globalDefault": default});
        if let Some(p) = policy {
            c["preemptionPolicy"] = json!(p);
        }
        Arc::new(c)
    }

    fn resource(group: &str, plural: &str) -> Arc<ResourceInfo> {
        crate::registry::Registry::builtin()
            .get(group, "v1", plural)
            .unwrap()
    }

    #[test]
    fn the_global_default_is_the_lowest_marked_class() {
        let cases: Vec<(Vec<Arc<Value>>, Option<&str>)> = vec![
            (vec![], None),
            (vec![class("a", 10, false, None)], None),
            (
                vec![class("a", 10, false, None), class("b", 20, true, None)],
                Some("b"),
            ),
            (
                vec![class("a", 30, true, None), class("b", 20, true, None)],
                Some("b"),
            ),
        ];
        for (classes, want) in cases {
            assert_eq!(
                global_default(&classes).and_then(|c| meta_str(c, "name")),
                want,
                "{classes:?}"
            );
        }
    }

    #[test]
    fn a_new_pod_gets_the_priority_of_its_class_or_is_refused() {
        let pods = resource("", "pods");
        let low = class("low", 100, false, None);
        let never = class("never", 50, false, Some("Never"));
        let default = class("fallback", 7, true, Some("Never"));
        // (classes, the pod's spec, Ok((priority, preemptionPolicy, priorityClassName)) or the
        // Forbidden message)
        type Want = Result<(i64, &'static str, Option<&'static str>), &'static str>;
        let cases: Vec<(Vec<Arc<Value>>, Value, Want)> = vec![
            (vec![], json!({}), Ok((0, "PreemptLowerPriority", None))),
            (
                vec![low.clone()],
                json!({"priorityClassName": "low"}),
                Ok((100, "PreemptLowerPriority", Some("low"))),
            ),
            (
                vec![never.clone()],
                json!({"priorityClassName": "never"}),
                Ok((50, "Never", Some("never"))),
            ),
            (
                vec![low.clone(), default.clone()],
                json!({}),
                Ok((7, "Never", Some("fallback"))),
            ),
            (
                vec![low.clone(), default.clone()],
                json!({"priorityClassName": "low"}),
                Ok((100, "PreemptLowerPriority", Some("low"))),
            ),
            (
                vec![low.clone()],
                json!({"priorityClassName": "low", "priority": 100}),
                Ok((100, "PreemptLowerPriority", Some("low"))),
            ),
            (
                vec![low.clone()],
                json!({"priorityClassName": "medium"}),
                Err(r#"pods "web-0" is forbidden: no PriorityClass with name medium was found"#),
            ),
            (
                vec![low.clone()],
                json!({"priorityClassName": "low", "priority": 5}),
                Err(
                    r#"pods "web-0" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 100 from the given PriorityClass name"#,
                ),
            ),
            (
                vec![],
                json!({"priority": 5}),
                Err(
                    r#"pods "web-0" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"#,
                ),
            ),
            (
                vec![never],
                json!({"priorityClassName": "never", "preemptionPolicy": "PreemptLowerPriority"}),
                Err(
                    r#"pods "web-0" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name"#,
                ),
            ),
        ];
        for (classes, spec, want) in cases {
            let mut pod = json!({"metadata": {"name": "web-0"}, "spec": spec.clone()});
            let got = admit_pod(&classes, &pods, "web-0", &mut pod, None).map(|()| {
                (
                    pod["spec"]["priority"].as_i64().unwrap(),
                    pod["spec"]["preemptionPolicy"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    pod["spec"]["priorityClassName"]
                        .as_str()
                        .map(str::to_string),
                )
            });
            match (got, want) {
                (Ok(got), Ok((p, policy, class))) => assert_eq!(
                    got,
                    (p, policy.to_string(), class.map(str::to_string)),
                    "{spec}"
                ),
                (Err(e), Err(message)) => {
                    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{spec}");
                    assert_eq!(e.message, message, "{spec}");
                    let details = e.details.unwrap();
                    assert_eq!(details["name"], "web-0");
                    assert_eq!(details["kind"], "pods");
                }
                (got, want) => panic!("{spec}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn an_update_keeps_the_priority_it_omits() {
        let pods = resource("", "pods");
        let old = json!({"spec": {"priorityClassName": "low", "priority": 100, "preemptionPolicy": "Never"}});
        let mut new = json!({"spec": {"priorityClassName": "low"}});
        admit_pod(&[], &pods, "web-0", &mut new, Some(&old)).unwrap();
        assert_eq!(new, old);
        let mut changed = json!({"spec": {"priorityClassName": "low", "priority": 3}});
        admit_pod(&[], &pods, "web-0", &mut changed, Some(&old)).unwrap();
        assert_eq!(changed["spec"]["priority"], 3, "validation's business");
    }

    #[test]
    fn only_one_class_is_the_global_default() {
        let r = resource("scheduling.k8s.io", "priorityclasses");
        let stored = vec![
            class("low", 100, false, None),
            class("fallback", 7, true, None),
        ];
        let new_default = json!({"metadata": {"name": "other"}, "value": 1, "globalDefault": true});
        let e = validate_class(&stored, &r, &new_default, None).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            e.message,
            r#"priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass fallback is already marked as default. Only one default can exist"#
        );
        let low_default = json!({"metadata": {"name": "low"}, "value": 100, "globalDefault": true});
        assert!(validate_class(&stored, &r, &low_default, Some(&stored[0])).is_err());
        let same = json!({"metadata": {"name": "fallback"}, "value": 8, "globalDefault": true});
        assert!(validate_class(&stored, &r, &same, Some(&stored[1])).is_ok());
        assert!(validate_class(&stored[..1], &r, &new_default, None).is_ok());
    }
}
