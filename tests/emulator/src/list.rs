//! Reading collections: list (pages and their continue tokens) and watch (initial events, the
//! live stream, bookmarks, selector-filtered events). Both select with
//! [`crate::selectable::Selection`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::negotiate;
use crate::request::{Query, Target, error_response, raw_json_response};
use crate::selectable::Selection;
use crate::state::App;
use crate::status::ApiError;
use crate::store::{EventType, ObjKey, Stored, WatchEvent};

/// Lists a collection (GET without a name), a page at a time when `limit` is set.
pub fn list(app: &Arc<App>, t: &Target, query: &Query) -> Result<Response, ApiError> {
    let selection = Selection::of(t, query)?;
    let limit = match query.get("limit").map(|l| l.parse::<i64>()) {
        None => None,
        Some(Ok(l)) if l > 0 => Some(l as usize),
        Some(Ok(_)) => None,
        Some(Err(_)) => return Err(ApiError::bad_request("limit must be an integer")),
    };
    let (after, snapshot_rv) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, key) = decode_continue(token)?;
            (Some(key), Some(rv))
        }
        None => (None, None),
    };
    let st = app.store.lock();
    let rv = snapshot_rv.unwrap_or_else(|| st.resource_version());
    let ns = (t.namespaced_url && t.r.namespaced).then_some(t.namespace.as_str());
    let keep = |o: &Stored| selection.matches_stored(o);
    let (items, last) = st.list_page(&t.r, ns, after.as_ref(), limit, &keep);
    drop(st);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(last) = last {
        metadata["continue"] = json!(encode_continue(rv, &last));
    }
    let kind = format!("{}List", t.r.kind);
    let body = list_body(
        &kind,
        &t.r.api_version(),
        &metadata,
        &items,
        t.r.is_builtin(),
    );
    Ok(raw_json_response(StatusCode::OK, body.into_bytes()))
}

/// A list as `wire::to_vec` writes it (kind, apiVersion, metadata, items), the items' stored
/// text spliced in: built-in items without their kind and apiVersion.
fn list_body(
    kind: &str,
    api_version: &str,
    metadata: &Value,
    items: &[Arc<Stored>],
    builtin: bool,
) -> String {
    let text = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    let mut body = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        text(&json!(kind)),
        text(&json!(api_version)),
        text(metadata),
    );
    body.reserve(items.iter().map(|o| o.json().len() + 1).sum());
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        if builtin {
            body.push_str(&o.item_json());
        } else {
            body.push_str(o.json());
        }
    }
    body.push_str("]}\n");
    body
}

