//! Every Site rule (SPEC sections 2 and 5), in one place: the validating webhook calls
//! [`violations`], the reconciler calls [`validate`] before rendering, and rendering takes only
//! the [`Valid`] Site that `validate` returns. Every violation is collected, each with its field
//! path, so one denial (or one status condition) lists them all.

use std::collections::BTreeMap;

use crate::config::{PlatformConfig, RoutingMode};
use crate::crd::SiteConfiguration;
use crate::validation::{FieldError, FieldErrors, Valid, format};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{MAX_SITE_ID_LEN, PAUSED_ANNOTATION, Site, SiteRef, Str};
use crate::quantity;
use crate::render::configmap::ErrorHandling;
use crate::render::{apps, route};

/// The denial for per-site routing settings.
pub const ROUTING_IS_PLATFORM_WIDE: &str =
    "routing is platform-wide; use the top-level routing values";
/// The longest route path (the Gateway API's limit on an HTTPRoute path match; the same in both
/// modes, so a Site does not become unroutable when the platform changes mode).
pub const MAX_PATH_LEN: usize = 1024;
/// The longest extra header value: nginx reads `add_header` arguments into a 4096-byte buffer
/// and refuses to start on a longer one.
pub const MAX_HEADER_VALUE_LEN: usize = 4000;

/// Sequences and endings the Kubernetes API server refuses in Ingress and HTTPRoute paths.
const INVALID_PATH_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: &[&str] = &["/..", "/."];

/// The Site as a [`Valid`] one, or every rule it breaks (rules about a previous version, such as
/// the quota never decreasing, are admission's: see [`violations`]).
pub fn validate<'a>(site: &'a Site, cfg: &PlatformConfig) -> Result<Valid<'a>, Vec<FieldError>> {
    let v = violations(site.parts(), None, cfg);
    if v.is_empty() {
        Ok(Valid::checked(site))
    } else {
        Err(v)
    }
}

/// Every rule a Site must satisfy. `old` is the stored object on UPDATE (quota never decreases).
pub fn violations<S: Str>(
    site: SiteRef<'_, S>,
    old: Option<SiteRef<'_, S>>,
    cfg: &PlatformConfig,
) -> Vec<FieldError> {
    let mut v = FieldErrors::default();
    metadata(site.metadata, &mut v);
    let c = site.configuration;
    v.check("spec.name", format::dns1123_label(site.name));
    v.check("spec.configuration.space", format::dns1123_label(&c.space));
    for (field, value) in [("spec.owner", site.owner), ("spec.type", site.site_type)] {
        if value.trim().is_empty() {
            v.add(field, "must not be empty");
        }
    }
    if c.routing.is_some() {
        v.add("spec.configuration.routing", ROUTING_IS_PLATFORM_WIDE);
    }
    if c.settings.routing.is_some() {
        v.add(
            "spec.configuration.settings.routing",
            ROUTING_IS_PLATFORM_WIDE,
        );
    }
    if c.applications.len() > crate::crd::MAX_APPLICATIONS {
        v.add(
            "spec.configuration.applications",
            format!(
                "at most {} applications, found {}",
                crate::crd::MAX_APPLICATIONS,
                c.applications.len()
            ),
        );
    }
    applications(site, cfg, &mut v);
    for (name, value) in &c.headers {
        v.check_at(
            || format::map_field("spec.configuration.headers", name),
            header(name, value),
        );
    }
    quota(c, old.map(|o| o.configuration), &mut v);
    if let Some(date) = &c.retention_date {
        v.check("spec.configuration.retention_date", iso_date(date));
    }
    v.check(
        "spec.configuration.settings.error_handling",
        ErrorHandling::parse(c.settings.error_handling.as_deref()).map(|_| ()),
    );
    if c.settings.replicas < 0 {
        v.add(
            "spec.configuration.settings.replicas",
            "must not be negative",
        );
    }
    resource_limits(c, cfg, &mut v);
    v.into_vec()
}

fn metadata(meta: &ObjectMeta, v: &mut FieldErrors) {
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => v.check(
            "metadata.name",
            format::dns1035_label(name, MAX_SITE_ID_LEN),
        ),
        (_, Some(prefix)) => {
            // The API server appends 5 random characters.
            let sample = format!("{prefix}abcde");
            v.check(
                "metadata.generateName",
                format::dns1035_label(&sample, MAX_SITE_ID_LEN),
            );
        }
        _ => v.add("metadata.name", "required"),
    }
    let paused = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_ANNOTATION));
    if let Some(value) = paused
        && value != "true"
        && value != "false"
    {
        v.add(
            format!("metadata.annotations[{PAUSED_ANNOTATION}]"),
            "must be \"true\" or \"false\"",
        );
    }
}

