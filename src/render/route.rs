//! Pure route pieces of the routing design: the HTTPRoute rule conversion table (RTG-09), the
//! disabled-site redirect in both modes (RTG-06, LIFE-04), the HTTPRoute parentRef shape, and
//! the Ingress minion annotation layers in the seed's merge order.

use std::collections::BTreeMap;

use gateway_api::apis::standard::httproutes::{HttpRoute, HttpRouteSpec};
use gateway_api::apis::standard::httproutes::{
    HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestRedirect, HttpRouteRulesFiltersRequestRedirectPath,
    HttpRouteRulesFiltersRequestRedirectPathType, HttpRouteRulesFiltersRequestRedirectScheme,
    HttpRouteRulesFiltersType, HttpRouteRulesMatches, HttpRouteRulesMatchesPath,
    HttpRouteRulesMatchesPathType,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Error;
use crate::config::{GatewayRouting, PlatformConfig, Scheme};
use crate::crd::Site;
use crate::{labels, policy};

/// Where requests to a disabled (archived) site are redirected, with status 302.
pub const DISABLED_REDIRECT: &str = "/hub/error/page/410/";
/// The nginx snippet that redirects a disabled site in ingress mode.
pub const DISABLED_SNIPPET: &str = "return 302 /hub/error/page/410/;";
/// The most rules one HTTPRoute may have (`spec.rules` maxItems in the Gateway API CRD).
pub const MAX_HTTP_ROUTE_RULES: usize = 16;
/// The Ingress annotation carrying location snippets.
pub const LOCATION_SNIPPETS: &str = "nginx.org/location-snippets";

/// One path of a site route, in the Ingress shape the conversion starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutePath {
    pub path: String,
    /// `Prefix`, `Exact`, or anything else (unsupported in gateway mode).
    pub path_type: String,
    /// Backend Service name.
    pub service: String,
    /// Backend Service port: must be numeric in gateway mode.
    pub port: IntOrString,
}

