//! The platform configuration's model: every section and value of `config.yaml` as the
//! operator reads it, with its defaults. Reading and validating it is `config/mod.rs`'s.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::policy::PolicyFeature;

/// Routing mode: one for the whole platform.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RoutingMode {
    /// NGINX mergeable Ingress pair: one minion Ingress per site.
    #[default]
    Ingress,
    /// Gateway API: one HTTPRoute per site, attached to one Gateway.
    Gateway,
}

impl RoutingMode {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RoutingMode::Ingress => "ingress",
            RoutingMode::Gateway => "gateway",
        }
    }
}

/// Scheme used in redirect URLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheme {
    Http,
    #[default]
    Https,
}

impl Scheme {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The whole platform configuration, with defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformConfig {
    /// `routing.*`
    pub routing: Routing,
    /// `sitesConfig.*`
    pub sites: SitesConfig,
}

/// `routing.*`: how sites are reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// `routing.mode`: `ingress` (default) or `gateway`.
    pub mode: RoutingMode,
    /// `routing.host`: public host of all sites (and of the Hub unless `hubHost` is set).
    pub host: Option<String>,
    /// `routing.hubHost`: separate public host of the Hub; must differ from `host`.
    pub hub_host: Option<String>,
    /// `routing.scheme`: scheme of redirect URLs, `http` or `https` (default).
    pub scheme: Scheme,
    /// `routing.hsts`: add Strict-Transport-Security (default true).
    pub hsts: bool,
    /// `routing.tls.*`
    pub tls: Tls,
    /// `routing.ingress.*`
    pub ingress: IngressRouting,
    /// `routing.gateway.*`
    pub gateway: GatewayRouting,
}

/// `routing.tls.*`: certificate Secrets referenced (never created) by the platform routes.
#[derive(Clone, Debug, PartialEq)]
pub struct Tls {
    /// `routing.tls.enabled` (default true).
    pub enabled: bool,
    /// `routing.tls.secretName` (default `sites-tls`).
    pub secret_name: String,
    /// `routing.tls.hubSecretName`: certificate of `hubHost`; absent means `secretName`.
    pub hub_secret_name: Option<String>,
}

/// `routing.ingress.*`
#[derive(Clone, Debug, PartialEq)]
pub struct IngressRouting {
    /// `routing.ingress.className` (default `nginx`).
    pub class_name: String,
    /// `routing.ingress.hubAnnotations`: extra annotations on the master Ingress.
    pub hub_annotations: BTreeMap<String, String>,
    /// `routing.ingress.routeAnnotations`: extra annotations on every site Ingress.
    pub route_annotations: BTreeMap<String, String>,
}

/// `routing.gateway.*`
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayRouting {
    /// `routing.gateway.name`: the Gateway all HTTPRoutes attach to (default `sites-gateway`).
    pub name: Option<String>,
    /// `routing.gateway.namespace`: the Gateway's namespace; absent means the release namespace.
    pub namespace: Option<String>,
    /// `routing.gateway.listenerName`: sectionName of every HTTPRoute; absent means all listeners.
    pub listener_name: Option<String>,
    /// `routing.gateway.hubListenerName`: sectionName of the Hub host route.
    pub hub_listener_name: Option<String>,
    /// `routing.gateway.create`: the chart creates the Gateway.
    pub create: bool,
    /// `routing.gateway.className`: GatewayClass of a chart-created Gateway.
    pub class_name: Option<String>,
    /// `routing.gateway.annotations`: annotations of a chart-created Gateway.
    pub annotations: BTreeMap<String, String>,
    /// `routing.gateway.listeners`: raw listener list of a chart-created Gateway.
    pub listeners: Vec<Value>,
    /// `routing.gateway.httpRedirect`: HTTP to HTTPS redirect route (default true).
    pub http_redirect: bool,
    /// `routing.gateway.routeAnnotations`: extra annotations on every HTTPRoute.
    pub route_annotations: BTreeMap<String, String>,
    /// `routing.gateway.policyProvider` (default `none`).
    pub policy_provider: String,
    /// `routing.gateway.policies`: features the provider must supply.
    pub policies: Vec<PolicyFeature>,
    /// `routing.gateway.policyRbacRules`: extra operator Role rules for policy kinds.
    pub policy_rbac_rules: Vec<Value>,
}

