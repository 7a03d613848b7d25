//! `--self-signed`: for clusters without cert-manager. The webhook CA and serving certificate
//! live in a Secret in the operator's namespace, so every replica serves the same certificate;
//! the first replica creates it, the others read it. The CA is patched into the `caBundle` of the
//! webhook configurations so the API server trusts the server.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::UnixTime;
use serde_json::json;

use crate::certs::{self, Bundle, CA_FILE, CERT_FILE, KEY_FILE};

/// Validity of generated certificates.
pub const VALIDITY_DAYS: u32 = 365;
/// A stored certificate closer than this to its expiry is replaced.
const RENEW_BEFORE_SECS: u64 = 30 * 86_400;

/// Why self-signed set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfSignedError {
    #[error("{0}")]
    Certs(#[from] certs::CertError),
    #[error("Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("webhook configuration {name}: {source}")]
    Webhook {
        name: String,
        #[source]
        source: kube::Error,
    },
}

fn key(secret: &Secret, name: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(name)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The bundle a stored Secret holds, when it is complete, valid for `names` now and not about to
/// expire.
pub fn usable(secret: &Secret, names: &[String]) -> Option<Bundle> {
    let bundle = Bundle {
        ca_pem: key(secret, CA_FILE)?,
        cert_pem: key(secret, CERT_FILE)?,
        key_pem: key(secret, KEY_FILE)?,
    };
    let check = |at: UnixTime| {
        crate::tls::certified_key(
            CERT_FILE.as_ref(),
            bundle.cert_pem.as_bytes(),
            KEY_FILE.as_ref(),
            bundle.key_pem.as_bytes(),
            at,
        )
        .ok()
    };
    let ck = check(UnixTime::now())?;
    check(UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        UnixTime::now().as_secs() + RENEW_BEFORE_SECS,
    )))?;
    let (_, leaf) = x509_parser::parse_x509_certificate(ck.end_entity_cert().ok()?).ok()?;
    let sans = leaf.subject_alternative_name().ok()??;
    let covered: Vec<String> = sans
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                4 => Some(std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    names.iter().all(|n| covered.contains(n)).then_some(bundle)
}

fn secret_object(name: &str, namespace: &str, bundle: &Bundle) -> Secret {
    let data = BTreeMap::from([
        (
            CA_FILE.to_string(),
            ByteString(bundle.ca_pem.clone().into_bytes()),
        ),
        (
            CERT_FILE.to_string(),
            ByteString(bundle.cert_pem.clone().into_bytes()),
        ),
        (
            KEY_FILE.to_string(),
            ByteString(bundle.key_pem.clone().into_bytes()),
        ),
    ]);
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                crate::labels::MANAGED_BY.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The shared certificate and the CA bundle clients must trust.
#[derive(Debug)]
pub struct Ensured {
    pub bundle: Bundle,
    /// The bundle's CA, followed by the CA of the certificate it replaced (if any): replicas
    /// still serving the replaced certificate (they read the Secret at start) stay trusted until
    /// they restart, when the bundle is patched down to the new CA alone.
    pub trust_pem: String,
}

/// Returns the shared certificate: the stored one when usable, else a new one stored in the
/// Secret (created, or replaced when stale or not covering `names`). When another replica wins
/// the race, its certificate is used.
pub async fn ensure_certificate(
    client: &kube::Client,
    namespace: &str,
    secret_name: &str,
    names: &[String],
) -> Result<Ensured, SelfSignedError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_err = |source| SelfSignedError::Secret {
        namespace: namespace.into(),
        name: secret_name.into(),
        source,
    };
    for _ in 0..5 {
        let stored = api.get_opt(secret_name).await.map_err(secret_err)?;
        if let Some(bundle) = stored.as_ref().and_then(|s| usable(s, names)) {
            return Ok(Ensured {
                trust_pem: bundle.ca_pem.clone(),
                bundle,
            });
        }
        let previous_ca = stored.as_ref().and_then(|s| key(s, CA_FILE));
        let bundle = certs::generate(names, VALIDITY_DAYS)?;
        let mut object = secret_object(secret_name, namespace, &bundle);
        let written = match stored {
            None => api.create(&PostParams::default(), &object).await,
            Some(old) => {
                object.metadata.resource_version = old.metadata.resource_version;
                api.replace(secret_name, &PostParams::default(), &object)
                    .await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(
                    secret = secret_name,
                    "stored a new self-signed webhook certificate"
                );
                let mut trust_pem = bundle.ca_pem.clone();
                if let Some(old) = previous_ca.filter(|old| *old != bundle.ca_pem) {
                    if !trust_pem.ends_with('\n') {
                        trust_pem.push('\n');
                    }
                    trust_pem.push_str(&old);
                }
                return Ok(Ensured { bundle, trust_pem });
            }
            // Another replica wrote first: read what it stored.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(secret_err(e)),
        }
    }
    Err(secret_err(kube::Error::Api(Box::new(
        kube::core::Status::failure(
            "the Secret kept changing while it was being written",
            "Conflict",
        )
        .with_code(409),
    ))))
}

/// Patches `ca_pem` into the `caBundle` of every webhook of the named configurations (a missing
/// configuration is skipped with a warning: it may be installed later).
pub async fn patch_ca_bundles(
    client: &kube::Client,
    ca_pem: &str,
    mutating: &[String],
    validating: &[String],
) -> Result<(), SelfSignedError> {
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let bundle_json = serde_json::to_value(&bundle).unwrap_or_default();
    macro_rules! patch_all {
        ($kind:ty, $names:expr) => {
            let api: Api<$kind> = Api::all(client.clone());
            for name in $names {
                let err = |source| SelfSignedError::Webhook { name: name.clone(), source };
                let Some(config) = api.get_opt(name).await.map_err(err)? else {
                    tracing::warn!(configuration = %name, "webhook configuration not found; caBundle not set");
                    continue;
                };
                let hooks = config.webhooks.unwrap_or_default();
                let ops: Vec<serde_json::Value> = hooks
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.client_config.ca_bundle.as_ref() != Some(&bundle))
                    .map(|(i, _)| json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle_json}))
                    .collect();
                if ops.is_empty() {
                    continue;
                }
                let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
                    .expect("JSON patch operations built above");
                api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
                    .await
                    .map_err(err)?;
                tracing::info!(configuration = %name, "patched the webhook CA bundle");
            }
        };
    }
    patch_all!(MutatingWebhookConfiguration, mutating);
    patch_all!(ValidatingWebhookConfiguration, validating);
    Ok(())
}
