//! The configuration in force, shared by the webhooks and the reconciler, and how a new version
//! of the `sites-config` ConfigMap replaces it (SPEC 4.6, "Live configuration").
//!
//! [`Live`] holds the configuration every request and every reconcile reads; it is replaced as a
//! whole, so a reconcile that took it once sees one configuration from start to end.
//! [`Follower`] decides, for each version of the ConfigMap the watch delivers, whether it
//! becomes the configuration in force: a valid one does; an invalid one (the validating webhook
//! bypassed or down) is refused and the last valid one stays. The side effects (the watch, the
//! logs, the gauge, the Events) are in `controller::configuration`.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::model::{Installation, PlatformConfig, RoutingMode};
use super::{CONFIGMAP_NAME, data_field, validate_configmap_data};
use crate::validation::FieldError;

/// The configuration in force. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Live(Arc<watch::Sender<Arc<PlatformConfig>>>);

impl Live {
    pub fn new(config: PlatformConfig) -> Live {
        Live::from(Arc::new(config))
    }

    /// The configuration in force now. Take it once per request or reconcile.
    pub fn get(&self) -> Arc<PlatformConfig> {
        self.0.borrow().clone()
    }

    /// Replaces the configuration; false (and nothing changes) when `config` is the one in force.
    pub fn replace(&self, config: PlatformConfig) -> bool {
        self.0.send_if_modified(|current| {
            if **current == config {
                false
            } else {
                *current = Arc::new(config);
                true
            }
        })
    }

    /// A receiver that is told of every replacement.
    pub fn changes(&self) -> watch::Receiver<Arc<PlatformConfig>> {
        self.0.subscribe()
    }
}

impl From<Arc<PlatformConfig>> for Live {
    fn from(config: Arc<PlatformConfig>) -> Live {
        Live(Arc::new(watch::Sender::new(config)))
    }
}

/// What one version of the ConfigMap did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid, and now in force; `changed` names what differs from the previous configuration.
    Applied { changed: Vec<&'static str> },
    /// Valid and equal to the configuration in force (a resync, an edit of comments or labels).
    Unchanged,
    /// Refused: the last valid configuration stays in force. `first` is false when exactly these
    /// problems were reported for the previous version already (each problem is reported once).
    Refused {
        problems: Vec<FieldError>,
        first: bool,
    },
}

impl Verdict {
    /// Whether the ConfigMap as it stands is in force (the `sites_config_valid` gauge).
    pub fn valid(&self) -> bool {
        !matches!(self, Verdict::Refused { .. })
    }
}

/// Turns versions of the ConfigMap into replacements of the [`Live`] configuration.
#[derive(Debug)]
pub struct Follower {
    live: Live,
    namespace: String,
    /// The problems last reported, while the ConfigMap is refused.
    refused: Option<Vec<FieldError>>,
}

impl Follower {
    pub fn new(live: Live, namespace: impl Into<String>) -> Follower {
        Follower {
            live,
            namespace: namespace.into(),
            refused: None,
        }
    }

    /// A version of the ConfigMap's data (None: the ConfigMap has no data).
    pub fn observe(&mut self, data: Option<&BTreeMap<String, String>>) -> Verdict {
        let ctx = Installation {
            namespace: Some(&self.namespace),
        };
        match validate_configmap_data(data, &ctx) {
            Ok(config) => {
                self.refused = None;
                let before = self.live.get();
                let changed = changes(&before, &config);
                if self.live.replace(config) {
                    Verdict::Applied { changed }
                } else {
                    Verdict::Unchanged
                }
            }
            Err(e) => self.refuse(e.into_problems(&data_field())),
        }
    }

    /// The ConfigMap was deleted (or is missing after a watch restart).
    pub fn removed(&mut self) -> Verdict {
        self.refuse(vec![FieldError::new(
            CONFIGMAP_NAME,
            format!(
                "the ConfigMap was deleted from namespace {}; the last valid configuration stays in force until it is created again",
                self.namespace
            ),
        )])
    }

    fn refuse(&mut self, problems: Vec<FieldError>) -> Verdict {
        let first = self.refused.as_ref() != Some(&problems);
        self.refused = Some(problems.clone());
        Verdict::Refused { problems, first }
    }
}

