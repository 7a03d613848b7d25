//! Rules over the typed configuration: requirements between keys and the formats of values.
//! Type and unknown-key problems were found while reading; a key already reported is not
//! reported again here.

use std::collections::BTreeMap;

use super::model::{CpuMemory, Installation, MaxRolling, PlatformConfig, RoutingMode};
use super::reader::child_path;
use crate::policy;
use crate::quantity;
use crate::validation;
use crate::validation::FieldErrors;

pub(super) fn check_all(c: &PlatformConfig, ctx: &Installation<'_>, p: &mut FieldErrors) {
    routing(c, ctx, p);
    sites(c, p);
}

fn routing(c: &PlatformConfig, ctx: &Installation<'_>, p: &mut FieldErrors) {
    let r = &c.routing;
    let gateway_mode = r.mode == RoutingMode::Gateway;

    // RTG-07: gateway mode has no host fallback and needs a Gateway to attach to.
    match &r.host {
        Some(host) => check(p, "routing.host", validation::host_name(host)),
        None if gateway_mode => p.add_once(
            "routing.host",
            "required in gateway mode: the public host of all sites",
        ),
        None => {}
    }
    if let Some(hub) = &r.hub_host {
        check(p, "routing.hubHost", validation::host_name(hub));
        if r.host
            .as_deref()
            .is_some_and(|h| h.eq_ignore_ascii_case(hub))
        {
            p.add_once(
                "routing.hubHost",
                "must differ from routing.host (leave it empty to serve the Hub on routing.host)",
            );
        }
    }

    if r.tls.enabled {
        check(
            p,
            "routing.tls.secretName",
            validation::dns1123_subdomain(&r.tls.secret_name),
        );
    }
    if let Some(name) = &r.tls.hub_secret_name {
        check(
            p,
            "routing.tls.hubSecretName",
            validation::dns1123_subdomain(name),
        );
    }

    if r.mode == RoutingMode::Ingress && r.ingress.class_name.is_empty() {
        p.add_once("routing.ingress.className", "required in ingress mode");
    } else if !r.ingress.class_name.is_empty() {
        check(
            p,
            "routing.ingress.className",
            validation::dns1123_subdomain(&r.ingress.class_name),
        );
    }
    annotation_keys(
        p,
        "routing.ingress.hubAnnotations",
        &r.ingress.hub_annotations,
    );
    annotation_keys(
        p,
        "routing.ingress.routeAnnotations",
        &r.ingress.route_annotations,
    );

    let g = &r.gateway;
    match &g.name {
        Some(name) => check(
            p,
            "routing.gateway.name",
            validation::dns1123_subdomain(name),
        ),
        None if gateway_mode => p.add_once(
            "routing.gateway.name",
            "required in gateway mode: the Gateway all HTTPRoutes attach to",
        ),
        None => {}
    }
    if let Some(ns) = &g.namespace {
        check(
            p,
            "routing.gateway.namespace",
            validation::dns1123_label(ns),
        );
        if g.create
            && let Some(release_ns) = ctx.namespace
            && ns != release_ns
        {
            p.add_once(
                "routing.gateway.namespace",
                format!(
                    "must be empty or the platform namespace {release_ns:?} when routing.gateway.create is true"
                ),
            );
        }
    }
    for (key, value) in [
        ("routing.gateway.listenerName", &g.listener_name),
        ("routing.gateway.hubListenerName", &g.hub_listener_name),
    ] {
        if let Some(v) = value {
            check(p, key, validation::dns1123_subdomain(v));
        }
    }
    match &g.class_name {
        Some(class) => check(
            p,
            "routing.gateway.className",
            validation::dns1123_subdomain(class),
        ),
        None if g.create => p.add_once(
            "routing.gateway.className",
            "required when routing.gateway.create is true",
        ),
        None => {}
    }
    annotation_keys(p, "routing.gateway.annotations", &g.annotations);
    annotation_keys(p, "routing.gateway.routeAnnotations", &g.route_annotations);

    // RTG-04: the provider must exist and supply every required feature.
    match policy::provider(&g.policy_provider) {
        None => {
            let known: Vec<_> = policy::providers().iter().map(|p| p.name()).collect();
            p.add_once(
                "routing.gateway.policyProvider",
                format!(
                    "unknown policy provider {:?}; known providers: {}",
                    g.policy_provider,
                    known.join(", ")
                ),
            );
        }
        Some(provider) => {
            let missing: Vec<_> = g
                .policies
                .iter()
                .filter(|f| !provider.supports(**f))
                .map(|f| f.name())
                .collect();
            if !missing.is_empty() {
                p.add(
                    "routing.gateway.policies",
                    format!(
                        "policy provider {:?} does not supply {}; choose a provider that does in routing.gateway.policyProvider",
                        provider.name(),
                        missing.join(", ")
                    ),
                );
            }
        }
    }
}

