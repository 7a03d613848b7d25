//! Who a request is: an authenticated identity (`user.Info`), as the API server's
//! authenticators give it (the administrator, a service account, `system:anonymous`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// An authenticated identity (`user.Info`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// Whoever calls the emulator without a token it issued: a cluster administrator.
    pub fn default_caller() -> UserInfo {
        UserInfo {
            username: "kubernetes-admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    /// A request without credentials (`--anonymous-auth`, on by default).
    pub fn anonymous() -> UserInfo {
        UserInfo {
            username: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    /// A service account's identity.
    pub fn service_account(ns: &str, name: &str, uid: &str) -> UserInfo {
        UserInfo {
            username: format!("system:serviceaccount:{ns}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// `authentication.k8s.io/v1` UserInfo JSON.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}
