//! The real API server's audit log as an instrument the operator does not control: the control
//! plane of [`crate::control_plane`] writes one JSON line per write request (the policy
//! `scripts/control-plane.sh` writes: `Metadata` for every verb but `get`, `list` and `watch`, at
//! the `ResponseComplete` stage only), and the tests and benchmarks count the operator's writes
//! from it rather than from its own metrics.
//!
//! The log backend runs in the API server's default `blocking` mode: a request's event is written
//! before the request handler returns, so a write whose effect a client has seen is in the log
//! by the time the client reads it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One write request as the API server recorded it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Write {
    /// `user.username`: `system:serviceaccount:sites:sites-operator`, `admin`, ...
    pub user: String,
    /// `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// As the operator's `sites_api_requests_total` names it:
    /// `<plural>[.<group>][/<subresource>]` (`statefulsets.apps`, `sites.sites.ecmwf.int/status`).
    pub resource: String,
    /// `namespace/name`, `name` for a cluster-scoped object, empty for a collection.
    pub object: String,
    /// The response's status code (0 where the event has none).
    pub code: u16,
    /// Whether the request was a dry run (`dryRun=All` in the request URI): nothing was stored.
    pub dry_run: bool,
    /// The client's `User-Agent` (`sites-operator/0.1.0 (run)`, `kubectl/v1.32.4 ...`).
    pub user_agent: String,
}

impl Write {
    /// Whether the write was stored: a 2xx answer and not a dry run.
    pub fn stored(&self) -> bool {
        (200..300).contains(&self.code) && !self.dry_run
    }

    /// `verb resource`, the key of the operator's own request counter.
    pub fn kind(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} -> {}{}",
            self.user,
            self.verb,
            self.resource,
            self.object,
            self.code,
            if self.dry_run { " (dry run)" } else { "" }
        )
    }
}

/// The writes of an audit log's text (JSON lines). Events at another stage than
/// `ResponseComplete` or `Panic`, read verbs and lines that are not events are skipped; a line
/// cut short (the log being written) ends the text.
pub fn parse(text: &str) -> Vec<Write> {
    text.lines()
        .map_while(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|event| write_of(&event))
        .collect()
}

