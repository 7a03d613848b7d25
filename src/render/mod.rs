//! Pure rendering: every object a Site owns, as a function of the Site, the platform
//! configuration and the few facts the caller read from the cluster or generated ([`Inputs`]).
//! No I/O, no clock, no randomness: the same inputs always give the same objects. Rendering
//! takes a [`Valid`] Site only and trusts it: the rules live in [`crate::rules`].
//!
//! The objects, in the order the reconciler ensures them (LIFE-01): Secret `<id>`, Secret
//! `<id>-oauth2`, ConfigMaps `<id>` and `<id>-files`, PVC `<id>`, StatefulSet `<id>`, Service
//! `<id>`, and the route `<id>` of the active routing mode (none without a public path).

pub mod apps;
pub mod configmap;
pub mod route;
pub mod secret;
pub mod workload;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;

use crate::Result;
use crate::config::{PlatformConfig, RoutingMode};

use crate::policy::{self, PolicyFeature};
use crate::restart::Qualifying;
use crate::validation::Valid;

pub use secret::SiteTokens;
pub use workload::PodTemplateInputs;

/// What rendering needs besides the Site and the configuration. Its `Debug` output leaves out
/// the session key and the tokens.
#[derive(Clone)]
pub struct Inputs<'a> {
    /// Namespace the operator runs in (decides whether the HTTPRoute's parentRef names the
    /// Gateway's namespace).
    pub platform_namespace: &'a str,
    /// The public host: `routing.host`, or in ingress mode the master Ingress's host.
    pub public_host: Option<&'a str>,
    /// The platform session key (derives the OAuth2 cookie secret).
    pub session_key: &'a [u8],
    /// The site tokens: the stored ones, generated where missing.
    pub tokens: &'a SiteTokens,
    /// The stored claim, if any (its immutable fields and current size are kept).
    pub existing_claim: Option<&'a PersistentVolumeClaim>,
    /// A retained volume to pin a new claim to.
    pub retained_volume: Option<&'a str>,
    /// Qualifying-change state and `restartedAt` for the pod template.
    pub pod: PodTemplateInputs<'a>,
}

impl<'a> Inputs<'a> {
    /// Inputs for a site rendered for the first time: no stored claim, no retained volume, no
    /// restart.
    pub fn new(
        platform_namespace: &'a str,
        public_host: Option<&'a str>,
        session_key: &'a [u8],
        tokens: &'a SiteTokens,
        state: &'a Qualifying,
    ) -> Inputs<'a> {
        Inputs {
            platform_namespace,
            public_host,
            session_key,
            tokens,
            existing_claim: None,
            retained_volume: None,
            pod: PodTemplateInputs {
                state,
                restarted_at: None,
            },
        }
    }
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("platform_namespace", &self.platform_namespace)
            .field("public_host", &self.public_host)
            .field(
                "session_key",
                &format_args!("<{} bytes>", self.session_key.len()),
            )
            .field("tokens", &self.tokens)
            .field(
                "existing_claim",
                &self.existing_claim.map(|c| &c.metadata.name),
            )
            .field("retained_volume", &self.retained_volume)
            .field("pod", &self.pod)
            .finish()
    }
}

/// The route of the active routing mode.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    Ingress(Ingress),
    HttpRoute(HttpRoute),
}

/// Every object a Site owns, in creation order.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub secret: Secret,
    pub oauth2_secret: Secret,
    pub env_configmap: ConfigMap,
    pub files_configmap: ConfigMap,
    pub pvc: PersistentVolumeClaim,
    pub statefulset: StatefulSet,
    pub service: Service,
    /// None when the site has no public path.
    pub route: Option<Route>,
}

impl Rendered {
    /// The objects as JSON values, in creation order (for logs, snapshots and hashing).
    pub fn to_values(&self) -> Vec<serde_json::Value> {
        fn typed<K: serde::Serialize + k8s_openapi::Resource>(o: &K) -> serde_json::Value {
            let mut v = serde_json::to_value(o).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), K::API_VERSION.into());
                m.insert("kind".into(), K::KIND.into());
            }
            v
        }
        let mut out = vec![
            typed(&self.secret),
            typed(&self.oauth2_secret),
            typed(&self.env_configmap),
            typed(&self.files_configmap),
            typed(&self.pvc),
            typed(&self.statefulset),
            typed(&self.service),
        ];
        match &self.route {
            Some(Route::Ingress(i)) => out.push(typed(i)),
            // The gateway-api types carry apiVersion and kind themselves.
            Some(Route::HttpRoute(r)) => out.push(serde_json::to_value(r).unwrap_or_default()),
            None => {}
        }
        out
    }
}

/// Renders every object of a valid site ([`crate::rules::validate`]). What can still fail is
/// what the Site does not decide: the public host, configuration values, the Site's metadata.
pub fn render(site: Valid<'_>, cfg: &PlatformConfig, inputs: &Inputs<'_>) -> Result<Rendered> {
    let site = site.site();
    let (id, _) = crate::labels::id_and_namespace(site)?;
    let apps = apps::resolve(site, cfg);
    let host = configmap::public_host(inputs.public_host)?;
    let paths = apps::route_paths(site, &apps, id);
    let route = match (paths.is_empty(), cfg.routing.mode) {
        (true, _) => None,
        (false, RoutingMode::Ingress) => {
            Some(Route::Ingress(route::ingress(site, cfg, host, &paths)?))
        }
        (false, RoutingMode::Gateway) => Some(Route::HttpRoute(route::http_route(
            site,
            cfg,
            inputs.platform_namespace,
            host,
            &paths,
        )?)),
    };
    Ok(Rendered {
        secret: secret::site_secret(site, inputs.tokens)?,
        oauth2_secret: secret::oauth2_secret(site, inputs.session_key)?,
        env_configmap: configmap::env_configmap(site, cfg, Some(host))?,
        files_configmap: configmap::files_configmap(site, cfg, &apps, Some(host))?,
        pvc: workload::pvc(site, cfg, inputs.retained_volume, inputs.existing_claim)?,
        statefulset: workload::statefulset(site, cfg, &apps, &inputs.pod)?,
        service: workload::service(site, &apps)?,
        route,
    })
}

/// Warnings about a legal but suspicious Site: more than one replica in gateway mode when the
/// policy provider supplies no session affinity (requests of one client may reach different
/// pods).
pub fn warnings<S>(settings: &crate::crd::Settings<S>, cfg: &PlatformConfig) -> Vec<String> {
    let mut out = Vec::new();
    let replicas = settings.replicas;
    if cfg.routing.mode == RoutingMode::Gateway && replicas > 1 {
        let provider = &cfg.routing.gateway.policy_provider;
        let affinity =
            policy::provider(provider).is_some_and(|p| p.supports(PolicyFeature::SessionAffinity));
        if !affinity {
            out.push(format!(
                "spec.configuration.settings.replicas: {replicas} replicas in gateway mode without session affinity \
                 (policy provider {provider:?} does not supply it): requests of one client may reach different pods"
            ));
        }
    }
    out
}

/// The qualifying state recorded in a stored StatefulSet's pod template annotations, if any.
pub fn recorded_state(template: Option<&BTreeMap<String, String>>) -> Option<Qualifying> {
    template.and_then(Qualifying::from_annotations)
}

/// The pod template annotations of a StatefulSet.
pub fn template_annotations(sts: &StatefulSet) -> Option<&BTreeMap<String, String>> {
    sts.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()
}