/// Names, images, ports, environment, annotations and paths of the applications, as
/// [`apps::resolve_each`] resolves them against the catalogue; then the HTTPRoute rule limit.
fn applications<S: Str>(site: SiteRef<'_, S>, cfg: &PlatformConfig, v: &mut FieldErrors) {
    let c = site.configuration;
    if c.applications.is_empty() {
        v.add(
            "spec.configuration.applications",
            "a site needs at least one application",
        );
    }
    let before = v.len();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ports: BTreeMap<i32, usize> = BTreeMap::new();
    for app in apps::resolve_each(&c.applications, cfg) {
        let i = app.index;
        v.check_at(|| app.field(".name"), format::dns1123_label(&app.spec.name));
        if let Some(first) = names.insert(&app.spec.name, i) {
            v.add(
                app.field(".name"),
                format!(
                    "{:?} is already used by applications[{first}]",
                    &*app.spec.name
                ),
            );
            // The other rules would only repeat the duplicate.
            continue;
        }
        match (&app.spec.image, app.builtin) {
            (Some(image), _) => v.check_at(
                || app.field(".image"),
                format::image_reference(image).map(|_| ()),
            ),
            (None, None) => v.add(
                app.field(".image"),
                "required for a custom application (one not in the platform catalogue)",
            ),
            (None, Some(_)) => {}
        }
        if let Some(port) = app.spec.port
            && !(1..=65535).contains(&port)
        {
            v.add(app.field(".port"), "must be between 1 and 65535");
        }
        if (1..=65535).contains(&app.port)
            && let Some(first) = ports.insert(app.port, i)
        {
            v.add(
                app.field(".port"),
                format!("port {} is already used by applications[{first}]", app.port),
            );
        }
        for key in app.spec.env.keys() {
            v.check_at(|| format::map_field(&app.field(".env"), key), env_name(key));
        }
        for key in app.spec.annotations.keys() {
            v.check_at(
                || format::map_field(&app.field(".annotations"), key),
                format::qualified_name(key),
            );
        }
        for (j, p) in app.spec.paths.iter().enumerate() {
            let path_field = || app.field(&format!(".paths[{j}].path"));
            match route_path(&p.path) {
                Err(m) => v.add(path_field(), m),
                Ok(()) if cfg.routing.mode == RoutingMode::Gateway => {
                    v.check_at(path_field, gateway_route_path(&p.path))
                }
                Ok(()) => {}
            }
            let supported: &[&str] = match cfg.routing.mode {
                RoutingMode::Ingress => &["Prefix", "Exact", "ImplementationSpecific"],
                RoutingMode::Gateway => &["Prefix", "Exact"],
            };
            if !supported.contains(&&*p.path_type) {
                v.add(
                    app.field(&format!(".paths[{j}].path_type")),
                    format!(
                        "{:?} is not supported in {} mode (use {})",
                        &*p.path_type,
                        cfg.routing.mode.as_str(),
                        supported.join(" or ")
                    ),
                );
            }
        }
    }
    // One HTTPRoute holds at most 16 rules (gateway mode); counted only when the applications
    // and their paths are valid.
    if cfg.routing.mode == RoutingMode::Gateway && v.len() == before {
        let resolved = apps::resolve_sorted(&c.applications, cfg);
        let paths = apps::route_paths_at(&site.path(), &resolved, "site");
        if let Ok(rules) = route::http_route_rules(&paths, !c.enabled, cfg.routing.scheme)
            && rules.len() > route::MAX_HTTP_ROUTE_RULES
        {
            v.add(
                "spec.configuration.applications",
                format!(
                    "the site's paths need {} HTTPRoute rules; the Gateway API allows at most {} \
                     (a Prefix path ending in '/' needs two)",
                    rules.len(),
                    route::MAX_HTTP_ROUTE_RULES
                ),
            );
        }
    }
}

