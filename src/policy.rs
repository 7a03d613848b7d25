//! Gateway policy providers (RTG-04).
//!
//! Standard Gateway API resources do not cover controller features such as session affinity. A
//! policy provider turns the features the platform requires into controller-specific annotations
//! and objects. The registry is static: a provider is a Rust type compiled into the binary, and the
//! platform configuration names one. The only shipped provider is `none`, which supplies nothing,
//! so controller defaults apply.

use std::collections::BTreeMap;
use std::fmt;

use crate::crd::Site;

/// A controller feature a policy provider may supply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyFeature {
    /// Requests of one client reach the same site pod.
    SessionAffinity,
}

impl PolicyFeature {
    /// Every feature, in configuration spelling order.
    pub const ALL: &'static [PolicyFeature] = &[PolicyFeature::SessionAffinity];

    /// The name used in `routing.gateway.policies`.
    pub fn name(self) -> &'static str {
        match self {
            PolicyFeature::SessionAffinity => "session_affinity",
        }
    }

    /// Looks a feature up by its configuration name.
    pub fn from_name(name: &str) -> Option<PolicyFeature> {
        Self::ALL.iter().copied().find(|f| f.name() == name)
    }
}

impl fmt::Display for PolicyFeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy provider: the features it supplies and how it renders them for one site.
pub trait PolicyProvider: Sync {
    /// The name used in `routing.gateway.policyProvider`.
    fn name(&self) -> &'static str;
    /// Features this provider can supply.
    fn supported_features(&self) -> &'static [PolicyFeature];
    /// Whether the provider supplies `feature`.
    fn supports(&self, feature: PolicyFeature) -> bool {
        self.supported_features().contains(&feature)
    }
    /// Annotations the provider puts on the site's HTTPRoute (before
    /// `routing.gateway.routeAnnotations`, which win).
    fn route_annotations(&self, _site: &Site) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

/// The `none` provider: no annotations, no policy objects, controller defaults apply.
pub struct NoPolicies;

impl PolicyProvider for NoPolicies {
    fn name(&self) -> &'static str {
        "none"
    }
    fn supported_features(&self) -> &'static [PolicyFeature] {
        &[]
    }
}

static PROVIDERS: &[&dyn PolicyProvider] = &[&NoPolicies];

/// The registered providers.
pub fn providers() -> &'static [&'static dyn PolicyProvider] {
    PROVIDERS
}

/// Looks a provider up by name.
pub fn provider(name: &str) -> Option<&'static dyn PolicyProvider> {
    PROVIDERS.iter().copied().find(|p| p.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_the_only_shipped_provider_and_supplies_nothing() {
        let names: Vec<_> = providers().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["none"]);
        let none = provider("none").expect("none is registered");
        assert!(!none.supports(PolicyFeature::SessionAffinity));
        assert!(provider("envoy").is_none());
    }

    #[test]
    fn feature_names_round_trip() {
        for f in PolicyFeature::ALL {
            assert_eq!(PolicyFeature::from_name(f.name()), Some(*f));
        }
        assert_eq!(PolicyFeature::from_name("timeouts"), None);
    }
}
