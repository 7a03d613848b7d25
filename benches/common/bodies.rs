//! AdmissionReview bodies shared by the webhook benchmarks: a typical Site (~4 KB, what
//! `kubectl apply` sends: last-applied annotation, managed fields, three applications) and a
//! large one (~100 KB: a Site shared with thousands of users).

use serde_json::{Value, json};

/// The platform configuration the benchmarks validate against.
pub const CONFIG: &str = include_str!("../../manifests/base/config.yaml");

fn spec(users: usize) -> Value {
    let users: Vec<String> = (0..users).map(|i| format!("user{i:05}")).collect();
    json!({
        "name": "handbook", "owner": "jdoe", "type": "static",
        "description": "Team handbook: procedures, on-call rotas and the glossary of the operations team",
        "created_by": "jdoe", "updated_by": "asmith",
        "created_at": "2026-01-12T09:30:00Z", "updated_at": "2026-11-02T16:45:10Z",
        "configuration": {
            "space": "docs", "enabled": true,
            "applications": [
                {"name": "static"},
                {"name": "api", "image": "ghcr.io/ecmwf/handbook-api:2.4.1", "port": 8000,
                 "env": {"LOG_LEVEL": "info", "DATABASE_POOL": "8", "CACHE_TTL": "300",
                         "FEATURE_SEARCH": "true", "UPSTREAM_URL": "https://api.example.int/v2"},
                 "paths": [{"path": "/docs/handbook/api", "path_type": "Prefix"},
                           {"path": "/docs/handbook/search", "path_type": "Prefix"}]},
                {"name": "worker", "image": "ghcr.io/ecmwf/handbook-worker:2.4.1", "port": 9000,
                 "env": {"QUEUE": "handbook", "CONCURRENCY": "4"}}
            ],
            "headers": {"X-Frame-Options": "SAMEORIGIN", "X-Content-Type-Options": "nosniff",
                        "Referrer-Policy": "strict-origin-when-cross-origin",
                        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'self'"},
            "quota": "5Gi", "retention_date": "2027-12-31",
            "share": {"administrator_users": ["jdoe", "asmith"], "users": users,
                      "groups": ["docs-team", "operations"]},
            "settings": {"replicas": 1, "resource_limits": {"cpu": "500m", "memory": "512Mi"},
                         "error_handling": "platform", "monitored": true}
        }
    })
}

/// A Site as the API server sends it: with the `kubectl apply` annotation and managed fields.
pub fn site(users: usize) -> Value {
    let spec = spec(users);
    let applied = json!({"apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {"name": "docs-handbook", "namespace": "sites"}, "spec": spec});
    json!({
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {
            "name": "docs-handbook", "namespace": "sites",
            "uid": "0b7c58a4-3c1e-4a8e-9b1d-6c3f2a9e4d10", "generation": 7,
            "creationTimestamp": "2026-01-12T09:30:00Z",
            "labels": {"app.kubernetes.io/part-of": "sites", "sites.ecmwf.int/space": "docs"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string(),
                "sites.ecmwf.int/upgrade-request": "5f0b9a3e-2a7d-4d3c-9c8e-1b2f3a4d5e6f"
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "sites.ecmwf.int/v1", "time": "2026-11-02T16:45:10Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
                    "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                    "f:spec": {".": {}, "f:configuration": {".": {}, "f:applications": {},
                    "f:headers": {".": {}}, "f:quota": {}, "f:share": {".": {}}}}}
            }]
        },
        "spec": spec
    })
}

/// A CREATE AdmissionReview for `object`.
pub fn review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6e2b1f0c-0000-4000-8000-000000000001",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "requestKind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "requestResource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": "docs-handbook", "namespace": "sites", "operation": "CREATE",
            "userInfo": {"username": "jdoe", "uid": "1001", "groups": ["system:authenticated", "docs-team"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl-client-side-apply"}
        }
    }))
    .expect("a JSON body")
}

/// The typical (~4 KB) and the large (~100 KB) review.
pub fn typical() -> Vec<u8> {
    review(site(15))
}

pub fn large() -> Vec<u8> {
    review(site(3_700))
}