/// The continue token of a page that ended at `key`, read at the resource version `rv`: the
/// next page lists from the same snapshot position. Not signed: a token that does not decode
/// ([`decode_continue`]) is refused.
fn encode_continue(rv: u64, key: &ObjKey) -> String {
    use base64::Engine;
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// The resource version and last key a continue token carries; anything else is the API
/// server's 400 for an invalid continue key.
fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

/// Starts a watch stream.
pub fn watch(
    app: &Arc<App>,
    t: &Target,
    query: &Query,
    presentation: negotiate::Presentation,
) -> Result<Response, ApiError> {
    if query.get("sendInitialEvents").is_some_and(|v| v == "true") {
        return Err(ApiError::not_implemented(
            "the emulator does not emulate streaming lists (sendInitialEvents); list, then watch from the list's resourceVersion",
        ));
    }
    let selection = Selection::of(t, query)?;
    let mut timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    if let Some(drop_after) = app.faults.watch_drop() {
        timeout = timeout.min(drop_after);
    }
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let start_rv = query
        .get("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
        .cloned();
    let ns = (t.namespaced_url && t.r.namespaced).then(|| t.namespace.clone());
    let key = t.r.key();
    let r = t.r.clone();

    // Initial events and the live subscription, taken under one lock so nothing falls between.
    let (initial, mut rx, mut last_rv) = {
        let st = app.store.lock();
        let rx = app.store.subscribe();
        let current = st.resource_version();
        let initial: Vec<(&'static str, Payload)> = match &start_rv {
            None => {
                let objs = st.stored_of(&key, ns.as_deref());
                objs.into_iter()
                    .filter(|(_, o)| selection.matches_stored(o))
                    .map(|(_, o)| ("ADDED", Payload::Stored(o)))
                    .collect()
            }
            Some(rv) => {
                let rv: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv}"))
                })?;
                let history = if app.faults.take_expiry(&key) {
                    Err(st.resource_version())
                } else {
                    st.events_since(&key, rv)
                };
                match history {
                    Ok(events) => events
                        .iter()
                        .filter(|e| ns.as_deref().is_none_or(|n| e.namespace == n))
                        .filter_map(|e| selected_event(e, &selection))
                        .collect(),
                    Err(oldest) => {
                        let status =
                            ApiError::gone(format!("too old resource version: {rv} ({oldest})"))
                                .to_status();
                        vec![("ERROR", Payload::Value(Arc::new(status)))]
                    }
                }
            }
        };
        (initial, rx, current)
    };
    let expired = initial.iter().any(|(kind, _)| *kind == "ERROR");
    let app = app.clone();
    let stream = async_stream(move |tx| async move {
        let faults = &app.faults;
        for e in initial {
            faults.watches_released(&key).await;
            if tx.send(e).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark_tick = tokio::time::interval(Duration::from_secs(1));
        bookmark_tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark_tick.tick(), if bookmarks && !faults.watches_held(&key) => {
                    let bm = ("BOOKMARK", Payload::Value(Arc::new(json!({
                        "kind": r.kind, "apiVersion": r.api_version(),
                        "metadata": {"resourceVersion": last_rv.to_string()}
                    }))));
                    if tx.send(bm).await.is_err() { return; }
                }
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        if ev.resource != key || ns.as_deref().is_some_and(|n| ev.namespace != n) {
                            continue;
                        }
                        if let Some(j) = selected_event(&ev, &selection) {
                            faults.watches_released(&key).await;
                            if tx.send(j).await.is_err() {
                                return;
                            }
                        }
                    }
                    // A watcher too slow for the event rate is closed; the client re-watches.
                    Err(_) => return,
                }
            }
        }
    });
    // Each event object as negotiated (`kubectl get -w` asks for Tables: a one-row Table per
    // event, the first one with the column definitions); a watch whose objects cannot be
    // transformed ends, as the API server's does.
    let mut first = true;
    let body = Body::from_stream(
        stream
            .map(move |(kind, object)| match object {
                // A stored object in its stored form: its text, as it is.
                Payload::Stored(o) if presentation.is_identity() => {
                    Some(stored_event_line(kind, &o))
                }
                Payload::Stored(o) => presentation
                    .watch_event(kind, Arc::new(o.value()), &mut first)
                    .map(|(kind, object)| crate::wire::event_to_vec(kind, &object)),
                Payload::Value(v) => presentation
                    .watch_event(kind, v, &mut first)
                    .map(|(kind, object)| crate::wire::event_to_vec(kind, &object)),
            })
            .take_while(|v| futures::future::ready(v.is_some()))
            .map(|v| {
                let mut line = v.unwrap_or_default();
                line.push(b'\n');
                Ok::<_, std::convert::Infallible>(Bytes::from(line))
            }),
    );
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(body)
        .unwrap_or_else(|_| error_response(&ApiError::internal("watch response"))))
}

/// What a watch sends: a stored object (written as stored) or a value (status, bookmark).
enum Payload {
    Stored(Arc<Stored>),
    Value(Arc<Value>),
}

/// A watch event line of a stored object, as [`crate::wire::event_to_vec`] writes it.
fn stored_event_line(kind: &str, o: &Stored) -> Vec<u8> {
    let mut line = Vec::with_capacity(o.json().len() + 32);
    line.extend_from_slice(b"{\"type\":");
    line.extend_from_slice(serde_json::to_string(kind).unwrap_or_default().as_bytes());
    line.extend_from_slice(b",\"object\":");
    line.extend_from_slice(o.json().as_bytes());
    line.push(b'}');
    line
}

