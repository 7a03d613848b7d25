//! The platform configuration: the `config.yaml` key of the `sites-config` ConfigMap.
//!
//! It mirrors the platform chart values: `routing.*` (camelCase, one routing mode for the whole
//! platform) and `sitesConfig.*` (snake_case: platform version, application catalogue, storage,
//! operator settings, migration, session key, retention). One validator serves start-up,
//! `sites-operator check-config` and the validating webhook on the ConfigMap: it reads the whole
//! document and reports **every** problem at once, each naming its key, and for keys that moved,
//! the replacement (RTG-01, RTG-07).

pub mod live;
mod model;
mod reader;
mod rules;

pub use model::*;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::policy::PolicyFeature;
use crate::validation::{FieldError, FieldErrors};
use reader::{Moved, Section};

/// The key of the `sites-config` ConfigMap that holds the configuration.
pub const CONFIGMAP_KEY: &str = "config.yaml";
/// The name of the ConfigMap that holds the configuration.
pub const CONFIGMAP_NAME: &str = "sites-config";

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    /// The text is not YAML (or not one YAML document).
    #[error("{source_name} is not valid YAML: {reason}")]
    Syntax { source_name: String, reason: String },
    /// The document was read; these are all of its problems, each naming its dotted key path
    /// (`routing.gateway.name`, `sitesConfig.applications[1].port`).
    #[error("{}", crate::validation::join_all(.0))]
    Invalid(Vec<FieldError>),
}

impl ConfigError {
    /// The problems as field errors: a document that could not be read or parsed is one problem
    /// of `field` (where the text came from, e.g. `data["config.yaml"]`).
    pub fn into_problems(self, field: &str) -> Vec<FieldError> {
        match self {
            ConfigError::Invalid(problems) => problems,
            other => vec![FieldError::new(field, other.to_string())],
        }
    }
}

impl PlatformConfig {
    /// Parses and validates a configuration document.
    pub fn from_yaml(
        text: &str,
        source_name: &str,
        ctx: &Installation<'_>,
    ) -> Result<Self, ConfigError> {
        let doc = parse_yaml(text, source_name)?;
        Self::from_value(&doc, ctx)
    }