fn quota<S>(c: &SiteConfiguration<S>, old: Option<&SiteConfiguration<S>>, v: &mut FieldErrors) {
    let field = "spec.configuration.quota";
    let old_quota = old.and_then(|o| o.quota.as_ref());
    match &c.quota {
        Some(q) => match positive_quantity(&q.0) {
            Err(m) => v.add(field, m),
            Ok(new) => {
                if let Some(was) = old_quota
                    && let Ok(previous) = quantity::parse(&was.0)
                    && new < previous
                {
                    v.add(
                        field,
                        format!(
                            "must not decrease (was {}, now {}): volumes cannot shrink",
                            was.0, q.0
                        ),
                    );
                }
            }
        },
        None if old_quota.is_some() => {
            v.add(field, "must not be removed once set: volumes cannot shrink")
        }
        None => {}
    }
}

fn resource_limits<S>(c: &SiteConfiguration<S>, cfg: &PlatformConfig, v: &mut FieldErrors) {
    let Some(limits) = &c.settings.resource_limits else {
        return;
    };
    let requests = &cfg.sites.kubernetes.resources.requests;
    for (name, limit, request) in [
        ("cpu", limits.cpu.as_ref(), requests.cpu.as_deref()),
        ("memory", limits.memory.as_ref(), requests.memory.as_deref()),
    ] {
        let Some(limit) = limit else { continue };
        let field = || format!("spec.configuration.settings.resource_limits.{name}");
        match positive_quantity(&limit.0) {
            Err(m) => v.add(field(), m),
            Ok(l) => {
                if let Some((r, rq)) = request.and_then(|r| quantity::parse(r).ok().map(|q| (r, q)))
                    && l < rq
                {
                    v.add(
                        field(),
                        format!(
                            "{} is below the platform's request of {r}: limits must be at least the requests",
                            limit.0
                        ),
                    );
                }
            }
        }
    }
}

/// The reserved-names rule: no object of the Site (`<id>`, `<id>-oauth2`, `<id>-files`) may take
/// the name of a platform object of the namespace (`reserved`).
pub fn reserved_names(meta: &ObjectMeta, reserved: impl Fn(&str) -> bool) -> Option<FieldError> {
    let id = meta.name.as_deref().filter(|n| !n.is_empty())?;
    let first = crate::labels::owned_names(id)
        .into_iter()
        .find(|name| reserved(name))?;
    Some(FieldError::new(
        "metadata.name",
        format!(
            "{id:?} is reserved: the Site's objects would be named {first:?}, a platform object of this namespace"
        ),
    ))
}

/// One path, one Site: `users` are the other Sites whose public path is `public_path`
/// ([`crate::crd::SiteRef::public_path`]), the Site's.
pub fn path_in_use(public_path: &str, users: &[String]) -> Option<FieldError> {
    let other = users.iter().min()?;
    Some(FieldError::new(
        "spec.configuration.space",
        format!("the path {public_path} is already used by Site {other}"),
    ))
}

/// Ratcheting (the Kubernetes convention for tightened rules): of the `violations` of an
/// updated Site, drops those the stored Site `old` already had (`before`, the same field and
/// message) when the update leaves that field's value as it was. A changed field gets every rule.
pub fn ratchet<T: serde::Serialize>(
    violations: Vec<FieldError>,
    before: &[FieldError],
    old: &T,
    new: &T,
) -> Vec<FieldError> {
    // Only a violation the stored Site had can go; its field's value is compared through
    // hashes read from the serialised objects, which builds neither as a tree.
    let candidates: Vec<&str> = violations
        .iter()
        .filter(|v| before.contains(v))
        .map(|v| v.field.as_str())
        .collect();
    if candidates.is_empty() {
        return violations;
    }
    let at = |site: &T| {
        serde_json::to_vec(site)
            .map(|json| crate::validation::values::hashes_at(&json, &candidates))
            .unwrap_or_default()
    };
    let (old, new) = (at(old), at(new));
    violations
        .into_iter()
        .filter(|v| {
            let unchanged = old
                .get(&v.field)
                .is_some_and(|was| new.get(&v.field) == Some(was));
            !(unchanged && before.contains(v))
        })
        .collect()
}

/// A quantity greater than zero.
pub fn positive_quantity(value: &str) -> Result<quantity::ParsedQuantity, String> {
    let q = quantity::parse(value).map_err(|e| e.to_string())?;
    if q.is_negative() || q.is_zero() {
        return Err(format!("{value:?} must be greater than zero"));
    }
    Ok(q)
}