/// `sitesConfig.*`: everything that is not routing.
#[derive(Clone, Debug, PartialEq)]
pub struct SitesConfig {
    /// `sitesConfig.version`: platform version; the tag of every built-in application image.
    pub version: String,
    /// `sitesConfig.applications`: the catalogue of built-in applications.
    pub applications: Vec<CatalogueApplication>,
    /// `sitesConfig.kubernetes.*`
    pub kubernetes: KubernetesSettings,
    /// `sitesConfig.operator.*`
    pub operator: OperatorSettings,
    /// `sitesConfig.migration.*`
    pub migration: Migration,
    /// `sitesConfig.session.*`
    pub session: Session,
    /// `sitesConfig.retention.*`
    pub retention: Retention,
    /// `sitesConfig.rollout.*`
    pub rollout: Rollout,
}

/// A built-in application of the platform catalogue.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogueApplication {
    /// Application name, as sites list it in `spec.configuration.applications[].name`.
    pub name: String,
    /// Image repository; the tag is the platform version.
    pub image: String,
    /// Container port (default 8080).
    pub port: u16,
    /// HTTP readiness probe path; absent means a TCP probe on the port.
    pub readiness_path: Option<String>,
}

/// `sitesConfig.kubernetes.*`
#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesSettings {
    /// `storage_class`: StorageClass of site volumes; absent means the cluster default.
    pub storage_class: Option<String>,
    /// `storage_expansion_supported`: whether site volumes may grow (default false).
    pub storage_expansion_supported: bool,
    /// `default_quota`: storage request of sites without a quota (default `1Gi`).
    pub default_quota: String,
    /// `priority_classes.default` / `.monitored` (defaults `low-priority` / `medium-priority`).
    pub priority_classes: PriorityClasses,
    /// `resources.requests` / `.limits`: default resources of site containers.
    pub resources: ContainerResources,
}

/// Priority classes of site pods.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityClasses {
    /// Priority class of ordinary sites.
    pub default: String,
    /// Priority class of monitored sites.
    pub monitored: String,
}

/// CPU and memory quantities.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuMemory {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

/// Default requests and limits of site containers.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerResources {
    pub requests: CpuMemory,
    pub limits: CpuMemory,
}

/// `sitesConfig.operator.*`
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorSettings {
    /// `worker_limit`: Sites reconciled in parallel (default 5, at least 1).
    pub worker_limit: u32,
    /// `dependency_log_level`: log level of the Kubernetes client and HTTP crates (default INFO).
    pub dependency_log_level: LogLevel,
}

/// A log level, spelled as in Python logging or tracing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogLevel {
    Trace,
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// Parses `TRACE`, `DEBUG`, `INFO`, `WARN`/`WARNING`, `ERROR`/`CRITICAL`, any case.
    pub fn parse(s: &str) -> Option<LogLevel> {
        Some(match s.to_ascii_lowercase().as_str() {
            "trace" => LogLevel::Trace,
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" | "warning" => LogLevel::Warn,
            "error" | "critical" => LogLevel::Error,
            _ => return None,
        })
    }

    /// The `tracing` directive spelling.
    pub fn as_directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// `sitesConfig.migration.*`: the `site-mirror` container.
#[derive(Clone, Debug, PartialEq)]
pub struct Migration {
    /// `enabled`: add a `site-mirror` container to every site (default false).
    pub enabled: bool,
    /// `image`: the site-mirror image reference; required when enabled.
    pub image: Option<String>,
}

/// `sitesConfig.session.*`
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// `secret_key`: where the platform session key lives (never the key itself).
    pub secret_key: SecretKeyRef,
}

/// A key of a Secret in the operator's namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct SecretKeyRef {
    /// `secret_name` (default `sites-session`).
    pub secret_name: String,
    /// `key` (default `secret_key`).
    pub key: String,
}

