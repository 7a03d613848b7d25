//! Test hooks under `/__emulator/`: request counters, watch-history compaction.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::server::App;

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
        ("POST", ["compact"]) => {
            let mut st = app.store.lock();
            st.compact();
            reply(json!({"compactedTo": st.compacted_rv()}))
        }
        _ => (StatusCode::NOT_FOUND, "unknown emulator hook").into_response(),
    }
}