fn redirect(path: &str, scheme: Scheme) -> HttpRouteRulesFilters {
    HttpRouteRulesFilters {
        r#type: HttpRouteRulesFiltersType::RequestRedirect,
        request_redirect: Some(HttpRouteRulesFiltersRequestRedirect {
            path: Some(HttpRouteRulesFiltersRequestRedirectPath {
                r#type: HttpRouteRulesFiltersRequestRedirectPathType::ReplaceFullPath,
                replace_full_path: Some(path.to_string()),
                replace_prefix_match: None,
            }),
            scheme: Some(match scheme {
                Scheme::Http => HttpRouteRulesFiltersRequestRedirectScheme::Http,
                Scheme::Https => HttpRouteRulesFiltersRequestRedirectScheme::Https,
            }),
            status_code: Some(302),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn matching(
    kind: HttpRouteRulesMatchesPathType,
    value: &str,
) -> Option<Vec<HttpRouteRulesMatches>> {
    Some(vec![HttpRouteRulesMatches {
        path: Some(HttpRouteRulesMatchesPath {
            r#type: Some(kind),
            value: Some(value.to_string()),
        }),
        ..Default::default()
    }])
}

/// Converts the site's route paths into HTTPRoute rules (RTG-09, RTG-06):
///
/// | path | rules |
/// |---|---|
/// | `Prefix` | PathPrefix match -> backendRef to the Service |
/// | `Prefix` ending with `/` | also an Exact match without the slash -> 302 to the slashed path |
/// | `Exact` | Exact match -> backendRef, no redirect rule |
/// | any other type, or a non-numeric port | `UnsupportedRoute` (terminal) |
/// | disabled site | every match redirects (302) to `/hub/error/page/410/` instead |
pub fn http_route_rules(
    paths: &[RoutePath],
    disabled: bool,
    scheme: Scheme,
) -> Result<Vec<HttpRouteRules>, Error> {
    let mut rules = Vec::new();
    for p in paths {
        let port = match &p.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(s) => s.parse::<i32>().map_err(|_| Error::UnsupportedRoute {
                path: p.path.clone(),
                reason: format!(
                    "backend port {s:?} of Service {:?} is not numeric",
                    p.service
                ),
            })?,
        };
        let kind = match p.path_type.as_str() {
            "Prefix" => HttpRouteRulesMatchesPathType::PathPrefix,
            "Exact" => HttpRouteRulesMatchesPathType::Exact,
            other => {
                return Err(Error::UnsupportedRoute {
                    path: p.path.clone(),
                    reason: format!(
                        "path type {other:?} is not supported in gateway mode (use Prefix or Exact)"
                    ),
                });
            }
        };
        let serve = |kind: HttpRouteRulesMatchesPathType, value: &str| {
            if disabled {
                HttpRouteRules {
                    matches: matching(kind, value),
                    filters: Some(vec![redirect(DISABLED_REDIRECT, scheme)]),
                    ..Default::default()
                }
            } else {
                HttpRouteRules {
                    matches: matching(kind, value),
                    backend_refs: Some(vec![HttpRouteRulesBackendRefs {
                        name: p.service.clone(),
                        port: Some(port),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }
            }
        };
        let slashed_prefix = p.path_type == "Prefix" && p.path.len() > 1 && p.path.ends_with('/');
        rules.push(serve(kind, &p.path));
        if slashed_prefix {
            let bare = p.path.trim_end_matches('/');
            let target = if disabled {
                DISABLED_REDIRECT
            } else {
                p.path.as_str()
            };
            rules.push(HttpRouteRules {
                matches: matching(HttpRouteRulesMatchesPathType::Exact, bare),
                filters: Some(vec![redirect(target, scheme)]),
                ..Default::default()
            });
        }
    }
    Ok(rules)
}

/// The parentRef of every site HTTPRoute: the configured Gateway, with `namespace` only when
/// the Gateway lives in another namespace and `sectionName` only when a listener is set.
pub fn parent_ref(
    gateway: &GatewayRouting,
    platform_namespace: &str,
) -> Result<HttpRouteParentRefs, Error> {
    let name = gateway.name.clone().ok_or(Error::MissingConfig {
        key: "routing.gateway.name",
    })?;
    Ok(HttpRouteParentRefs {
        name,
        namespace: gateway
            .namespace
            .clone()
            .filter(|ns| ns != platform_namespace),
        section_name: gateway.listener_name.clone(),
        ..Default::default()
    })
}

/// Annotations of the site's Ingress minion, layered so that later layers win: the Site's own
/// annotations, then the generated ones (`mergeable-ingress-type: minion`,
/// `websocket-services`, `lb-method` when replicas > 1), then each application's annotations in
/// order, then `routing.ingress.routeAnnotations`; a disabled site gets the 410 redirect appended
/// to its location snippets. Annotations the platform uses for itself on the Site
/// (`kubectl.kubernetes.io/*`, `sites.ecmwf.int/*`) are not copied.
pub fn ingress_annotations<'a>(
    site_annotations: &BTreeMap<String, String>,
    id: &str,
    replicas: i32,
    application_annotations: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    route_annotations: &BTreeMap<String, String>,
    disabled: bool,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = site_annotations
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("kubectl.kubernetes.io/") && !k.starts_with("sites.ecmwf.int/")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert("nginx.org/mergeable-ingress-type".into(), "minion".into());
    out.insert("nginx.org/websocket-services".into(), id.to_string());
    if replicas > 1 {
        out.insert(
            "nginx.org/lb-method".into(),
            "hash $remote_addr consistent".into(),
        );
    }
    for layer in application_annotations {
        out.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out.extend(
        route_annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    if disabled {
        let snippets = match out.get(LOCATION_SNIPPETS).filter(|s| !s.trim().is_empty()) {
            Some(existing) => format!("{}\n{DISABLED_SNIPPET}", existing.trim_end()),
            None => DISABLED_SNIPPET.to_string(),
        };
        out.insert(LOCATION_SNIPPETS.into(), snippets);
    }
    out
}

/// The site's Ingress minion (ingress mode): class `routing.ingress.className`, one rule for the
/// public host with the site's paths, annotations per [`ingress_annotations`]. Path types other
/// than the ones Ingress knows are an `UnsupportedRoute` error.
pub fn ingress(
    site: &Site,
    cfg: &PlatformConfig,
    host: &str,
    paths: &[RoutePath],
) -> Result<Ingress, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let mut http_paths = Vec::with_capacity(paths.len());
    for p in paths {
        if !matches!(
            p.path_type.as_str(),
            "Prefix" | "Exact" | "ImplementationSpecific"
        ) {
            return Err(Error::UnsupportedRoute {
                path: p.path.clone(),
                reason: format!(
                    "path type {:?} is not an Ingress path type (Prefix, Exact, ImplementationSpecific)",
                    p.path_type
                ),
            });
        }
        let port = match &p.port {
            IntOrString::Int(n) => ServiceBackendPort {
                number: Some(*n),
                name: None,
            },
            IntOrString::String(name) => ServiceBackendPort {
                number: None,
                name: Some(name.clone()),
            },
        };
        http_paths.push(HTTPIngressPath {
            path: Some(p.path.clone()),
            path_type: p.path_type.clone(),
            backend: IngressBackend {
                service: Some(IngressServiceBackend {
                    name: p.service.clone(),
                    port: Some(port),
                }),
                resource: None,
            },
        });
    }
    let c = &site.spec.configuration;
    let annotations = ingress_annotations(
        site.metadata
            .annotations
            .as_ref()
            .unwrap_or(&BTreeMap::new()),
        id,
        c.settings.replicas,
        sorted_by_name(&c.applications).map(|a| &a.annotations),
        &cfg.routing.ingress.route_annotations,
        !c.enabled,
    );
    let mut metadata = labels::object_meta(site, id)?;
    metadata.annotations = Some(annotations);
    Ok(Ingress {
        metadata,
        spec: Some(IngressSpec {
            ingress_class_name: Some(cfg.routing.ingress.class_name.clone()),
            rules: Some(vec![IngressRule {
                host: Some(host.to_string()),
                http: Some(HTTPIngressRuleValue { paths: http_paths }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Applications in name order (the order of the Site's list is not significant, LIFE-02).
fn sorted_by_name(
    apps: &[crate::crd::Application],
) -> impl Iterator<Item = &crate::crd::Application> {
    let mut sorted: Vec<&crate::crd::Application> = apps.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted.into_iter()
}

/// The site's HTTPRoute (gateway mode): one parentRef ([`parent_ref`]), the public host, the
/// converted rules ([`http_route_rules`]); annotations from the policy provider, then
/// `routing.gateway.routeAnnotations`.
pub fn http_route(
    site: &Site,
    cfg: &PlatformConfig,
    platform_namespace: &str,
    host: &str,
    paths: &[RoutePath],
) -> Result<HttpRoute, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let gateway = &cfg.routing.gateway;
    let provider = policy::provider(&gateway.policy_provider).ok_or(Error::MissingConfig {
        key: "routing.gateway.policyProvider",
    })?;
    let mut annotations = provider.route_annotations(site);
    annotations.extend(
        gateway
            .route_annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let rules = http_route_rules(paths, !site.spec.configuration.enabled, cfg.routing.scheme)?;
    let mut metadata = labels::object_meta(site, id)?;
    metadata.annotations = Some(annotations).filter(|a| !a.is_empty());
    Ok(HttpRoute {
        metadata,
        spec: HttpRouteSpec {
            parent_refs: Some(vec![parent_ref(gateway, platform_namespace)?]),
            hostnames: Some(vec![host.to_string()]),
            rules: Some(rules),
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn path(path: &str, path_type: &str, port: IntOrString) -> RoutePath {
        RoutePath {
            path: path.into(),
            path_type: path_type.into(),
            service: "docs-handbook".into(),
            port,
        }
    }

    fn rules_json(paths: &[RoutePath], disabled: bool) -> Value {
        serde_json::to_value(http_route_rules(paths, disabled, Scheme::Https).unwrap()).unwrap()
    }

    fn backend() -> Value {
        json!([{"name": "docs-handbook", "port": 80}])
    }

    fn redirect_to(p: &str) -> Value {
        json!([{"type": "RequestRedirect", "requestRedirect": {
            "path": {"type": "ReplaceFullPath", "replaceFullPath": p}, "scheme": "https", "statusCode": 302
        }}])
    }

    #[test]
    fn conversion_table() {
        let int = IntOrString::Int(80);
        // (case, paths, disabled, expected rules)
        let cases: Vec<(&str, Vec<RoutePath>, bool, Value)> = vec![
            (
                "Prefix -> PathPrefix with backend",
                vec![path("/docs/handbook", "Prefix", int.clone())],
                false,
                json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/docs/handbook"}}], "backendRefs": backend()}]),
            ),
            (
                "slashed Prefix adds an Exact redirect to the slashed path",
                vec![path("/docs/handbook/", "Prefix", int.clone())],
                false,
                json!([
                    {"matches": [{"path": {"type": "PathPrefix", "value": "/docs/handbook/"}}], "backendRefs": backend()},
                    {"matches": [{"path": {"type": "Exact", "value": "/docs/handbook"}}], "filters": redirect_to("/docs/handbook/")}
                ]),
            ),
            (
                "Exact -> Exact, no redirect rule",
                vec![path("/docs/handbook/api", "Exact", int.clone())],
                false,
                json!([{"matches": [{"path": {"type": "Exact", "value": "/docs/handbook/api"}}], "backendRefs": backend()}]),
            ),
            (
                "numeric string port is accepted",
                vec![path("/x", "Prefix", IntOrString::String("80".into()))],
                false,
                json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/x"}}], "backendRefs": backend()}]),
            ),
            (
                "disabled: every match redirects to the 410 page",
                vec![
                    path("/docs/handbook/", "Prefix", int.clone()),
                    path("/docs/handbook/api", "Exact", int.clone()),
                ],
                true,
                json!([
                    {"matches": [{"path": {"type": "PathPrefix", "value": "/docs/handbook/"}}], "filters": redirect_to(DISABLED_REDIRECT)},
                    {"matches": [{"path": {"type": "Exact", "value": "/docs/handbook"}}], "filters": redirect_to(DISABLED_REDIRECT)},
                    {"matches": [{"path": {"type": "Exact", "value": "/docs/handbook/api"}}], "filters": redirect_to(DISABLED_REDIRECT)}
                ]),
            ),
        ];
        for (case, paths, disabled, want) in cases {
            assert_eq!(rules_json(&paths, disabled), want, "{case}");
        }
    }

    #[test]
    fn unsupported_routes_are_terminal_errors() {
        for (p, fragment) in [
            (
                path("/x", "ImplementationSpecific", IntOrString::Int(80)),
                "path type \"ImplementationSpecific\"",
            ),
            (
                path("/x", "Prefix", IntOrString::String("http".into())),
                "backend port \"http\"",
            ),
        ] {
            let err = http_route_rules(&[p], false, Scheme::Https).unwrap_err();
            assert!(matches!(err, Error::UnsupportedRoute { .. }), "{err:?}");
            assert!(!err.is_transient());
            assert!(err.to_string().contains(fragment), "{err}");
        }
    }

    #[test]
    fn parent_ref_shapes() {
        let gw = |ns: Option<&str>, listener: Option<&str>| GatewayRouting {
            namespace: ns.map(str::to_string),
            listener_name: listener.map(str::to_string),
            ..crate::config::Routing::default().gateway
        };
        let cases = [
            (gw(None, None), json!({"name": "sites-gateway"})),
            (gw(Some("sites"), None), json!({"name": "sites-gateway"})),
            (
                gw(Some("infra"), None),
                json!({"name": "sites-gateway", "namespace": "infra"}),
            ),
            (
                gw(None, Some("https")),
                json!({"name": "sites-gateway", "sectionName": "https"}),
            ),
            (
                gw(Some("infra"), Some("https")),
                json!({"name": "sites-gateway", "namespace": "infra", "sectionName": "https"}),
            ),
        ];
        for (g, want) in cases {
            assert_eq!(
                serde_json::to_value(parent_ref(&g, "sites").unwrap()).unwrap(),
                want
            );
        }
        let nameless = GatewayRouting {
            name: None,
            ..gw(None, None)
        };
        assert!(matches!(
            parent_ref(&nameless, "sites"),
            Err(Error::MissingConfig {
                key: "routing.gateway.name"
            })
        ));
    }

    #[test]
    fn annotation_layers_merge_in_order() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let key = "nginx.org/lb-method";
        let site = map(&[
            (key, "site"),
            ("team", "docs"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ("sites.ecmwf.int/upgrade-request", "u"),
        ]);
        let app1 = map(&[(key, "app1"), ("nginx.org/proxy-read-timeout", "120s")]);
        let app2 = map(&[(key, "app2")]);
        let route = map(&[(key, "route")]);
        // A key set in every layer ends with the last layer's value.
        let merged = ingress_annotations(&site, "docs-handbook", 3, [&app1, &app2], &route, false);
        assert_eq!(merged[key], "route");
        let without_route = ingress_annotations(
            &site,
            "docs-handbook",
            3,
            [&app1, &app2],
            &BTreeMap::new(),
            false,
        );
        assert_eq!(without_route[key], "app2");
        let generated_over_site =
            ingress_annotations(&site, "docs-handbook", 3, [], &BTreeMap::new(), false);
        assert_eq!(generated_over_site[key], "hash $remote_addr consistent");
        let single_replica =
            ingress_annotations(&site, "docs-handbook", 1, [], &BTreeMap::new(), false);
        assert_eq!(
            single_replica[key], "site",
            "lb-method is generated only for replicas > 1"
        );
        assert_eq!(merged["nginx.org/mergeable-ingress-type"], "minion");
        assert_eq!(merged["nginx.org/websocket-services"], "docs-handbook");
        assert_eq!(merged["team"], "docs");
        assert_eq!(merged["nginx.org/proxy-read-timeout"], "120s");
        assert!(!merged.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(!merged.contains_key("sites.ecmwf.int/upgrade-request"));
        assert!(!merged.contains_key(LOCATION_SNIPPETS));
    }

    #[test]
    fn disabled_sites_get_the_410_snippet_appended() {
        let none = BTreeMap::new();
        let plain = ingress_annotations(&none, "a", 1, [], &none, true);
        assert_eq!(plain[LOCATION_SNIPPETS], "return 302 /hub/error/page/410/;");
        let existing: BTreeMap<String, String> = [(
            LOCATION_SNIPPETS.to_string(),
            "add_header X-A b;\n".to_string(),
        )]
        .into();
        let appended = ingress_annotations(&none, "a", 1, [], &existing, true);
        assert_eq!(
            appended[LOCATION_SNIPPETS],
            "add_header X-A b;\nreturn 302 /hub/error/page/410/;"
        );
    }
}
