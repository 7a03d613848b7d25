//! The site's volume claim, StatefulSet and Service (LIFE-01 steps 4 to 6).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource, EnvVar,
    EnvVarSource, HTTPGetAction, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SecretKeySelector, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Error;
use crate::config::PlatformConfig;
use crate::crd::{OPERATOR_BOUND_ANNOTATION, Site};
use crate::labels;
use crate::quantity;
use crate::render::apps::{MIRROR_CONTAINER, Readiness, ResolvedApp};
use crate::render::configmap::{DATA_MOUNT, FILES_MOUNT};
use crate::render::secret::{API_TOKEN_KEY, COOKIE_SECRET_KEY, SECRET_KEY_KEY};
use crate::restart::Qualifying;

/// Annotation of a claim the operator pinned to a retained volume.
pub const PINNED_VOLUME_ANNOTATION: &str = "sites.ecmwf.int/pinned-volume";
/// The pod-template annotation whose change rolls the pods (what `kubectl rollout restart` sets).
pub const RESTARTED_AT_ANNOTATION: &str = "kubectl.kubernetes.io/restartedAt";

/// The storage request of the claim: the quota (or the platform default) for a new claim; for an
/// existing claim the stored request, grown to the quota only when the platform supports volume
/// expansion. A claim never shrinks.
pub fn storage_request(site: &Site, cfg: &PlatformConfig, existing: Option<&str>) -> String {
    let desired = match &site.spec.configuration.quota {
        Some(q) => q.0.clone(),
        None => cfg.sites.kubernetes.default_quota.clone(),
    };
    let Some(current) = existing else {
        return desired;
    };
    let grows = match (quantity::parse(&desired), quantity::parse(current)) {
        (Ok(d), Ok(c)) => d > c,
        _ => false,
    };
    if grows && cfg.sites.kubernetes.storage_expansion_supported {
        desired
    } else {
        current.to_string()
    }
}

/// PVC `<id>`: ReadWriteOnce, storage class from the configuration, storage per
/// [`storage_request`]. `retained_volume` pins `volumeName` to a retained volume the caller
/// found (the controller's retained-volume lookup, `controller/volumes.rs`); the pin is kept on later renderings
/// (annotation [`PINNED_VOLUME_ANNOTATION`]); an existing claim keeps its storage class.
pub fn pvc(
    site: &Site,
    cfg: &PlatformConfig,
    retained_volume: Option<&str>,
    existing: Option<&PersistentVolumeClaim>,
) -> Result<PersistentVolumeClaim, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let stored = existing.and_then(|c| c.spec.as_ref());
    let stored_request = stored
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.as_str());
    let storage = storage_request(site, cfg, stored_request);
    // Only what the operator decides goes into the desired claim, so the binder's and the API
    // server's fields (the bound volume, a default class) never look like a difference. A volume
    // the operator pinned is remembered in an annotation and stays in every later rendering.
    let pinned = retained_volume.map(str::to_string).or_else(|| {
        existing
            .and_then(|c| c.metadata.annotations.as_ref())
            .and_then(|a| a.get(PINNED_VOLUME_ANNOTATION).cloned())
    });
    let class = cfg.sites.kubernetes.storage_class.clone();
    let storage_class_name = match stored.map(|s| s.storage_class_name.clone()) {
        // The class of an existing claim cannot change: keep it when the configuration moved on.
        Some(current @ Some(_)) if class.is_some() && current != class => current,
        _ => class,
    };
    let spec = PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        storage_class_name,
        volume_name: pinned.clone(),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".into(), Quantity(storage))])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut metadata = labels::object_meta(site, id)?;
    if let Some(volume) = pinned {
        metadata.annotations = Some(BTreeMap::from([(
            PINNED_VOLUME_ANNOTATION.to_string(),
            volume,
        )]));
    }
    Ok(PersistentVolumeClaim {
        metadata,
        spec: Some(spec),
        ..Default::default()
    })
}