/// A watch event for a selector-filtered watcher: objects moving into the selection are ADDED,
/// moving out are DELETED (as the API server's watch cache does).
fn selected_event(e: &WatchEvent, selection: &Selection) -> Option<(&'static str, Payload)> {
    let matches = |o: &Stored| selection.matches_stored(o);
    let now = matches(&e.object);
    let before = e.old.as_deref().is_some_and(matches);
    let kind = match e.kind {
        EventType::Added if now => "ADDED",
        EventType::Modified if now && before => "MODIFIED",
        EventType::Modified if now => "ADDED",
        EventType::Modified if before => "DELETED",
        EventType::Deleted if before || now => "DELETED",
        _ => return None,
    };
    Some((kind, Payload::Stored(e.object.clone())))
}

/// A stream fed by a spawned task through a channel.
fn async_stream<T, F, Fut>(f: F) -> impl futures::Stream<Item = T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(f(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    /// The list and watch answers splice stored text: what they write is what the wire writer
    /// writes for the same values.
    #[test]
    fn spliced_lists_and_events_are_the_wire_form() {
        let objects = [
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "namespace": "n"},
                   "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}),
            json!({"kind": "Site", "apiVersion": "sites.ecmwf.int/v1",
                   "metadata": {"name": "q\"uote"}, "spec": {"z": 1, "a": {"b": null}}}),
        ];
        let stored: Vec<Arc<Stored>> = objects.iter().map(|o| Arc::new(Stored::new(o))).collect();
        let metadata = json!({"resourceVersion": "7", "continue": "x"});
        for builtin in [true, false] {
            let items: Vec<Value> = objects
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    if builtin && let Some(m) = o.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    o
                })
                .collect();
            let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": metadata,
                              "items": items});
            assert_eq!(
                list_body("PodList", "v1", &metadata, &stored, builtin).into_bytes(),
                crate::wire::to_vec(&list)
            );
        }
        for (o, s) in objects.iter().zip(&stored) {
            for kind in ["ADDED", "MODIFIED", "DELETED"] {
                assert_eq!(
                    stored_event_line(kind, s),
                    crate::wire::event_to_vec(kind, o)
                );
            }
        }
    }

    fn token(raw: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    #[test]
    fn continue_tokens_round_trip() {
        for (rv, ns, name) in [
            (1, "", "a"),
            (42, "default", "web-0"),
            (u64::MAX, "kube-system", "coredns"),
            (7, "ns", "quote\"and\\slash é"),
        ] {
            let key: ObjKey = (ns.to_string(), name.to_string());
            let encoded = encode_continue(rv, &key);
            assert!(
                encoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "URL-safe without padding: {encoded}"
            );
            let (back_rv, back_key) = decode_continue(&encoded).expect("decodes");
            assert_eq!((back_rv, back_key), (rv, key));
        }
    }

    #[test]
    fn a_tampered_continue_token_is_refused() {
        let valid = encode_continue(5, &("ns".into(), "a".into()));
        let mut truncated = valid.clone();
        truncated.truncate(valid.len() - 3);
        // The JSON object's opening brace, changed to another character.
        assert!(valid.starts_with('e'), "{valid}");
        let flipped = format!("f{}", &valid[1..]);
        for (why, bad) in [
            ("not base64", "!!!".to_string()),
            ("padded base64", format!("{valid}==")),
            ("cut short", truncated),
            ("a character changed", flipped),
            ("not JSON", token("rv=5")),
            ("not an object", token("[5, \"ns\", \"a\"]")),
            ("no rv", token(r#"{"ns":"ns","name":"a"}"#)),
            ("rv a string", token(r#"{"rv":"5","ns":"ns","name":"a"}"#)),
            ("rv negative", token(r#"{"rv":-1,"ns":"ns","name":"a"}"#)),
            ("no namespace", token(r#"{"rv":5,"name":"a"}"#)),
            ("name a number", token(r#"{"rv":5,"ns":"ns","name":1}"#)),
        ] {
            let e = decode_continue(&bad).expect_err(why);
            assert_eq!(e.code, 400, "{why}");
            assert_eq!(
                e.message,
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
                "{why}"
            );
        }
    }
}
