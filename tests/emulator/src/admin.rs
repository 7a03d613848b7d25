//! Test hooks under `/__emulator/`: request counters, fault rules, watch-history compaction, and
//! the Service map of a running emulator process.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::App;

pub fn handle(
    app: &Arc<App>,
    method: &Method,
    segs: &[&str],
    _query: &std::collections::HashMap<String, String>,
    _body: &Bytes,
) -> Response {
    let reply = |v: serde_json::Value| {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response()
    };
    match (method.as_str(), segs) {
        ("GET", ["stats"]) => reply(app.stats.to_json()),
        ("POST", ["stats", "reset"]) => {
            app.stats.reset();
            reply(json!({"reset": true}))
        }
        ("POST", ["faults"]) => {
            match serde_json::from_slice::<Vec<crate::faults::FaultRule>>(_body) {
                Ok(rules) => {
                    let n = rules.len();
                    for r in rules {
                        app.faults.add(r);
                    }
                    reply(json!({"added": n}))
                }
                Err(e) => {
                    (StatusCode::BAD_REQUEST, format!("bad fault rules: {e}")).into_response()
                }
            }
        }
        ("DELETE", ["faults"]) => {
            app.faults.clear();
            reply(json!({"cleared": true}))
        }
        // `POST /__emulator/services/NS/NAME/PORT` with the address as the body: what
        // `--service` does at start, for a webhook server whose port is known only once it
        // listens (started after the emulator, on port 0).
        ("POST", ["services", ns, name, port]) => {
            let addr = std::str::from_utf8(_body)
                .ok()
                .and_then(|s| s.trim().parse::<std::net::SocketAddr>().ok());
            match (port.parse::<u16>(), addr) {
                (Ok(port), Some(addr)) => {
                    app.services.insert(ns, name, port, addr);
                    reply(json!({"mapped": format!("{ns}/{name}:{port}"), "to": addr.to_string()}))
                }
                _ => (
                    StatusCode::BAD_REQUEST,
                    "expected /__emulator/services/NS/NAME/PORT with an IP:PORT body",
                )
                    .into_response(),
            }
        }
        ("POST", ["compact"]) => {
            let mut st = app.store.lock();
            st.compact();
            reply(json!({"compactedTo": st.compacted_rv()}))
        }
        _ => (StatusCode::NOT_FOUND, "unknown emulator hook").into_response(),
    }
}