/// Resource requirements of site containers: the platform defaults, with the Site's
/// `resource_limits` replacing the default limits; a request above its limit is lowered to it.
pub fn resources(site: &Site, cfg: &PlatformConfig) -> ResourceRequirements {
    let defaults = &cfg.sites.kubernetes.resources;
    let site_limits = site.spec.configuration.settings.resource_limits.as_ref();
    let mut limits = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for (name, default_limit, default_request, site_limit) in [
        (
            "cpu",
            defaults.limits.cpu.as_ref(),
            defaults.requests.cpu.as_ref(),
            site_limits.and_then(|l| l.cpu.as_ref()),
        ),
        (
            "memory",
            defaults.limits.memory.as_ref(),
            defaults.requests.memory.as_ref(),
            site_limits.and_then(|l| l.memory.as_ref()),
        ),
    ] {
        let limit = site_limit
            .map(|q| q.0.clone())
            .or_else(|| default_limit.cloned());
        let mut request = default_request.cloned();
        if let (Some(l), Some(r)) = (&limit, &request)
            && let (Ok(lq), Ok(rq)) = (quantity::parse(l), quantity::parse(r))
            && rq > lq
        {
            request = Some(l.clone());
        }
        if let Some(l) = limit {
            limits.insert(name.to_string(), Quantity(l));
        }
        if let Some(r) = request {
            requests.insert(name.to_string(), Quantity(r));
        }
    }
    ResourceRequirements {
        limits: Some(limits).filter(|m| !m.is_empty()),
        requests: Some(requests).filter(|m| !m.is_empty()),
        ..Default::default()
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mounts() -> Vec<VolumeMount> {
    vec![
        VolumeMount {
            name: "data".into(),
            mount_path: DATA_MOUNT.into(),
            ..Default::default()
        },
        VolumeMount {
            name: "files".into(),
            mount_path: FILES_MOUNT.into(),
            read_only: Some(true),
            ..Default::default()
        },
    ]
}

fn env_from(id: &str) -> Vec<EnvFromSource> {
    vec![EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: id.into(),
            optional: None,
        }),
        ..Default::default()
    }]
}