/// The parts of the configuration that differ, by key (for the log line of a change).
pub fn changes(old: &PlatformConfig, new: &PlatformConfig) -> Vec<&'static str> {
    let routing_without_mode = |c: &PlatformConfig| {
        let mut r = c.routing.clone();
        r.mode = RoutingMode::default();
        r
    };
    let (a, b) = (&old.sites, &new.sites);
    [
        ("routing.mode", old.routing.mode != new.routing.mode),
        (
            "routing",
            routing_without_mode(old) != routing_without_mode(new),
        ),
        ("sitesConfig.version", a.version != b.version),
        ("sitesConfig.applications", a.applications != b.applications),
        ("sitesConfig.kubernetes", a.kubernetes != b.kubernetes),
        ("sitesConfig.operator", a.operator != b.operator),
        ("sitesConfig.migration", a.migration != b.migration),
        ("sitesConfig.session", a.session != b.session),
        ("sitesConfig.retention", a.retention != b.retention),
        ("sitesConfig.rollout", a.rollout != b.rollout),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(key, _)| key)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn data(text: &str) -> BTreeMap<String, String> {
        [(super::super::CONFIGMAP_KEY.to_string(), text.to_string())].into()
    }

    #[test]
    fn versions_of_the_configmap_replace_the_configuration_or_are_refused_once() {
        let base = PlatformConfig::from_yaml(
            fixtures::CONFIG_YAML,
            "config.yaml",
            &Installation {
                namespace: Some("sites"),
            },
        )
        .unwrap();
        let live = Live::new(base.clone());
        let changes = live.changes();
        let mut follower = Follower::new(live.clone(), "sites");
        let raised = fixtures::CONFIG_YAML.replace(
            &format!("version: \"{}\"", base.sites.version),
            "version: \"9.9.9\"",
        );
        assert_ne!(
            raised,
            fixtures::CONFIG_YAML,
            "the fixture names its version"
        );
        let invalid = fixtures::CONFIG_YAML.replace("  mode: ingress ", "  mode: mesh ");
        assert_ne!(invalid, fixtures::CONFIG_YAML, "the fixture names its mode");

        // (version of the ConfigMap, verdict, version in force after it)
        let table: Vec<(Option<String>, Verdict, &str)> = vec![
            (
                Some(fixtures::CONFIG_YAML.to_string()),
                Verdict::Unchanged,
                base.sites.version.as_str(),
            ),
            (
                Some(raised.clone()),
                Verdict::Applied {
                    changed: vec!["sitesConfig.version"],
                },
                "9.9.9",
            ),
            (Some(raised.clone()), Verdict::Unchanged, "9.9.9"),
            (Some(invalid.clone()), refused(true), "9.9.9"),
            (Some(invalid.clone()), refused(false), "9.9.9"),
            (Some("a: [b".into()), refused(true), "9.9.9"),
            (None, refused(true), "9.9.9"),
            (Some(invalid.clone()), refused(true), "9.9.9"),
            (
                Some(fixtures::CONFIG_YAML.to_string()),
                Verdict::Applied {
                    changed: vec!["sitesConfig.version"],
                },
                base.sites.version.as_str(),
            ),
        ];
        for (i, (text, expected, version)) in table.into_iter().enumerate() {
            let verdict = follower.observe(text.map(|t| data(&t)).as_ref());
            match (&verdict, &expected) {
                (
                    Verdict::Refused { problems, first },
                    Verdict::Refused {
                        first: expected, ..
                    },
                ) => {
                    assert!(!problems.is_empty(), "row {i}");
                    assert_eq!(first, expected, "row {i}: {problems:?}");
                    assert!(!verdict.valid());
                }
                _ => assert_eq!(verdict, expected, "row {i}"),
            }
            assert_eq!(live.get().sites.version, version, "row {i}");
        }
        assert!(changes.has_changed().unwrap(), "receivers are told");

        let mut refused_problems = follower.removed();
        assert!(
            matches!(&refused_problems, Verdict::Refused { first: true, problems } if problems[0].message.contains("deleted"))
        );
        refused_problems = follower.removed();
        assert!(matches!(
            refused_problems,
            Verdict::Refused { first: false, .. }
        ));
    }

    fn refused(first: bool) -> Verdict {
        Verdict::Refused {
            problems: Vec::new(),
            first,
        }
    }

    #[test]
    fn changes_name_the_keys_that_differ() {
        let a = fixtures::config();
        let mut b = a.clone();
        assert!(changes(&a, &b).is_empty());
        b.routing.mode = RoutingMode::Gateway;
        b.sites.kubernetes.default_quota = "2Gi".into();
        assert_eq!(changes(&a, &b), ["routing.mode", "sitesConfig.kubernetes"]);
    }
}