fn write_of(event: &Value) -> Option<Write> {
    let stage = event["stage"].as_str()?;
    if stage != "ResponseComplete" && stage != "Panic" {
        return None;
    }
    let verb = event["verb"].as_str()?;
    if matches!(verb, "get" | "list" | "watch") {
        return None;
    }
    let object = &event["objectRef"];
    let plural = object["resource"].as_str()?;
    let mut resource = match object["apiGroup"].as_str() {
        Some(group) if !group.is_empty() => format!("{plural}.{group}"),
        _ => plural.to_string(),
    };
    if let Some(sub) = object["subresource"].as_str().filter(|s| !s.is_empty()) {
        resource.push('/');
        resource.push_str(sub);
    }
    let name = object["name"].as_str().unwrap_or_default();
    let object = match object["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && !name.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    };
    let uri = event["requestURI"].as_str().unwrap_or_default();
    let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
    Some(Write {
        user: event["user"]["username"].as_str()?.to_string(),
        verb: verb.to_string(),
        resource,
        object,
        code: event["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
        dry_run: query.split('&').any(|kv| kv.starts_with("dryRun=")),
        user_agent: event["userAgent"].as_str().unwrap_or_default().to_string(),
    })
}

/// How many times each key occurs, by key.
pub fn count<K: Ord>(keys: impl IntoIterator<Item = K>) -> BTreeMap<K, usize> {
    let mut counts = BTreeMap::new();
    for key in keys {
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// A control plane's audit log file.
#[derive(Clone, Debug)]
pub struct AuditLog {
    path: PathBuf,
}

/// A position in the log: what was written before it is not counted after it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mark(u64);

impl AuditLog {
    pub fn new(path: &Path) -> AuditLog {
        AuditLog {
            path: path.to_path_buf(),
        }
    }

    /// The end of the log now.
    pub fn mark(&self) -> Mark {
        Mark(std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0))
    }

    /// Every write recorded since `mark`.
    pub fn since(&self, mark: Mark) -> Vec<Write> {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let start = usize::try_from(mark.0)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        parse(&String::from_utf8_lossy(&bytes[start..]))
    }

    /// The stored writes since `mark` of clients whose User-Agent starts with `agent`.
    pub fn stored_by_agent(&self, agent: &str, mark: Mark) -> Vec<Write> {
        self.since(mark)
            .into_iter()
            .filter(|w| w.user_agent.starts_with(agent) && w.stored())
            .collect()
    }

    /// The stored writes of `user` since `mark`.
    pub fn stored_by(&self, user: &str, mark: Mark) -> Vec<Write> {
        self.since(mark)
            .into_iter()
            .filter(|w| w.user == user && w.stored())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(event: Value) -> String {
        event.to_string()
    }

    fn event(stage: &str, verb: &str, object: Value, code: u16, uri: &str) -> String {
        line(json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": "x", "stage": stage, "requestURI": uri, "verb": verb,
            "user": {"username": "system:serviceaccount:sites:sites-operator", "groups": []},
            "userAgent": "sites-operator/0.1.0 (run)",
            "objectRef": object, "responseStatus": {"metadata": {}, "code": code},
        }))
    }

    #[test]
    fn events_become_writes_named_as_the_operator_counts_them() {
        let sts = json!({"resource": "statefulsets", "namespace": "sites", "name": "a",
                         "apiGroup": "apps", "apiVersion": "v1"});
        let status = json!({"resource": "sites", "namespace": "sites", "name": "a",
                            "apiGroup": "sites.ecmwf.int", "apiVersion": "v1",
                            "subresource": "status"});
        let pod = json!({"resource": "pods", "namespace": "sites", "apiVersion": "v1"});
        let pc = json!({"resource": "priorityclasses", "name": "high",
                        "apiGroup": "scheduling.k8s.io"});
        // (the event, what it records: verb, resource, object, code, stored)
        type Recorded<'a> = Option<(&'a str, &'a str, &'a str, u16, bool)>;
        let cases: Vec<(String, Recorded)> = vec![
            (
                event(
                    "ResponseComplete",
                    "patch",
                    sts.clone(),
                    200,
                    "/apis/apps/v1/x",
                ),
                Some(("patch", "statefulsets.apps", "sites/a", 200, true)),
            ),
            (
                event("ResponseComplete", "patch", status, 409, "/x"),
                Some((
                    "patch",
                    "sites.sites.ecmwf.int/status",
                    "sites/a",
                    409,
                    false,
                )),
            ),
            (
                event(
                    "ResponseComplete",
                    "create",
                    pod,
                    201,
                    "/api/v1/x?dryRun=All",
                ),
                Some(("create", "pods", "", 201, false)),
            ),
            (
                event("ResponseComplete", "delete", pc, 200, "/x"),
                Some((
                    "delete",
                    "priorityclasses.scheduling.k8s.io",
                    "high",
                    200,
                    true,
                )),
            ),
            (
                event("RequestReceived", "patch", sts.clone(), 0, "/x"),
                None,
            ),
            (
                event("ResponseComplete", "get", sts.clone(), 200, "/x"),
                None,
            ),
            (event("ResponseComplete", "watch", sts, 200, "/x"), None),
        ];
        for (text, want) in cases {
            let got = parse(&text);
            match want {
                None => assert!(got.is_empty(), "{text}: {got:?}"),
                Some((verb, resource, object, code, stored)) => {
                    assert_eq!(got.len(), 1, "{text}");
                    let w = &got[0];
                    assert_eq!(
                        (
                            w.verb.as_str(),
                            w.resource.as_str(),
                            w.object.as_str(),
                            w.code
                        ),
                        (verb, resource, object, code),
                        "{text}"
                    );
                    assert_eq!(w.stored(), stored, "{text}");
                    assert_eq!(w.user, "system:serviceaccount:sites:sites-operator");
                    assert_eq!(w.user_agent, "sites-operator/0.1.0 (run)");
                }
            }
        }
    }

    #[test]
    fn a_line_cut_short_ends_the_text() {
        let whole = event(
            "ResponseComplete",
            "create",
            json!({"resource": "secrets", "namespace": "n", "name": "s"}),
            201,
            "/x",
        );
        let text = format!("{whole}\n{}", &whole[..whole.len() / 2]);
        assert_eq!(parse(&text).len(), 1);
    }

    #[test]
    fn counts_by_key() {
        let counts = count(["a", "b", "a"]);
        assert_eq!(counts.get("a"), Some(&2));
        assert_eq!(counts.get("b"), Some(&1));
    }

    #[test]
    fn a_mark_counts_only_what_follows() {
        let dir = std::env::temp_dir().join(format!("audit-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let log = AuditLog::new(&path);
        let w = |name: &str| {
            event(
                "ResponseComplete",
                "patch",
                json!({"resource": "services", "namespace": "n", "name": name}),
                200,
                "/x",
            ) + "\n"
        };
        assert!(log.since(log.mark()).is_empty(), "no file yet");
        std::fs::write(&path, w("before")).unwrap();
        let mark = log.mark();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&w("after"));
        std::fs::write(&path, text).unwrap();
        let after = log.stored_by("system:serviceaccount:sites:sites-operator", mark);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].object, "n/after");
        assert!(log.stored_by("admin", mark).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
