//! `Options::authorize`: the tokens the emulator issues act as their service accounts and are
//! authorized against the stored RBAC with the API server's answers, through the real kubectl;
//! the kubeconfig's administrator stays unrestricted.

use std::process::Output;

use sites_emulator::Options;

use crate::support::Cluster;

/// An authorizing emulator. HTTPS: kubectl sends no bearer token over plain HTTP.
async fn authorizing() -> Cluster {
    Cluster::start_with(Options {
        authorize: true,
        tls: true,
        ..Default::default()
    })
    .await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that kubectl failed with exactly this server error line.
fn refused(out: &Output, line: &str) {
    assert!(!out.status.success(), "allowed: {out:?}");
    assert_eq!(stderr(out).trim_end(), line);
}

/// Asserts that kubectl was refused for want of credentials (a 401): kubectl words it from the
/// Status (`Unauthorized`) or, when its discovery failed first, in client-go's words.
fn unauthorized(out: &Output) {
    assert!(!out.status.success(), "allowed: {out:?}");
    let err = stderr(out);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        [
            "error: You must be logged in to the server (Unauthorized)",
            "error: You must be logged in to the server (the server has asked for the client to provide credentials)",
        ]
        .contains(&last),
        "{err}"
    );
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "refused: {}", stderr(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A raw request with curl: (status code, body).
fn curl(c: &Cluster, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-X", method, "-w", "\n%{http_code}"]);
    if let Some(ca) = c.emulator().ca_pem() {
        let file = c.dir.join("ca.crt");
        std::fs::write(&file, ca).unwrap();
        cmd.arg("--cacert").arg(file);
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("{}{path}", c.emulator().url()))
        .output()
        .expect("curl runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

const ROBOT: &str = "system:serviceaccount:apps:robot";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_tokens_get_what_rbac_grants_and_the_api_servers_403_otherwise() {
    let c = authorizing().await;
    c.kubectl_ok(&["create", "namespace", "apps"]);
    c.kubectl_ok(&["create", "serviceaccount", "robot", "-n", "apps"]);
    c.kubectl_ok(&["create", "configmap", "settings", "-n", "apps"]);
    c.kubectl_ok(&["create", "configmap", "other", "-n", "apps"]);
    let token = c.kubectl_ok(&["create", "token", "robot", "-n", "apps"]);
    let robot = c.kubeconfig_with_token("robot", token.trim());
    let as_robot = |args: &[&str]| c.kubectl_as(&robot, args);

    // Nothing granted yet: lists, gets and cluster-scoped reads are refused with the API
    // server's message, naming the user, the verb, the resource, its group and the scope.
    refused(
        &as_robot(&["get", "pods", "-n", "apps"]),
        &format!(
            r#"Error from server (Forbidden): pods is forbidden: User "{ROBOT}" cannot list resource "pods" in API group "" in the namespace "apps""#
        ),
    );
    refused(
        &as_robot(&["get", "configmap", "settings", "-n", "apps"]),
        &format!(
            r#"Error from server (Forbidden): configmaps "settings" is forbidden: User "{ROBOT}" cannot get resource "configmaps" in API group "" in the namespace "apps""#
        ),
    );
    refused(
        &as_robot(&["get", "nodes"]),
        &format!(
            r#"Error from server (Forbidden): nodes is forbidden: User "{ROBOT}" cannot list resource "nodes" in API group "" at the cluster scope"#
        ),
    );
    // Discovery is open to every authenticated user (system:discovery).
    ok(&as_robot(&[
        "api-resources",
        "--api-group=apps",
        "-o",
        "name",
    ]));

    // A Role and its binding grant exactly their rules, in their namespace.
    c.kubectl_ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "apps",
        "--verb=get,list,watch",
        "--resource=pods,deployments.apps",
    ]);
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "reader",
        "-n",
        "apps",
        "--role=reader",
        "--serviceaccount=apps:robot",
    ]);
    ok(&as_robot(&["get", "pods", "-n", "apps"]));
    ok(&as_robot(&["get", "deployments", "-n", "apps"]));
    refused(
        &as_robot(&["get", "pods", "-n", "default"]),
        &format!(
            r#"Error from server (Forbidden): pods is forbidden: User "{ROBOT}" cannot list resource "pods" in API group "" in the namespace "default""#
        ),
    );
    refused(
        &as_robot(&["create", "deployment", "web", "-n", "apps", "--image=nginx"]),
        &format!(
            r#"error: failed to create deployment: deployments.apps is forbidden: User "{ROBOT}" cannot create resource "deployments" in API group "apps" in the namespace "apps""#
        ),
    );
    c.kubectl_ok(&["create", "deployment", "web", "-n", "apps", "--image=nginx"]);
    refused(
        &as_robot(&["scale", "deployment", "web", "-n", "apps", "--replicas=2"]),
        &format!(
            r#"Error from server (Forbidden): deployments.apps "web" is forbidden: User "{ROBOT}" cannot patch resource "deployments/scale" in API group "apps" in the namespace "apps""#
        ),
    );

    // resourceNames: the named object only; a list of it by `metadata.name` counts as it.
    c.kubectl_ok(&[
        "create",
        "role",
        "settings",
        "-n",
        "apps",
        "--verb=get,list",
        "--resource=configmaps",
        "--resource-name=settings",
    ]);
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "settings",
        "-n",
        "apps",
        "--role=settings",
        "--serviceaccount=apps:robot",
    ]);
    ok(&as_robot(&["get", "configmap", "settings", "-n", "apps"]));
    let listed = ok(&as_robot(&[
        "get",
        "configmaps",
        "-n",
        "apps",
        "--field-selector=metadata.name=settings",
        "-o",
        "name",
    ]));
    assert_eq!(listed.trim(), "configmap/settings");
    refused(
        &as_robot(&["get", "configmap", "other", "-n", "apps"]),
        &format!(
            r#"Error from server (Forbidden): configmaps "other" is forbidden: User "{ROBOT}" cannot get resource "configmaps" in API group "" in the namespace "apps""#
        ),
    );
    refused(
        &as_robot(&["get", "configmaps", "-n", "apps"]),
        &format!(
            r#"Error from server (Forbidden): configmaps is forbidden: User "{ROBOT}" cannot list resource "configmaps" in API group "" in the namespace "apps""#
        ),
    );

    // `kubectl auth can-i` agrees (SelfSubjectAccessReview, the same evaluation).
    assert_eq!(
        ok(&as_robot(&["auth", "can-i", "list", "pods", "-n", "apps"])).trim(),
        "yes"
    );
    let no = as_robot(&["auth", "can-i", "delete", "pods", "-n", "apps"]);
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");

    // The wire: the API server's Status, byte for byte.
    let (code, body) = curl(
        &c,
        "DELETE",
        "/api/v1/namespaces/apps/pods/p",
        Some(token.trim()),
    );
    assert_eq!(code, 403);
    assert_eq!(
        body,
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"pods \"p\" is forbidden: User \"{ROBOT}\" cannot delete resource \"pods\" in API group \"\" in the namespace \"apps\"","reason":"Forbidden","details":{{"name":"p","kind":"pods"}},"code":403}}
"#
        )
    );

    // A binding to a role that does not exist says so after the message.
    c.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "gone",
        "--clusterrole=gone",
        "--serviceaccount=apps:robot",
    ]);
    refused(
        &as_robot(&["get", "nodes"]),
        &format!(
            r#"Error from server (Forbidden): nodes is forbidden: User "{ROBOT}" cannot list resource "nodes" in API group "" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#
        ),
    );

    // The administrator is not restricted.
    c.kubectl_ok(&["delete", "deployment", "web", "-n", "apps"]);

    // A deleted service account's token no longer authenticates.
    c.kubectl_ok(&["delete", "serviceaccount", "robot", "-n", "apps"]);
    unauthorized(&as_robot(&["get", "pods", "-n", "apps"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tokens_are_unauthorized_and_no_token_is_anonymous() {
    let c = authorizing().await;
    let stranger = c.kubeconfig_with_token("stranger", "not-issued");
    unauthorized(&c.kubectl_as(&stranger, &["get", "pods"]));
    let (code, body) = curl(&c, "GET", "/api/v1/namespaces/default/pods", Some("x"));
    assert_eq!(code, 401);
    assert_eq!(
        body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
            "\n"
        )
    );

    // Without a token: system:anonymous, who may read the public information only
    // (system:public-info-viewer).
    let (code, _) = curl(&c, "GET", "/version", None);
    assert_eq!(code, 200);
    let (code, body) = curl(&c, "GET", "/api/v1/namespaces/default/pods", None);
    assert_eq!(code, 403);
    assert_eq!(
        body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}"#,
            "\n"
        )
    );
    let (code, body) = curl(&c, "GET", "/apis", None);
    assert_eq!(code, 403);
    assert_eq!(
        body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/apis\"","reason":"Forbidden","details":{},"code":403}"#,
            "\n"
        )
    );

    // The administrator's kubeconfig works as before.
    c.kubectl_ok(&["get", "pods", "-A"]);
}

/// Without the option, nothing changes: any caller is the administrator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_option_every_request_is_allowed() {
    let c = Cluster::start(false).await;
    let (code, _) = curl(&c, "GET", "/api/v1/namespaces/default/pods", None);
    assert_eq!(code, 200);
    let (code, _) = curl(&c, "GET", "/api/v1/nodes", Some("anything"));
    assert_eq!(code, 200);
}
