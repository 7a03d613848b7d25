//! Arbitrary bytes as a platform configuration: YAML parsing and validation as `check-config`
//! and the `sites-config` webhook do them. Nothing panics; a configuration that validates is
//! also usable: the example Sites are validated and rendered with it.

#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sites_operator::config::{self, Installation, PlatformConfig};
use sites_operator::crd::Site;
use sites_operator_fuzz::{NAMESPACE, as_stored, check_render};

/// The Sites of `manifests/examples/` (valid ones: a static site, a custom application, an
/// archived site).
static SITES: LazyLock<Vec<Site>> = LazyLock::new(|| {
    [
        include_str!("../../manifests/examples/site.yaml"),
        include_str!("../../manifests/examples/site-custom-app.yaml"),
        include_str!("../../manifests/examples/site-archived.yaml"),
    ]
    .into_iter()
    .map(|yaml| as_stored(serde_yaml_ng::from_str(yaml).expect("an example Site")))
    .collect()
});

/// Where inputs naming a ConfigMap are written for [`PlatformConfig::load`] (`check-config FILE`
/// also accepts a `sites-config` ConfigMap manifest), and removed again.
static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    std::env::temp_dir().join(format!("sites-fuzz-config-{}.yaml", std::process::id()))
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ctx = Installation {
        namespace: Some(NAMESPACE),
    };
    let parsed = PlatformConfig::from_yaml(text, "config.yaml", &ctx);
    if parsed.is_ok() {
        // The namespace only adds a rule: what validates with it validates without.
        let without = PlatformConfig::from_yaml(text, "config.yaml", &Installation::default());
        assert!(without.is_ok(), "valid only with a namespace: {without:?}");
    }

    let configmap = BTreeMap::from([(config::CONFIGMAP_KEY.to_string(), text.to_string())]);
    let from_configmap = config::validate_configmap_data(Some(&configmap), &ctx);
    assert_eq!(
        from_configmap.is_ok(),
        parsed.is_ok(),
        "the webhook and check-config disagree"
    );

    if text.contains("ConfigMap") {
        std::fs::write(&*FILE, data).expect("the temporary file is writable");
        let _ = PlatformConfig::load(&FILE, &ctx);
        let _ = std::fs::remove_file(&*FILE);
    }

    if let Ok(cfg) = parsed {
        for site in SITES.iter() {
            check_render(site, &cfg);
        }
    }
});
