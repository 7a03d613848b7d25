//! The Site admission rules (SPEC section 5) as pure functions: every violation is collected,
//! each with its field path, so one denial lists them all.

use std::collections::BTreeMap;

use crate::config::{PlatformConfig, RoutingMode};
use crate::crd::{MAX_SITE_ID_LEN, Site};
use crate::quantity;
use crate::render::{apps, configmap, route, workload};
use crate::validation;

/// The denial for per-site routing settings.
pub const ROUTING_IS_PLATFORM_WIDE: &str =
    "routing is platform-wide; use the top-level routing values";

/// One violated rule: the field path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[derive(Default)]
struct Violations(Vec<Violation>);

impl Violations {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Violation {
            field: field.into(),
            message: message.into(),
        });
    }

    fn check(&mut self, field: impl Into<String>, result: Result<(), String>) {
        if let Err(m) = result {
            self.add(field, m);
        }
    }

    /// Records a renderer error (which already names its field) as a violation. The field is
    /// taken from the error, not parsed from its text: a quoted map key may itself hold ": ".
    fn error(&mut self, e: crate::Error) {
        match e {
            crate::Error::UnsafeValue { field, reason }
            | crate::Error::InvalidSpec { field, reason } => self.add(field, reason),
            other => {
                let text = other.to_string();
                match text.split_once(": ") {
                    Some((field, message)) => self.add(field, message),
                    None => self.add("spec", text),
                }
            }
        }
    }
}

/// Checks `YYYY-MM-DD` and that the day exists.
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