    /// Validates a parsed document: every problem is reported, not only the first.
    pub fn from_value(doc: &Value, ctx: &Installation<'_>) -> Result<Self, ConfigError> {
        let mut problems = FieldErrors::default();
        let config = read_document(doc, &mut problems);
        rules::check_all(&config, ctx, &mut problems);
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems.into_vec()))
        }
    }

    /// Reads and validates a file. `-` reads standard input. A file holding a `sites-config`
    /// ConfigMap manifest is accepted too: its `data["config.yaml"]` is validated.
    pub fn load(path: &Path, ctx: &Installation<'_>) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let bytes = if name == "-" {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
        } else {
            std::fs::read(path)
        }
        .map_err(|e| ConfigError::Read {
            path: name.clone(),
            reason: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Syntax {
            source_name: name.clone(),
            reason: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        let doc = parse_yaml(&text, &name)?;
        if is_configmap(&doc) {
            let data = doc.get("data").and_then(Value::as_object);
            let embedded = data.and_then(|d| d.get(CONFIGMAP_KEY));
            return match embedded {
                Some(Value::String(text)) => {
                    Self::from_yaml(text, &format!("{name} data[\"{CONFIGMAP_KEY}\"]"), ctx)
                }
                _ => Err(missing_configmap_key()),
            };
        }
        Self::from_value(&doc, ctx)
    }
}

/// Validates the data of a `sites-config` ConfigMap (the validating webhook's entry point).
pub fn validate_configmap_data(
    data: Option<&BTreeMap<String, String>>,
    ctx: &Installation<'_>,
) -> Result<PlatformConfig, ConfigError> {
    validate_configmap_text(
        data.and_then(|d| d.get(CONFIGMAP_KEY)).map(String::as_str),
        ctx,
    )
}

/// [`validate_configmap_data`] on the text under `config.yaml`, if any.
pub fn validate_configmap_text(
    text: Option<&str>,
    ctx: &Installation<'_>,
) -> Result<PlatformConfig, ConfigError> {
    match text {
        Some(text) => PlatformConfig::from_yaml(text, &data_field(), ctx),
        None => Err(missing_configmap_key()),
    }
}

/// The field of the ConfigMap that holds the configuration: `data["config.yaml"]`.
pub fn data_field() -> String {
    format!("data[\"{CONFIGMAP_KEY}\"]")
}

fn missing_configmap_key() -> ConfigError {
    ConfigError::Invalid(vec![FieldError::new(
        data_field(),
        "required: the ConfigMap must hold the configuration under this key",
    )])
}

fn is_configmap(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some("ConfigMap")
        && doc.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// Most bytes of configuration text: the shipped configuration is about 4 KiB. A bound on the
/// text, with [`MAX_VALUES`], bounds the memory parsing takes (the validating webhook parses
/// what any client sends): the YAML parser holds every event of the document at once, up to
/// ~160 bytes per byte of text.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Most values (scalars, lists and mappings, each use of a YAML alias counted again) in a
/// configuration document: the shipped one has about 300. Aliases make a document of a few
/// hundred bytes expand to millions of values ("billion laughs"); this refuses it early.
pub const MAX_VALUES: usize = 20_000;

/// Most bytes of text (scalars and keys) a configuration document builds, each use of a YAML
/// alias counted again: without aliases a document builds at most its own text
/// ([`MAX_TEXT_BYTES`]); a few aliases of a long scalar would build it again on every use.
pub const MAX_BUILT_BYTES: usize = 4 * MAX_TEXT_BYTES;

/// Parses one YAML document into a JSON value. Mapping keys must be strings. Refuses text over
/// [`MAX_TEXT_BYTES`], and documents of more than [`MAX_VALUES`] values or [`MAX_BUILT_BYTES`]
/// bytes of text, before building them.
fn parse_yaml(text: &str, source_name: &str) -> Result<Value, ConfigError> {
    let syntax = |reason: String| ConfigError::Syntax {
        source_name: source_name.to_string(),
        reason,
    };
    if text.len() > MAX_TEXT_BYTES {
        return Err(syntax(format!(
            "{} bytes: a configuration has at most {MAX_TEXT_BYTES} bytes",
            text.len()
        )));
    }
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let left = bounded::Left::new(MAX_VALUES, MAX_BUILT_BYTES);
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(bounded::Node(&left), de)
        .map_err(|e| syntax(one_line(&e.to_string())))
}

/// A JSON value built straight from a deserializer, counting the values and the bytes of text
/// it builds.
mod bounded {
    use std::cell::Cell;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    /// How many more values, and bytes of text, may be built.
    pub struct Left {
        values: Cell<usize>,
        bytes: Cell<usize>,
    }

    impl Left {
        pub fn new(values: usize, bytes: usize) -> Left {
            Left {
                values: Cell::new(values),
                bytes: Cell::new(bytes),
            }
        }

        /// Takes `n` bytes of text, before they are built.
        fn text<E: de::Error>(&self, n: usize) -> Result<(), E> {
            take(&self.bytes, n).ok_or_else(|| {
                E::custom(format_args!(
                    "more than {} bytes of text (each use of an alias counts): a configuration \
                     has less",
                    super::MAX_BUILT_BYTES
                ))
            })
        }

        /// Takes one value, before it is built.
        fn value<E: de::Error>(&self) -> Result<(), E> {
            take(&self.values, 1).ok_or_else(|| {
                E::custom(format_args!(
                    "more than {} values (each use of an alias counts): a configuration has fewer",
                    super::MAX_VALUES
                ))
            })
        }
    }

    /// Takes `n` from what `left` holds; None when it holds less.
    fn take(left: &Cell<usize>, n: usize) -> Option<()> {
        left.set(left.get().checked_sub(n)?);
        Some(())
    }

    /// Builds one value.
    pub struct Node<'c>(pub &'c Left);

    impl Node<'_> {
        fn count<E: de::Error>(&self) -> Result<(), E> {
            self.0.value()
        }
    }

    /// Builds a mapping key (a string), counting its bytes.
    struct Key<'c>(&'c Left);

    impl<'de> DeserializeSeed<'de> for Key<'_> {
        type Value = String;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key<'_> {
        type Value = String;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string key")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            self.0.text(v.len())?;
            Ok(v.to_owned())
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
            self.0.text(v.len())?;
            Ok(v)
        }
    }

    impl<'de> DeserializeSeed<'de> for Node<'_> {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Node<'_> {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a YAML value")
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
            self.count()?;
            Ok(Value::Bool(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
            self.count()?;
            Ok(v.into())
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
            self.count()?;
            Ok(v.into())
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            self.count()?;
            serde_json::Number::from_f64(v)
                .map(Value::Number)
                .ok_or_else(|| E::custom(format_args!("{v} is not a number JSON can hold")))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
            self.count()?;
            self.0.text(v.len())?;
            Ok(Value::String(v.to_owned()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            self.count()?;
            self.0.text(v.len())?;
            Ok(Value::String(v))
        }

        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            self.count()?;
            Ok(Value::Null)
        }

        fn visit_none<E: de::Error>(self) -> Result<Value, E> {
            self.visit_unit()
        }

        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            self.count()?;
            let mut out = Vec::new();
            while let Some(v) = seq.next_element_seed(Node(self.0))? {
                out.push(v);
            }
            Ok(Value::Array(out))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            self.count()?;
            let mut out = Map::new();
            while let Some(key) = map.next_key_seed(Key(self.0))? {
                let value = map.next_value_seed(Node(self.0))?;
                match out.entry(key) {
                    serde_json::map::Entry::Vacant(v) => {
                        v.insert(value);
                    }
                    serde_json::map::Entry::Occupied(o) => {
                        return Err(de::Error::custom(format_args!(
                            "duplicate entry with key {:?}",
                            o.key()
                        )));
                    }
                }
            }
            Ok(Value::Object(out))
        }

        /// A tagged value (`!tag value`): a mapping of the tag to the value, as YAML libraries
        /// represent it. Nothing is constructed from the tag.
        fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
            use de::VariantAccess;
            self.count()?;
            let (tag, variant) = data.variant_seed(Key(self.0))?;
            let value = variant.newtype_variant_seed(Node(self.0))?;
            let mut out = Map::new();
            out.insert(format!("!{tag}"), value);
            Ok(Value::Object(out))
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

const ROUTING_MOVED: &[Moved] = &[Moved {
    key: "hstsEnabled",
    message: "moved; use routing.hsts",
}];

const SITES_MOVED: &[Moved] = &[Moved {
    key: "routing",
    message: "not allowed: routing is platform-wide; use the top-level routing values",
}];

const KUBERNETES_MOVED: &[Moved] = &[
    Moved {
        key: "ingress_class_name",
        message: "moved; use routing.ingress.className",
    },
    Moved {
        key: "ingress_extra_annotations",
        message: "moved; use routing.ingress.routeAnnotations",
    },
];

/// Where the keys of the old top-level `ingress` block live now.
fn moved_ingress_key(key: &str) -> &'static str {
    match key {
        "className" | "class_name" | "ingressClassName" => "routing.ingress.className",
        "annotations" | "hubAnnotations" => "routing.ingress.hubAnnotations",
        "routeAnnotations" | "extraAnnotations" => "routing.ingress.routeAnnotations",
        "host" | "hosts" => "routing.host",
        "tls" => "routing.tls",
        "enabled" => "routing.mode",
        _ => "routing.ingress",
    }
}

fn read_document(doc: &Value, problems: &mut FieldErrors) -> PlatformConfig {
    let mut top = Section::new(String::new(), Some(doc), problems);
    // The old top-level `ingress` block: report each key with its new home.
    if let Some(old) = top.raw("ingress") {
        match old.as_object() {
            Some(map) if !map.is_empty() => {
                for key in map.keys() {
                    problems.add(
                        reader::child_path("ingress", key),
                        format!("moved; use {}", moved_ingress_key(key)),
                    );
                }
            }
            _ => problems.add("ingress", "moved; use routing.ingress"),
        }
    }
    let routing = read_routing(top.section("routing", problems), problems);
    let sites = read_sites(top.section("sitesConfig", problems), problems);
    top.finish(&[], problems);
    PlatformConfig { routing, sites }
}

fn read_routing(mut s: Section<'_>, problems: &mut FieldErrors) -> Routing {
    let mut r = Routing::default();
    if let Some(mode) = s.string("mode", problems) {
        match mode.as_str() {
            "ingress" => r.mode = RoutingMode::Ingress,
            "gateway" => r.mode = RoutingMode::Gateway,
            other => problems.add(
                "routing.mode",
                format!("unknown routing mode {other:?}; use ingress or gateway"),
            ),
        }
    }
    r.host = s.string("host", problems);
    r.hub_host = s.string("hubHost", problems);
    if let Some(scheme) = s.string("scheme", problems) {
        match scheme.as_str() {
            "http" => r.scheme = Scheme::Http,
            "https" => r.scheme = Scheme::Https,
            other => problems.add(
                "routing.scheme",
                format!("must be http or https, found {other:?}"),
            ),
        }
    }
    if let Some(hsts) = s.boolean("hsts", problems) {
        r.hsts = hsts;
    }

    let mut tls = s.section("tls", problems);
    if let Some(v) = tls.boolean("enabled", problems) {
        r.tls.enabled = v;
    }
    if let Some(v) = tls.string("secretName", problems) {
        r.tls.secret_name = v;
    }
    r.tls.hub_secret_name = tls.string("hubSecretName", problems);
    tls.finish(&[], problems);

    let mut ing = s.section("ingress", problems);
    if let Some(v) = ing.string_if_present("className", problems) {
        r.ingress.class_name = v.unwrap_or_default();
    }
    r.ingress.hub_annotations = ing.string_map("hubAnnotations", problems);
    r.ingress.route_annotations = ing.string_map("routeAnnotations", problems);
    ing.finish(&[], problems);

    let mut gw = s.section("gateway", problems);
    let g = &mut r.gateway;
    if let Some(v) = gw.string_if_present("name", problems) {
        g.name = v;
    }
    g.namespace = gw.string("namespace", problems);
    g.listener_name = gw.string("listenerName", problems);
    g.hub_listener_name = gw.string("hubListenerName", problems);
    if let Some(v) = gw.boolean("create", problems) {
        g.create = v;
    }
    g.class_name = gw.string("className", problems);
    g.annotations = gw.string_map("annotations", problems);
    for (path, item) in gw.list("listeners", problems) {
        if item.is_object() {
            g.listeners.push(item.clone());
        } else {
            problems.add(
                path,
                format!(
                    "must be a mapping (a Gateway listener), found {}",
                    reader::describe(item)
                ),
            );
        }
    }
    if let Some(v) = gw.boolean("httpRedirect", problems) {
        g.http_redirect = v;
    }
    g.route_annotations = gw.string_map("routeAnnotations", problems);
    if let Some(v) = gw.string("policyProvider", problems) {
        g.policy_provider = v;
    }
    for (path, name) in gw.string_list("policies", problems) {
        match PolicyFeature::from_name(&name) {
            Some(f) if !g.policies.contains(&f) => g.policies.push(f),
            Some(_) => problems.add(path, format!("duplicate policy feature {name:?}")),
            None => problems.add(
                path,
                format!(
                    "unknown policy feature {name:?}; known features: {}",
                    PolicyFeature::ALL
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    }
    for (path, item) in gw.list("policyRbacRules", problems) {
        if item.is_object() {
            g.policy_rbac_rules.push(item.clone());
        } else {
            problems.add(
                path,
                format!(
                    "must be a mapping (an RBAC policy rule), found {}",
                    reader::describe(item)
                ),
            );
        }
    }
    gw.finish(&[], problems);

    s.finish(ROUTING_MOVED, problems);
    r
}

fn read_sites(mut s: Section<'_>, problems: &mut FieldErrors) -> SitesConfig {
    let mut c = SitesConfig::default();
    match s.string("version", problems) {
        Some(v) => c.version = v,
        None => problems.add_once(
            "sitesConfig.version",
            "required: the platform version, used as the tag of built-in application images",
        ),
    }

    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (path, item) in s.list("applications", problems) {
        let mut app = Section::new(path, Some(item), problems);
        let name = app.string("name", problems);
        let image = app.string("image", problems);
        let port = app.uint("port", 65535, problems);
        let readiness_path = app.string("readiness_path", problems);
        let path = app.path.clone();
        app.finish(&[], problems);
        if name.is_none() {
            problems.add_once(format!("{path}.name"), "required");
        }
        if image.is_none() {
            problems.add_once(
                format!("{path}.image"),
                "required: the image repository (the tag is sitesConfig.version)",
            );
        }
        if port == Some(0) {
            problems.add(format!("{path}.port"), "must be between 1 and 65535");
        }
        let (Some(name), Some(image)) = (name, image) else {
            continue;
        };
        rules::catalogue_entry(problems, &path, &name, &image, readiness_path.as_deref());
        if let Some(first) = seen.get(&name) {
            problems.add_once(
                format!("{path}.name"),
                format!("duplicate application {name:?} (also at {first})"),
            );
        }
        seen.insert(name.clone(), path.clone());
        c.applications.push(CatalogueApplication {
            name,
            image,
            port: port.filter(|p| *p > 0).map_or(8080, |p| p as u16),
            readiness_path,
        });
    }

    let mut k = s.section("kubernetes", problems);
    let kc = &mut c.kubernetes;
    kc.storage_class = k.string("storage_class", problems);
    if let Some(v) = k.boolean("storage_expansion_supported", problems) {
        kc.storage_expansion_supported = v;
    }
    if let Some(v) = k.string("default_quota", problems) {
        kc.default_quota = v;
    }
    let mut pc = k.section("priority_classes", problems);
    if let Some(v) = pc.string("default", problems) {
        kc.priority_classes.default = v;
    }
    if let Some(v) = pc.string("monitored", problems) {
        kc.priority_classes.monitored = v;
    }
    pc.finish(&[], problems);
    let mut res = k.section("resources", problems);
    for (key, target) in [
        ("requests", &mut kc.resources.requests),
        ("limits", &mut kc.resources.limits),
    ] {
        let mut cm = res.section(key, problems);
        if let Some(v) = cm.string_if_present("cpu", problems) {
            target.cpu = v;
        }
        if let Some(v) = cm.string_if_present("memory", problems) {
            target.memory = v;
        }
        cm.finish(&[], problems);
    }
    res.finish(&[], problems);
    k.finish(KUBERNETES_MOVED, problems);

    let mut op = s.section("operator", problems);
    if let Some(v) = op.uint("worker_limit", 1024, problems) {
        c.operator.worker_limit = v as u32;
    }
    if let Some(v) = op.string("dependency_log_level", problems) {
        match LogLevel::parse(&v) {
            Some(level) => c.operator.dependency_log_level = level,
            None => problems.add(
                "sitesConfig.operator.dependency_log_level",
                format!("unknown log level {v:?}; use DEBUG, INFO, WARNING or ERROR"),
            ),
        }
    }
    op.finish(&[], problems);

    let mut mig = s.section("migration", problems);
    if let Some(v) = mig.boolean("enabled", problems) {
        c.migration.enabled = v;
    }
    c.migration.image = mig.string("image", problems);
    mig.finish(&[], problems);

    let mut session = s.section("session", problems);
    let mut key = session.section("secret_key", problems);
    if let Some(v) = key.string("secret_name", problems) {
        c.session.secret_key.secret_name = v;
    }
    if let Some(v) = key.string("key", problems) {
        c.session.secret_key.key = v;
    }
    key.finish(&[], problems);
    session.finish(&[], problems);

    let mut ret = s.section("retention", problems);
    if let Some(v) = ret.uint("archive_after_days", 36500, problems) {
        c.retention.archive_after_days = v as u32;
    }
    if let Some(v) = ret.uint("delete_after_days", 36500, problems) {
        c.retention.delete_after_days = v as u32;
    }
    ret.finish(&[], problems);

    let mut rollout = s.section("rollout", problems);
    let path = format!("{}.max_rolling", rollout.path);
    if let Some(v) = rollout.raw("max_rolling") {
        match MaxRolling::parse(v) {
            Some(max) => c.rollout.max_rolling = max,
            None => problems.add(
                path,
                format!(
                    "must be a number of Sites (5) or a percentage of them (\"10%\"), found {}",
                    reader::describe(v)
                ),
            ),
        }
    }
    if let Some(v) = rollout.uint("progress_deadline_seconds", 86400, problems) {
        c.rollout.progress_deadline_seconds = v as u32;
    }
    rollout.finish(&[], problems);

    s.finish(SITES_MOVED, problems);
    c
}

#[cfg(test)]
mod tests;