/// `YYYY-MM-DD`, a day that exists.
pub fn iso_date(value: &str) -> Result<(), String> {
    let bad = || format!("{value:?} is not an ISO 8601 date (YYYY-MM-DD)");
    let parts: Vec<&str> = value.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(bad());
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(bad());
    }
    let num = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
    };
    let (Some(y), Some(m), Some(d)) = (num(y), num(m), num(d)) else {
        return Err(bad());
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(format!("{value:?} has no month {m}")),
    };
    if d == 0 || d > days {
        return Err(format!("{value:?} is not a day of that month"));
    }
    Ok(())
}

/// Environment variable names: printable ASCII without `=` (what Kubernetes accepts).
pub fn env_name(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("environment variable names must not be empty".into());
    }
    if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic() || *c == '=') {
        return Err(format!(
            "{key:?} contains {c:?}; environment variable names are printable ASCII without '='"
        ));
    }
    Ok(())
}

/// An extra response header: the name an HTTP token of letters, digits, `-` and `_`; the value
/// printable, without the characters that end or expand an nginx string (`"`, `\`, `$`), and
/// at most [`MAX_HEADER_VALUE_LEN`] bytes.
pub fn header(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 256 {
        return Err("header names are 1 to 256 characters".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
    {
        return Err(format!(
            "the header name contains {c:?}; use letters, digits, '-' and '_'"
        ));
    }
    // Printable ASCII without those three is fine; only other values are read by character.
    let plain = value.bytes().fold(true, |ok, b| {
        ok & (b' '..=b'~').contains(&b) & !matches!(b, b'"' | b'\\' | b'$')
    });
    let unsafe_char = if plain {
        None
    } else {
        value
            .chars()
            .find(|c| c.is_control() || matches!(c, '"' | '\\' | '$'))
    };
    if let Some(c) = unsafe_char {
        return Err(format!(
            "the value contains {c:?}, which could inject nginx directives (control characters, '\"', '\\' and '$' are not allowed)"
        ));
    }
    if value.len() > MAX_HEADER_VALUE_LEN {
        return Err(format!(
            "the value must be at most {MAX_HEADER_VALUE_LEN} bytes (is {})",
            value.len()
        ));
    }
    Ok(())
}

/// A route path: absolute, nothing that could break out of an nginx directive, nothing the API
/// server refuses in a route (too long, `//`, dot segments, encoded `/`).
pub fn route_path(path: &str) -> Result<(), String> {
    let unsafe_byte = |b: u8| !(b'!'..=b'~').contains(&b) || b";{}\"'\\$#".contains(&b);
    // Only a path with a byte that is not printable ASCII, or one of those, is read by
    // character; only one with `/.`, `//` or `%` is searched for the sequences below.
    let plain = !path.bytes().any(unsafe_byte);
    let unsafe_char = if plain {
        None
    } else {
        path.chars().find(|c| {
            c.is_whitespace()
                || c.is_control()
                || matches!(c, ';' | '{' | '}' | '"' | '\'' | '\\' | '$' | '#')
        })
    };
    let plain_segments = !path.contains('%')
        && !path
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'/' && matches!(w[1], b'/' | b'.'));
    if !path.starts_with('/') {
        return Err(format!("{path:?} must start with '/'"));
    }
    if let Some(c) = unsafe_char {
        return Err(format!(
            "{path:?} contains {c:?}, which is not allowed in a route path"
        ));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(format!(
            "must be at most {MAX_PATH_LEN} characters (is {})",
            path.len()
        ));
    }
    if plain_segments {
        return Ok(());
    }
    if let Some(seq) = INVALID_PATH_SEQUENCES.iter().find(|s| path.contains(**s)) {
        return Err(format!(
            "{path:?} contains {seq:?}, which is not allowed in a route path"
        ));
    }
    if let Some(suffix) = INVALID_PATH_SUFFIXES.iter().find(|s| path.ends_with(**s)) {
        return Err(format!(
            "{path:?} ends with {suffix:?}, which is not allowed in a route path"
        ));
    }
    Ok(())
}

/// A path an HTTPRoute can match (gateway mode): only the characters of RFC 3986 path segments,
/// `%` only as the start of a `%XX` escape.
pub fn gateway_route_path(path: &str) -> Result<(), String> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes[i] == b'%'
            && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if escape {
            i += 3;
            continue;
        }
        if !(bytes[i].is_ascii_alphanumeric() || b"-/._~!$&'()*+,;=:@".contains(&bytes[i])) {
            let c = path[i..].chars().next().unwrap_or_default();
            return Err(format!(
                "{path:?} contains {c:?}, which an HTTPRoute path cannot hold (use a %XX escape)"
            ));
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
