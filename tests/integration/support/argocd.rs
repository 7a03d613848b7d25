//! Argo CD's health assessment of a Site: the shipped Lua script
//! (`manifests/argocd/site-health.lua`) run in a real Lua 5.1 interpreter (Argo CD runs
//! gopher-lua, a Lua 5.1), with the object as Argo CD hands it over: the global `obj`, JSON
//! `null` as `nil`.

use mlua::serde::SerializeOptions;
use mlua::{Lua, LuaSerdeExt, Table};
use serde_json::Value;

use super::repo_file;

/// Argo CD's health status and message of `object` (a Site as the API server returns it).
pub fn health(object: &Value) -> (String, String) {
    let script = std::fs::read_to_string(repo_file("manifests/argocd/site-health.lua"))
        .expect("the shipped health check");
    let lua = Lua::new();
    let options = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false)
        .set_array_metatable(false);
    let obj = lua.to_value_with(object, options).expect("a Lua value");
    lua.globals().set("obj", obj).expect("obj set");
    let hs: Table = lua
        .load(&script)
        .set_name("site-health.lua")
        .eval()
        .unwrap_or_else(|e| panic!("the health check fails on {object}: {e}"));
    let status: String = hs.get("status").expect("hs.status");
    let message: String = hs.get("message").expect("hs.message");
    assert!(
        [
            "Healthy",
            "Progressing",
            "Degraded",
            "Suspended",
            "Missing",
            "Unknown"
        ]
        .contains(&status.as_str()),
        "{status} is no Argo CD health status"
    );
    (status, message)
}