/// Every rule a Site must satisfy. `old` is the stored object on UPDATE (quota never decreases).
pub fn site_violations(site: &Site, old: Option<&Site>, cfg: &PlatformConfig) -> Vec<Violation> {
    let mut v = Violations::default();
    let meta = &site.metadata;
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => v.check(
            "metadata.name",
            validation::dns1035_label(name, MAX_SITE_ID_LEN),
        ),
        (_, Some(prefix)) => {
            // The API server appends 5 random characters.
            let sample = format!("{prefix}abcde");
            v.check(
                "metadata.generateName",
                validation::dns1035_label(&sample, MAX_SITE_ID_LEN),
            );
        }
        _ => v.add("metadata.name", "required"),
    }
    let spec = &site.spec;
    let c = &spec.configuration;
    v.check("spec.name", validation::dns1123_label(&spec.name));
    v.check(
        "spec.configuration.space",
        validation::dns1123_label(&c.space),
    );
    for (field, value) in [("spec.owner", &spec.owner), ("spec.type", &spec.site_type)] {
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

    // Applications.
    if c.applications.is_empty() {
        v.add(
            "spec.configuration.applications",
            "a site needs at least one application",
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ports: BTreeMap<i32, usize> = BTreeMap::new();
    for (i, app) in c.applications.iter().enumerate() {
        let field = |rest: &str| format!("spec.configuration.applications[{i}]{rest}");
        v.check(field(".name"), validation::dns1123_label(&app.name));
        if let Some(first) = names.insert(&app.name, i) {
            v.add(
                field(".name"),
                format!("{:?} is already used by applications[{first}]", app.name),
            );
            // The other rules would only repeat the duplicate.
            continue;
        }
        let entry = cfg.sites.applications.iter().find(|e| e.name == app.name);
        match (&app.image, entry) {
            (Some(image), _) => v.check(
                field(".image"),
                validation::image_reference(image).map(|_| ()),
            ),
            (None, None) => v.add(
                field(".image"),
                "required for a custom application (one not in the platform catalogue)",
            ),
            (None, Some(_)) => {}
        }
        if let Some(port) = app.port
            && !(1..=65535).contains(&port)
        {
            v.add(field(".port"), "must be between 1 and 65535");
        }
        let port = match (entry, app.port) {
            (Some(e), _) => i32::from(e.port),
            (None, Some(p)) => p,
            (None, None) => apps::CUSTOM_DEFAULT_PORT,
        };
        if (1..=65535).contains(&port)
            && let Some(first) = ports.insert(port, i)
        {
            v.add(
                field(".port"),
                format!("port {port} is already used by applications[{first}]"),
            );
        }
        for key in app.env.keys() {
            v.check(
                validation::map_field(&field(".env"), key),
                apps::env_name(key),
            );
        }
        for key in app.annotations.keys() {
            v.check(
                validation::map_field(&field(".annotations"), key),
                validation::qualified_name(key),
            );
        }
        for (j, p) in app.paths.iter().enumerate() {
            let path_field = field(&format!(".paths[{j}].path"));
            if let Err(e) = route::check_path(&path_field, &p.path) {
                v.error(e);
            } else if cfg.routing.mode == RoutingMode::Gateway
                && let Err(e) = route::check_gateway_path(&path_field, &p.path)
            {
                v.error(e);
            }
            let supported: &[&str] = match cfg.routing.mode {
                RoutingMode::Ingress => &["Prefix", "Exact", "ImplementationSpecific"],
                RoutingMode::Gateway => &["Prefix", "Exact"],
            };
            if !supported.contains(&p.path_type.as_str()) {
                v.add(
                    field(&format!(".paths[{j}].path_type")),
                    format!(
                        "{:?} is not supported in {} mode (use {})",
                        p.path_type,
                        cfg.routing.mode.as_str(),
                        supported.join(" or ")
                    ),
                );
            }
        }
    }

    // One HTTPRoute holds at most 16 rules (gateway mode); counted only when the rest converts.
    if cfg.routing.mode == RoutingMode::Gateway
        && let Ok(resolved) = apps::resolve(site, cfg)
        && let Ok(paths) = apps::route_paths(site, &resolved, "site")
        && let Ok(rules) = route::http_route_rules(&paths, !c.enabled, cfg.routing.scheme)
        && let Err(e) = route::check_rule_count(rules.len())
    {
        v.error(e);
    }

    // Headers, quantities, dates, settings.
    for (name, value) in &c.headers {
        if let Err(e) = configmap::check_header(name, value) {
            v.error(e);
        }
    }
    if let Some(q) = &c.quota {
        match workload::positive("spec.configuration.quota", &q.0) {
            Err(e) => v.error(e),
            Ok(new) => {
                let old_quota = old
                    .and_then(|o| o.spec.configuration.quota.as_ref())
                    .and_then(|q| quantity::parse(&q.0).ok());
                if let Some(previous) = old_quota
                    && new < previous
                {
                    let was = &old
                        .and_then(|o| o.spec.configuration.quota.clone())
                        .unwrap_or_default()
                        .0;
                    v.add(
                        "spec.configuration.quota",
                        format!(
                            "must not decrease (was {was}, now {}): volumes cannot shrink",
                            q.0
                        ),
                    );
                }
            }
        }
    } else if old.is_some_and(|o| o.spec.configuration.quota.is_some()) {
        v.add(
            "spec.configuration.quota",
            "must not be removed once set: volumes cannot shrink",
        );
    }
    if let Some(date) = &c.retention_date {
        v.check("spec.configuration.retention_date", iso_date(date));
    }
    if let Err(e) = configmap::error_handling(site) {
        v.error(e);
    }
    if c.settings.replicas < 0 {
        v.add(
            "spec.configuration.settings.replicas",
            "must not be negative",
        );
    }
    if let Some(limits) = &c.settings.resource_limits {
        let requests = &cfg.sites.kubernetes.resources.requests;
        for (name, limit, request) in [
            ("cpu", limits.cpu.as_ref(), requests.cpu.as_deref()),
            ("memory", limits.memory.as_ref(), requests.memory.as_deref()),
        ] {
            let Some(limit) = limit else { continue };
            let field = format!("spec.configuration.settings.resource_limits.{name}");
            match workload::positive(&field, &limit.0) {
                Err(e) => v.error(e),
                Ok(l) => {
                    if let Some(r) = request.and_then(|r| quantity::parse(r).ok().map(|q| (r, q)))
                        && l < r.1
                    {
                        v.add(
                            field,
                            format!("{} is below the platform's request of {}: limits must be at least the requests", limit.0, r.0),
                        );
                    }
                }
            }
        }
    }
    v.0
}