fn sites(c: &PlatformConfig, p: &mut FieldErrors) {
    let s = &c.sites;
    if !s.version.is_empty() {
        check(p, "sitesConfig.version", validation::image_tag(&s.version));
    }

    let k = &s.kubernetes;
    if let Some(class) = &k.storage_class {
        check(
            p,
            "sitesConfig.kubernetes.storage_class",
            validation::dns1123_subdomain(class),
        );
    }
    match quantity::parse(&k.default_quota) {
        Ok(q) if q.is_negative() || q.is_zero() => p.add_once(
            "sitesConfig.kubernetes.default_quota",
            "must be greater than zero",
        ),
        Ok(_) => {}
        Err(e) => p.add_once("sitesConfig.kubernetes.default_quota", e.to_string()),
    }
    check(
        p,
        "sitesConfig.kubernetes.priority_classes.default",
        validation::dns1123_subdomain(&k.priority_classes.default),
    );
    check(
        p,
        "sitesConfig.kubernetes.priority_classes.monitored",
        validation::dns1123_subdomain(&k.priority_classes.monitored),
    );
    let requests = resources(
        p,
        "sitesConfig.kubernetes.resources.requests",
        &k.resources.requests,
    );
    let limits = resources(
        p,
        "sitesConfig.kubernetes.resources.limits",
        &k.resources.limits,
    );
    for (name, request, limit) in [
        ("cpu", requests.0, limits.0),
        ("memory", requests.1, limits.1),
    ] {
        if let (Some(req), Some(lim)) = (request, limit)
            && req > lim
        {
            p.add_once(
                format!("sitesConfig.kubernetes.resources.requests.{name}"),
                format!(
                    "must not exceed sitesConfig.kubernetes.resources.limits.{name} ({req} > {lim})"
                ),
            );
        }
    }

    if s.operator.worker_limit == 0 {
        p.add_once("sitesConfig.operator.worker_limit", "must be at least 1");
    }
    match s.rollout.max_rolling {
        MaxRolling::Sites(0) | MaxRolling::Percent(0) => p.add_once(
            "sitesConfig.rollout.max_rolling",
            "must be at least 1 (or 1%): a rollout of no Site at a time never ends",
        ),
        MaxRolling::Percent(n) if n > 100 => p.add_once(
            "sitesConfig.rollout.max_rolling",
            format!("must be at most 100%, found {n}%"),
        ),
        _ => {}
    }
    if s.rollout.progress_deadline_seconds < 10 {
        p.add_once(
            "sitesConfig.rollout.progress_deadline_seconds",
            "must be at least 10: pods need time to start",
        );
    }

    if s.migration.enabled {
        match &s.migration.image {
            None => p.add_once(
                "sitesConfig.migration.image",
                "required when sitesConfig.migration.enabled is true: the site-mirror image",
            ),
            Some(image) => check(
                p,
                "sitesConfig.migration.image",
                validation::image_reference(image).map(|_| ()),
            ),
        }
    } else if let Some(image) = &s.migration.image {
        check(
            p,
            "sitesConfig.migration.image",
            validation::image_reference(image).map(|_| ()),
        );
    }

    let key = &s.session.secret_key;
    check(
        p,
        "sitesConfig.session.secret_key.secret_name",
        validation::dns1123_subdomain(&key.secret_name),
    );
    if key.key.is_empty()
        || key.key.len() > 253
        || !key
            .key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        p.add_once(
            "sitesConfig.session.secret_key.key",
            "must be a Secret key: letters, digits, '-', '_' or '.'",
        );
    }
}

/// Checks a catalogue entry's own formats (the reader knows its index, so it calls this).
pub(super) fn catalogue_entry(
    p: &mut FieldErrors,
    path: &str,
    name: &str,
    image: &str,
    readiness_path: Option<&str>,
) {
    check(p, &format!("{path}.name"), validation::dns1123_label(name));
    match validation::image_reference(image) {
        Ok(r) if r.tag.is_some() || r.digest.is_some() => p.add_once(
            format!("{path}.image"),
            "must be an image repository without tag or digest; the tag is sitesConfig.version",
        ),
        Ok(_) => {}
        Err(e) => p.add_once(format!("{path}.image"), e),
    }
    if let Some(rp) = readiness_path
        && !rp.starts_with('/')
    {
        p.add_once(format!("{path}.readiness_path"), "must start with '/'");
    }
}

fn resources(
    p: &mut FieldErrors,
    path: &str,
    r: &CpuMemory,
) -> (
    Option<quantity::ParsedQuantity>,
    Option<quantity::ParsedQuantity>,
) {
    let mut parse = |key: &str, value: &Option<String>| {
        let value = value.as_deref()?;
        let path = format!("{path}.{key}");
        match quantity::parse(value) {
            Ok(q) if q.is_negative() => {
                p.add_once(path, "must not be negative");
                None
            }
            Ok(q) => Some(q),
            Err(e) => {
                p.add_once(path, e.to_string());
                None
            }
        }
    };
    (parse("cpu", &r.cpu), parse("memory", &r.memory))
}

fn annotation_keys(p: &mut FieldErrors, path: &str, map: &BTreeMap<String, String>) {
    for key in map.keys() {
        if let Err(e) = validation::qualified_name(key) {
            p.add_once(
                child_path(path, key),
                format!("invalid annotation key: {e}"),
            );
        }
    }
}

fn check(p: &mut FieldErrors, key: &str, result: Result<(), String>) {
    if let Err(message) = result {
        p.add_once(key, message);
    }
}