/// One container per application. Built-in (platform) applications also get the site tokens
/// and the OAuth2 cookie secret; custom applications get only the site environment and their
/// own variables.
fn container(id: &str, app: &ResolvedApp<'_>, resources: &ResourceRequirements) -> Container {
    let mut env = Vec::new();
    if app.builtin.is_some() {
        env.push(secret_env("SITE_API_TOKEN", id, API_TOKEN_KEY));
        env.push(secret_env("SITE_SECRET_KEY", id, SECRET_KEY_KEY));
        env.push(secret_env(
            "OAUTH2_PROXY_COOKIE_SECRET",
            &labels::oauth2_secret_name(id),
            COOKIE_SECRET_KEY,
        ));
    }
    env.extend(app.spec.env.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        ..Default::default()
    }));
    let probe = match &app.readiness {
        Readiness::Http(path) => Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.to_string()),
                port: IntOrString::Int(app.port),
                ..Default::default()
            }),
            ..Default::default()
        },
        Readiness::Tcp => Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(app.port),
                host: None,
            }),
            ..Default::default()
        },
    };
    Container {
        name: app.spec.name.clone(),
        image: Some(app.image().into_owned()),
        ports: Some(vec![ContainerPort {
            container_port: app.port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(env).filter(|e| !e.is_empty()),
        env_from: Some(env_from(id)),
        volume_mounts: Some(mounts()),
        resources: Some(resources.clone()),
        readiness_probe: Some(probe),
        ..Default::default()
    }
}

/// What the StatefulSet's pod template records besides the Site: the qualifying-change state
/// ([`crate::restart::decide`]) and the `restartedAt` value (set by the reconciler from its clock
/// when the decision says restart, else carried over from the stored StatefulSet).
#[derive(Clone, Debug, PartialEq)]
pub struct PodTemplateInputs<'a> {
    pub state: &'a Qualifying,
    pub restarted_at: Option<&'a str>,
}

/// StatefulSet `<id>`: replicas = `settings.replicas` when enabled, 0 when disabled (LIFE-04);
/// priority class by `monitored`; the pod template carries the id label, the operator_bound
/// annotation and the qualifying-change state; one container per application plus `site-mirror`
/// when migration is enabled and the Site does not list it itself.
pub fn statefulset(
    site: &Site,
    cfg: &PlatformConfig,
    apps: &[ResolvedApp<'_>],
    inputs: &PodTemplateInputs<'_>,
) -> Result<StatefulSet, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let c = &site.spec.configuration;
    let replicas = if c.enabled { c.settings.replicas } else { 0 };
    let resources = resources(site, cfg);
    let mut containers: Vec<Container> =
        apps.iter().map(|a| container(id, a, &resources)).collect();
    let migration = &cfg.sites.migration;
    if migration.enabled && !apps.iter().any(|a| a.spec.name == MIRROR_CONTAINER) {
        let image = migration.image.clone().ok_or(Error::MissingConfig {
            key: "sitesConfig.migration.image",
        })?;
        containers.push(Container {
            name: MIRROR_CONTAINER.into(),
            image: Some(image),
            env_from: Some(env_from(id)),
            volume_mounts: Some(mounts()),
            resources: Some(resources.clone()),
            ..Default::default()
        });
    }
    let mut annotations = inputs.state.annotations();
    annotations.insert(OPERATOR_BOUND_ANNOTATION.into(), "true".into());
    if let Some(at) = inputs.restarted_at {
        annotations.insert(RESTARTED_AT_ANNOTATION.into(), at.to_string());
    }
    let priority = if c.settings.monitored {
        &cfg.sites.kubernetes.priority_classes.monitored
    } else {
        &cfg.sites.kubernetes.priority_classes.default
    };
    let pod = PodSpec {
        containers,
        priority_class_name: Some(priority.clone()),
        enable_service_links: Some(false),
        automount_service_account_token: Some(false),
        volumes: Some(vec![
            Volume {
                name: "data".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: id.into(),
                    read_only: None,
                }),
                ..Default::default()
            },
            Volume {
                name: "files".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: labels::files_configmap_name(id),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels::labels(id)),
            annotations: Some(annotations),
            ..Default::default()
        }),
        spec: Some(pod),
    };
    let mut metadata = labels::object_meta(site, id)?;
    metadata.annotations.get_or_insert_default().insert(
        labels::TEMPLATE_HASH_ANNOTATION.into(),
        template_hash(&template),
    );
    Ok(StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(id.into()),
            selector: LabelSelector {
                match_labels: Some(labels::selector(id)),
                ..Default::default()
            },
            template,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The [`labels::TEMPLATE_HASH_ANNOTATION`] of a rendered pod template: 16 hex digits of its SHA-256.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let value = serde_json::to_value(template).unwrap_or_default();
    crate::digest::json_sha256_hex(&value)[..16].to_string()
}

/// The name of the Service port of an application port.
pub fn service_port_name(port: i32) -> String {
    format!("http-{port}")
}

/// Service `<id>`: ClusterIP in front of the site pods, one port per application,
/// `sessionAffinity: ClientIP`, `publishNotReadyAddresses: true` (RTG-13: a pod whose custom
/// application is not ready still serves the rest of the site).
pub fn service(site: &Site, apps: &[ResolvedApp<'_>]) -> Result<Service, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let mut ports: Vec<ServicePort> = apps
        .iter()
        .map(|a| ServicePort {
            name: Some(service_port_name(a.port)),
            port: a.port,
            target_port: Some(IntOrString::Int(a.port)),
            protocol: Some("TCP".into()),
            ..Default::default()
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    Ok(Service {
        metadata: labels::object_meta(site, id)?,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(labels::selector(id)),
            ports: Some(ports),
            session_affinity: Some("ClientIP".into()),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    })
}