/// `sitesConfig.retention.*`
#[derive(Clone, Debug, PartialEq)]
pub struct Retention {
    /// `archive_after_days`: days after the retention date before a site is archived (default 0).
    pub archive_after_days: u32,
    /// `delete_after_days`: days after archiving before a site is deleted (default 90).
    pub delete_after_days: u32,
}

/// `sitesConfig.rollout.*`: the change budget of platform-wide rollouts (ROL-01, ROL-02).
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// `max_rolling`: how many Sites may be rolling at once when a platform change rolls pods
    /// (default 25%).
    pub max_rolling: MaxRolling,
    /// `progress_deadline_seconds`: a rolled Site not Available within this halts the rollout
    /// (default 600).
    pub progress_deadline_seconds: u32,
}

/// How many Sites may roll at once: a number, or a percentage of the Sites (rounded down, at
/// least one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxRolling {
    Sites(u32),
    Percent(u32),
}

impl MaxRolling {
    /// The number of Sites that may roll at once among `sites`.
    pub fn of(self, sites: usize) -> usize {
        match self {
            MaxRolling::Sites(n) => n as usize,
            MaxRolling::Percent(p) => (sites * p as usize / 100).max(1),
        }
    }

    /// A number (`5`) or a percentage (`"10%"`); None for anything else.
    pub fn parse(value: &Value) -> Option<MaxRolling> {
        match value {
            Value::Number(n) => Some(MaxRolling::Sites(u32::try_from(n.as_u64()?).ok()?)),
            Value::String(s) => {
                let digits = s.trim().strip_suffix('%')?;
                (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| digits.parse().ok().map(MaxRolling::Percent))
                    .flatten()
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for MaxRolling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxRolling::Sites(n) => write!(f, "{n}"),
            MaxRolling::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            max_rolling: MaxRolling::Percent(25),
            progress_deadline_seconds: 600,
        }
    }
}

impl Default for Routing {
    fn default() -> Self {
        Routing {
            mode: RoutingMode::Ingress,
            host: None,
            hub_host: None,
            scheme: Scheme::Https,
            hsts: true,
            tls: Tls {
                enabled: true,
                secret_name: "sites-tls".into(),
                hub_secret_name: None,
            },
            ingress: IngressRouting {
                class_name: "nginx".into(),
                hub_annotations: BTreeMap::new(),
                route_annotations: BTreeMap::new(),
            },
            gateway: GatewayRouting {
                name: Some("sites-gateway".into()),
                namespace: None,
                listener_name: None,
                hub_listener_name: None,
                create: false,
                class_name: None,
                annotations: BTreeMap::new(),
                listeners: Vec::new(),
                http_redirect: true,
                route_annotations: BTreeMap::new(),
                policy_provider: "none".into(),
                policies: Vec::new(),
                policy_rbac_rules: Vec::new(),
            },
        }
    }
}

impl Default for SitesConfig {
    fn default() -> Self {
        SitesConfig {
            version: String::new(),
            applications: Vec::new(),
            kubernetes: KubernetesSettings {
                storage_class: None,
                storage_expansion_supported: false,
                default_quota: "1Gi".into(),
                priority_classes: PriorityClasses {
                    default: "low-priority".into(),
                    monitored: "medium-priority".into(),
                },
                resources: ContainerResources {
                    requests: CpuMemory {
                        cpu: Some("10m".into()),
                        memory: Some("32Mi".into()),
                    },
                    limits: CpuMemory {
                        cpu: Some("1".into()),
                        memory: Some("512Mi".into()),
                    },
                },
            },
            operator: OperatorSettings {
                worker_limit: 5,
                dependency_log_level: LogLevel::Info,
            },
            migration: Migration {
                enabled: false,
                image: None,
            },
            session: Session {
                secret_key: SecretKeyRef {
                    secret_name: "sites-session".into(),
                    key: "secret_key".into(),
                },
            },
            retention: Retention {
                archive_after_days: 0,
                delete_after_days: 90,
            },
            rollout: Rollout::default(),
        }
    }
}

/// What the validator knows about the installation that the file itself cannot say.
#[derive(Clone, Debug, Default)]
pub struct Installation<'a> {
    /// Namespace the platform is installed in, when known (the Gateway namespace rule needs it).
    pub namespace: Option<&'a str>,
}
