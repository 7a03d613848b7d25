//! Accounting of every Kubernetes API call the operator makes:
//! `sites_api_requests_total{verb,resource,code}`, as a tower layer on the kube client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use prometheus::IntCounterVec;

/// The API verb and resource of a request: `get`, `list`, `watch`, `create`, `update`, `patch`,
/// `delete`, `deletecollection`; the resource as `<plural>[.<group>][/<subresource>]`
/// (`pods`, `statefulsets.apps`, `sites.sites.ecmwf.int/status`).
pub fn classify(method: &str, path: &str, query: Option<&str>) -> (&'static str, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return (verb(method, true, query), "other".to_string()),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named, sub) = match rest {
        [] => ("", false, None),
        [r] => (*r, false, None),
        [r, _name] => (*r, true, None),
        [r, _name, sub, ..] => (*r, true, Some(*sub)),
    };
    let mut name = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    if let Some(sub) = sub {
        name.push('/');
        name.push_str(sub);
    }
    (verb(method, named, query), name)
}

fn verb(method: &str, named: bool, query: Option<&str>) -> &'static str {
    let watching =
        query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match (method, named) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

/// The layer.
#[derive(Clone)]
pub struct CountLayer {
    counter: IntCounterVec,
}

impl CountLayer {
    pub fn new(counter: IntCounterVec) -> CountLayer {
        CountLayer { counter }
    }
}

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;
    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            counter: self.counter.clone(),
        }
    }
}

/// The service.
#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    counter: IntCounterVec,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Count<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method().as_str(), req.uri().path(), req.uri().query());
        let counter = self.counter.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            counter
                .with_label_values(&[verb, resource.as_str(), code.as_str()])
                .inc();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_like_the_api_server_does() {
        let cases = [
            ("GET", "/api/v1/namespaces/sites/pods", None, "list", "pods"),
            (
                "GET",
                "/api/v1/namespaces/sites/pods",
                Some("watch=true&resourceVersion=5"),
                "watch",
                "pods",
            ),
            (
                "GET",
                "/api/v1/namespaces/sites/secrets/a",
                None,
                "get",
                "secrets",
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/sites/statefulsets/a",
                Some("fieldManager=x&force=true"),
                "patch",
                "statefulsets.apps",
            ),
            (
                "PATCH",
                "/apis/sites.ecmwf.int/v1/namespaces/sites/sites/a/status",
                None,
                "patch",
                "sites.sites.ecmwf.int/status",
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/sites/events",
                None,
                "create",
                "events.events.k8s.io",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/sites/leases/l",
                None,
                "update",
                "leases.coordination.k8s.io",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/sites/pods/p",
                None,
                "delete",
                "pods",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/sites/pods",
                None,
                "deletecollection",
                "pods",
            ),
            (
                "GET",
                "/api/v1/persistentvolumes",
                None,
                "list",
                "persistentvolumes",
            ),
            (
                "PATCH",
                "/api/v1/persistentvolumes/pv-1",
                None,
                "patch",
                "persistentvolumes",
            ),
            ("GET", "/api/v1/namespaces/sites", None, "get", "namespaces"),
            ("GET", "/version", None, "get", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            assert_eq!(
                classify(method, path, query),
                (verb, resource.to_string()),
                "{method} {path}"
            );
        }
    }
}
