//! `meta.k8s.io/v1` Table responses, as `kubectl get` asks for them: an implicit Name column,
//! then a custom resource's `additionalPrinterColumns` (or a built-in printer), one row per object.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::jsonpath::{self, JsonPath};
use crate::registry::ResourceInfo;

struct Column {
    name: String,
    kind: String,
    format: String,
    description: String,
    priority: i64,
    cell: Box<dyn Fn(&Value) -> Value>,
}

fn col(
    name: &str,
    kind: &str,
    description: &str,
    cell: impl Fn(&Value) -> Value + 'static,
) -> Column {
    Column {
        name: name.into(),
        kind: kind.into(),
        format: String::new(),
        description: description.into(),
        priority: 0,
        cell: Box::new(cell),
    }
}

fn age() -> Column {
    col(
        "Age",
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        age_of,
    )
}

/// Ages are rendered by the server for built-ins ("5m"), kubectl renders `date` cells itself.
fn age_of(o: &Value) -> Value {
    let Some(ts) = o["metadata"]["creationTimestamp"].as_str() else {
        return json!("<unknown>");
    };
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return json!("<unknown>");
    };
    let secs = jiff::Timestamp::now().as_second() - t.as_second();
    json!(human_duration(secs.max(0)))
}

fn human_duration(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn columns(r: &ResourceInfo) -> Vec<Column> {
    let name = col(
        "Name",
        "string",
        "Name must be unique within a namespace.",
        |o| o["metadata"]["name"].clone(),
    );
    let mut cols = vec![Column {
        format: "name".into(),
        ..name
    }];
    if let Some(custom) = &r.custom {
        if custom.printer_columns.is_empty() {
            cols.push(col("Age", "date", "", |o| {
                jsonpath::printer_cell(&[&o["metadata"]["creationTimestamp"]], "date")
            }));
        }
        for c in &custom.printer_columns {
            let path = c["jsonPath"].as_str().unwrap_or_default().to_string();
            let kind = c["type"].as_str().unwrap_or("string").to_string();
            let parsed = JsonPath::parse(&path).ok();
            let cell_kind = kind.clone();
            cols.push(Column {
                name: c["name"].as_str().unwrap_or_default().into(),
                kind: kind.clone(),
                format: c["format"].as_str().unwrap_or_default().into(),
                description: c["description"].as_str().unwrap_or_default().into(),
                priority: c["priority"].as_i64().unwrap_or(0),
                cell: Box::new(move |o| match &parsed {
                    Some(p) => jsonpath::printer_cell(&p.eval(o), &cell_kind),
                    None => Value::Null,
                }),
            });
        }
        return cols;
    }
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Event") => return event_columns(),
        ("", "Pod") => {
            cols.push(col(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
                |o| {
                    let statuses = o["status"]["containerStatuses"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                    let ready = statuses
                        .iter()
                        .filter(|c| c["ready"] == json!(true))
                        .count();
                    json!(format!("{ready}/{total}"))
                },
            ));
            cols.push(col(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
                |o| {
                    if o["metadata"]["deletionTimestamp"].is_string() {
                        return json!("Terminating");
                    }
                    let waiting = o["status"]["containerStatuses"].as_array().and_then(|cs| {
                        cs.iter().find_map(|c| {
                            c["state"]["waiting"]["reason"].as_str().map(str::to_string)
                        })
                    });
                    json!(waiting.unwrap_or_else(|| {
                        o["status"]["phase"]
                            .as_str()
                            .unwrap_or("Pending")
                            .to_string()
                    }))
                },
            ));
            cols.push(col(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted.",
                |o| {
                    let n: i64 = o["status"]["containerStatuses"]
                        .as_array()
                        .map(|cs| cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum())
                        .unwrap_or(0);
                    json!(n.to_string())
                },
            ));
            cols.push(age());
        }
        ("", "ConfigMap") => {
            cols.push(col("Data", "string", "Number of data entries.", |o| {
                let n = o["data"].as_object().map_or(0, |m| m.len())
                    + o["binaryData"].as_object().map_or(0, |m| m.len());
                json!(n.to_string())
            }));
            cols.push(age());
        }
        ("", "Secret") => {
            cols.push(col("Type", "string", "The type of the secret.", |o| {
                o["type"].clone()
            }));
            cols.push(col("Data", "string", "Number of data entries.", |o| {
                json!(o["data"].as_object().map_or(0, |m| m.len()).to_string())
            }));
            cols.push(age());
        }
        ("", "Namespace") => {
            cols.push(col(
                "Status",
                "string",
                "The status of the namespace.",
                |o| o["status"]["phase"].clone(),
            ));
            cols.push(age());
        }
        ("", "Service") => {
            cols.push(col("Type", "string", "The type of the service.", |o| {
                o["spec"]["type"].clone()
            }));
            cols.push(col(
                "Cluster-IP",
                "string",
                "The cluster IP of the service.",
                |o| o["spec"]["clusterIP"].clone(),
            ));
            cols.push(col(
                "External-IP",
                "string",
                "The external IP of the service.",
                |_| json!("<none>"),
            ));
            cols.push(col("Port(s)", "string", "The ports of the service.", |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .map(|ps| {
                        ps.iter()
                            .map(|p| {
                                format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!(if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                })
            }));
            cols.push(age());
        }
        ("apps", "StatefulSet") => {
            cols.push(col(
                "Ready",
                "string",
                "Number of the pod with ready state.",
                |o| {
                    json!(format!(
                        "{}/{}",
                        o["status"]["readyReplicas"].as_i64().unwrap_or(0),
                        o["spec"]["replicas"].as_i64().unwrap_or(0)
                    ))
                },
            ));
            cols.push(age());
        }
        ("", "PersistentVolumeClaim") => {
            cols.push(col("Status", "string", "The phase of the claim.", |o| {
                o["status"]["phase"].clone()
            }));
            cols.push(col("Volume", "string", "The bound volume.", |o| {
                o["spec"]["volumeName"].clone()
            }));
            cols.push(col("Capacity", "string", "The capacity.", |o| {
                o["status"]["capacity"]["storage"].clone()
            }));
            cols.push(age());
        }
        ("networking.k8s.io", "Ingress") => {
            cols.push(col("Class", "string", "The ingress class.", |o| {
                json!(o["spec"]["ingressClassName"].as_str().unwrap_or("<none>"))
            }));
            cols.push(col("Hosts", "string", "The hosts.", |o| {
                let hosts: Vec<String> = o["spec"]["rules"]
                    .as_array()
                    .map(|rs| {
                        rs.iter()
                            .filter_map(|r| r["host"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                json!(if hosts.is_empty() {
                    "*".to_string()
                } else {
                    hosts.join(",")
                })
            }));
            cols.push(age());
        }
        ("batch", "Job") => {
            cols.push(col("Status", "string", "Status of the job.", |o| {
                json!(job_status(o))
            }));
            cols.push(col(
                "Completions",
                "string",
                "The number of pods which reached phase Succeeded.",
                |o| {
                    let succeeded = o["status"]["succeeded"].as_i64().unwrap_or(0);
                    json!(match o["spec"]["completions"].as_i64() {
                        Some(c) => format!("{succeeded}/{c}"),
                        None => match o["spec"]["parallelism"].as_i64().unwrap_or(0) {
                            p if p > 1 => format!("{succeeded}/1 of {p}"),
                            _ => format!("{succeeded}/1"),
                        },
                    })
                },
            ));
            cols.push(col(
                "Duration",
                "string",
                "Time required to complete the job.",
                |o| {
                    let start = &o["status"]["startTime"];
                    let parse =
                        |v: &Value| v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
                    json!(
                        match (parse(start), parse(&o["status"]["completionTime"])) {
                            (None, _) => String::new(),
                            (Some(_), None) => since(start),
                            (Some(a), Some(b)) =>
                                human_duration((b.as_second() - a.as_second()).max(0)),
                        }
                    )
                },
            ));
            cols.push(age());
            template_columns(
                &mut cols,
                &["spec", "template", "spec"],
                &["spec", "selector"],
            );
        }
        ("batch", "CronJob") => {
            cols.push(col(
                "Schedule",
                "string",
                "The schedule in Cron format.",
                |o| o["spec"]["schedule"].clone(),
            ));
            cols.push(col(
                "Timezone",
                "string",
                "The time zone name for the given schedule.",
                |o| json!(o["spec"]["timeZone"].as_str().unwrap_or("<none>")),
            ));
            cols.push(col(
                "Suspend",
                "boolean",
                "This flag tells the controller to suspend subsequent executions.",
                |o| {
                    // printBoolPtr: the value, or "<unset>".
                    match o["spec"]["suspend"].as_bool() {
                        Some(b) => json!(if b { "True" } else { "False" }),
                        None => json!("<unset>"),
                    }
                },
            ));
            cols.push(col(
                "Active",
                "integer",
                "A list of pointers to currently running jobs.",
                |o| json!(o["status"]["active"].as_array().map_or(0, Vec::len)),
            ));
            cols.push(col(
                "Last Schedule",
                "string",
                "Information when was the last time the job was successfully scheduled.",
                |o| {
                    let t = &o["status"]["lastScheduleTime"];
                    json!(if t.is_string() {
                        since(t)
                    } else {
                        "<none>".into()
                    })
                },
            ));
            cols.push(age());
            template_columns(
                &mut cols,
                &["spec", "jobTemplate", "spec", "template", "spec"],
                &["spec", "jobTemplate", "spec", "selector"],
            );
        }
        ("", "ResourceQuota") => {
            cols.push(age());
            cols.push(col(
                "Request",
                "string",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
                |o| json!(quota_cells(o).0),
            ));
            cols.push(col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.", |o| {
                json!(quota_cells(o).1)
            }));
        }
        // `printComponentStatus`: Healthy / Unhealthy from the Healthy condition; no Age.
        ("", "ComponentStatus") => {
            let condition = |o: &Value| {
                o["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Healthy"))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            cols.push(col(
                "Status",
                "string",
                "Status of the component conditions",
                move |o| {
                    json!(if condition(o)["status"] == "True" {
                        "Healthy"
                    } else {
                        "Unhealthy"
                    })
                },
            ));
            cols.push(col(
                "Message",
                "string",
                "Message of the component conditions",
                move |o| json!(condition(o)["message"].as_str().unwrap_or("")),
            ));
            cols.push(col(
                "Error",
                "string",
                "Error of the component conditions",
                move |o| json!(condition(o)["error"].as_str().unwrap_or("")),
            ));
        }
        ("apiregistration.k8s.io", "APIService") => {
            cols.push(col(
                "Service",
                "string",
                "The reference to the service that hosts this API endpoint.",
                |o| {
                    let svc = &o["spec"]["service"];
                    json!(if svc.is_object() {
                        format!(
                            "{}/{}",
                            svc["namespace"].as_str().unwrap_or(""),
                            svc["name"].as_str().unwrap_or("")
                        )
                    } else {
                        "Local".into()
                    })
                },
            ));
            cols.push(col(
                "Available",
                "string",
                "Whether this service is available.",
                |o| {
                    let cond = o["status"]["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"));
                    json!(match cond {
                        None => "Unknown".to_string(),
                        Some(c) => {
                            let status = c["status"].as_str().unwrap_or("Unknown");
                            match c["reason"].as_str().filter(|r| !r.is_empty()) {
                                Some(r) if status != "True" => format!("{status} ({r})"),
                                _ => status.to_string(),
                            }
                        }
                    })
                },
            ));
            cols.push(age());
        }
        _ => cols.push(age()),
    }
    cols
}

/// The Job printer's status: Complete, Failed, Terminating, Suspended, FailureTarget or Running.
fn job_status(o: &Value) -> &'static str {
    let has = |t: &str| {
        o["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if o["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// The wide Containers, Images and Selector columns of a workload with a pod template.
fn template_columns(
    cols: &mut Vec<Column>,
    pod_spec: &'static [&'static str],
    selector: &'static [&'static str],
) {
    let at = |o: &Value, path: &[&str]| -> Value {
        let mut v = o;
        for p in path {
            v = &v[*p];
        }
        v.clone()
    };
    cols.push(Column {
        priority: 1,
        ..col(
            "Containers",
            "string",
            "Names of each container in the template.",
            move |o| json!(crate::batch::container_cells(&at(o, pod_spec)).0),
        )
    });
    cols.push(Column {
        priority: 1,
        ..col(
            "Images",
            "string",
            "Images referenced by each container in the template.",
            move |o| json!(crate::batch::container_cells(&at(o, pod_spec)).1),
        )
    });
    cols.push(Column {
        priority: 1,
        ..col(
            "Selector",
            "string",
            "A label query over pods that should match the pod count.",
            move |o| json!(crate::batch::format_selector(&at(o, selector))),
        )
    });
}

/// The ResourceQuota printer's Request and Limit cells: `resource: used/hard` over the
/// status's hard resources in name order, `limits.*` in Limit.
fn quota_cells(o: &Value) -> (String, String) {
    let mut request = Vec::new();
    let mut limit = Vec::new();
    if let Some(hard) = o["status"]["hard"].as_object() {
        let mut names: Vec<&String> = hard.keys().collect();
        names.sort();
        for name in names {
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                Value::Null => "0".into(),
                other => other.to_string(),
            };
            let cell = format!(
                "{name}: {}/{}",
                text(&o["status"]["used"][name.as_str()]),
                text(&hard[name.as_str()])
            );
            if name.split('.').next() == Some("limits") && name.contains('.') {
                limit.push(cell);
            } else {
                request.push(cell);
            }
        }
    }
    (request.join(", "), limit.join(", "))
}

/// A timestamp as the age kubectl shows (`<unknown>` when unset).
fn since(ts: &Value) -> String {
    match ts.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(t) => human_duration((jiff::Timestamp::now().as_second() - t.as_second()).max(0)),
        None => "<unknown>".into(),
    }
}

/// The API server's Event columns (no leading Name column; the wide ones have priority 1).
fn event_columns() -> Vec<Column> {
    const COLUMNS: [(&str, &str, i64, &str); 10] = [
        (
            "Last Seen",
            "",
            0,
            "Time when this Event was last observed.",
        ),
        (
            "Type",
            "",
            0,
            "Type of this event (Normal, Warning), new types could be added in the future",
        ),
        (
            "Reason",
            "",
            0,
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
        ),
        ("Object", "", 0, "The object that this event is about."),
        (
            "Subobject",
            "",
            1,
            "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
        ),
        (
            "Source",
            "",
            1,
            "The component reporting this event. Should be a short machine understandable string.",
        ),
        (
            "Message",
            "",
            0,
            "A human-readable description of the status of this operation.",
        ),
        (
            "First Seen",
            "",
            1,
            "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
        ),
        (
            "Count",
            "",
            1,
            "The number of times this event has occurred.",
        ),
        ("Name", "name", 1, "Name must be unique within a namespace."),
    ];
    COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (name, format, priority, description))| Column {
            name: (*name).into(),
            kind: "string".into(),
            format: (*format).into(),
            description: (*description).into(),
            priority: *priority,
            cell: Box::new(move |o| crate::events::printer_cells(o, &since).swap_remove(i)),
        })
        .collect()
}

/// Converts objects to a Table. `include_object` is `None`, `Metadata` (default) or `Object`.
pub fn to_table(r: &ResourceInfo, items: &[Arc<Value>], rv: u64, include_object: &str) -> Value {
    let cols = columns(r);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| (c.cell)(o)).collect();
            let mut row = json!({"cells": cells});
            match include_object {
                "None" => {}
                "Object" => row["object"] = (**o).clone(),
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"],
                    })
                }
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_render_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(5 * 3600), "5h");
        assert_eq!(human_duration(3 * 86400), "3d");
    }
}
