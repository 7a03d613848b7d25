//! `--self-signed`: for clusters without cert-manager. The webhook CA and serving certificate
//! live in a Secret in the operator's namespace, so every replica serves the same certificate;
//! the first replica creates it, the others read it. The CA is patched into the `caBundle` of the
//! webhook configurations so the API server trusts the server.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use rustls::pki_types::UnixTime;
use rustls::pki_types::pem::{PemObject as _, SectionKind};
use serde_json::json;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

use crate::certs::{self, Bundle, CA_FILE, CERT_FILE, KEY_FILE};
use crate::error::WriteError;
use crate::tls::RENEW_BEFORE;
use crate::write::Writer;

/// Validity of generated certificates (a stored one closer than [`RENEW_BEFORE`] to its expiry
/// is replaced).
pub const VALIDITY_DAYS: u32 = 365;

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
    /// A write of the Secret or of a webhook configuration: the error names it.
    #[error(transparent)]
    Write(#[from] WriteError),
}

fn key(secret: &Secret, name: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(name)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The bundle a stored Secret holds, when it is complete, its `ca.crt` is one CA certificate
/// and issued its `tls.crt`, the key matches, both certificates are valid now and for
/// [`RENEW_BEFORE`] more, the certificate is a TLS server's ([`serves_tls`]) and it covers
/// every one of `names`.
pub fn usable(secret: &Secret, names: &[String]) -> Option<Bundle> {
    let bundle = Bundle {
        ca_pem: key(secret, CA_FILE)?,
        cert_pem: key(secret, CERT_FILE)?,
        key_pem: key(secret, KEY_FILE)?,
    };
    let now = UnixTime::now();
    let renewal = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        now.as_secs() + RENEW_BEFORE.as_secs(),
    ));
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
    let ck = check(now)?;
    check(renewal)?;
    let (_, leaf) = x509_parser::parse_x509_certificate(ck.end_entity_cert().ok()?).ok()?;
    // `ca.crt` becomes the webhooks' `caBundle` as it is: one certificate, nothing else trusted.
    let sections = <(SectionKind, Vec<u8>)>::pem_slice_iter(bundle.ca_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let [(SectionKind::Certificate, ca_der)] = sections.as_slice() else {
        return None;
    };
    let (rest, ca) = x509_parser::parse_x509_certificate(ca_der).ok()?;
    (rest.is_empty()
        && serves_tls(&leaf)
        && issued_by(&leaf, &ca, &[now, renewal])
        && covers(&leaf, names))
    .then_some(bundle)
}

/// Whether `leaf` is fit to serve TLS, as the certificate [`certs::generate`] makes: an end
/// entity (no `basicConstraints` CA:TRUE), for server authentication (its extended key usage
/// names `serverAuth`), whose key may sign handshakes (its key usage includes
/// `digitalSignature`; every suite served is ECDHE) and not certificates (`keyCertSign`), with
/// every extension understood (one that does not parse, appears twice, or is critical and
/// unknown makes the certificate invalid, RFC 5280 4.2).
fn serves_tls(leaf: &X509Certificate<'_>) -> bool {
    let well_formed = leaf.extensions_map().is_ok()
        && leaf.extensions().iter().all(|e| {
            e.parsed_extension().error().is_none()
                && !(e.critical && e.parsed_extension().unsupported())
        });
    let Ok(Some(usage)) = leaf.key_usage() else {
        return false;
    };
    let Ok(Some(extended)) = leaf.extended_key_usage() else {
        return false;
    };
    let end_entity = match leaf.basic_constraints() {
        Ok(None) => true,
        Ok(Some(constraints)) => !constraints.value.ca,
        Err(_) => false,
    };
    well_formed
        && end_entity
        && usage.value.digital_signature()
        && !usage.value.key_cert_sign()
        && extended.value.server_auth
}

/// Whether `ca` issued `leaf`: a CA certificate valid at each of `at`, whose subject is the
/// leaf's issuer and whose key verifies the leaf's signature. The API server trusts the server
/// through `ca.crt` (the webhooks' `caBundle`): a `tls.crt` that another CA issued fails every
/// call.
fn issued_by(leaf: &X509Certificate<'_>, ca: &X509Certificate<'_>, at: &[UnixTime]) -> bool {
    let valid = |t: &UnixTime| {
        ASN1Time::from_timestamp(i64::try_from(t.as_secs()).unwrap_or(i64::MAX))
            .is_ok_and(|t| ca.validity().is_valid_at(t))
    };
    // A CA's key usage, when it has one, allows signing certificates (RFC 5280 4.2.1.3).
    let signs_certificates = match ca.key_usage() {
        Ok(None) => true,
        Ok(Some(usage)) => usage.value.key_cert_sign(),
        Err(_) => false,
    };
    ca.is_ca()
        && signs_certificates
        && at.iter().all(valid)
        && leaf.issuer().as_raw() == ca.subject().as_raw()
        && leaf.verify_signature(Some(ca.public_key())).is_ok()
}

/// Whether `leaf` names each of `names` in its subject alternative names: IP addresses of either
/// family as addresses (so `fd00::1` is `fd00:0::1`), DNS names without regard to case.
fn covers(leaf: &X509Certificate<'_>, names: &[String]) -> bool {
    let Ok(Some(sans)) = leaf.subject_alternative_name() else {
        return false;
    };
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &sans.value.general_names {
        match name {
            GeneralName::DNSName(d) => dns.push(*d),
            GeneralName::IPAddress(ip) => match *ip {
                [a, b, c, d] => ips.push(IpAddr::from([*a, *b, *c, *d])),
                bytes => {
                    if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
                        ips.push(IpAddr::from(v6));
                    }
                }
            },
            _ => {}
        }
    }
    names.iter().all(|n| match n.parse::<IpAddr>() {
        Ok(ip) => ips.contains(&ip),
        Err(_) => dns.iter().any(|d| d.eq_ignore_ascii_case(n)),
    })
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
        // A replacement is conditional on the version read: another replica's write since
        // is a 409, and its certificate is read again.
        let writer = Writer::new(api.clone());
        let written = match stored {
            None => writer.create_object(&object).await,
            Some(old) => {
                object.metadata.resource_version = old.metadata.resource_version;
                writer.replace_object(&object).await
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
            Err(e) if e.code() == Some(409) => continue,
            Err(e) => return Err(e.into()),
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
    macro_rules! patch_all {
        ($kind:ty, $names:expr) => {
            let api: Api<$kind> = Api::all(client.clone());
            let writer = Writer::new(api.clone());
            for name in $names {
                let err = |source| SelfSignedError::Webhook { name: name.clone(), source };
                let mut attempts = 0;
                loop {
                    let Some(config) = api.get_opt(name).await.map_err(err)? else {
                        tracing::warn!(configuration = %name, "webhook configuration not found; caBundle not set");
                        break;
                    };
                    let hooks: Vec<(&str, bool)> = config
                        .webhooks
                        .iter()
                        .flatten()
                        .map(|h| (h.name.as_str(), h.client_config.ca_bundle.as_ref() == Some(&bundle)))
                        .collect();
                    let Some(patch) = ca_bundle_patch(&hooks, &bundle) else {
                        break;
                    };
                    match writer.json_patch(name, patch).await {
                        Ok(_) => {
                            tracing::info!(configuration = %name, "patched the webhook CA bundle");
                            break;
                        }
                        // The webhooks changed since they were read (a failed `test`, 422), or
                        // the configuration went away or came back: read it again.
                        Err(e) if matches!(e.code(), Some(404 | 409 | 422)) && attempts < 5 => {
                            attempts += 1;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        };
    }
    patch_all!(MutatingWebhookConfiguration, mutating);
    patch_all!(ValidatingWebhookConfiguration, validating);
    Ok(())
}

/// The JSON patch that sets `bundle` as the `caBundle` of every webhook of `hooks` (their names,
/// in order, and whether they have it already) that lacks it (None: all have it). Each write
/// is held to the webhook judged: a `test` of its name at its index comes first, so a list
/// changed since it was read fails the patch instead of giving the bundle to another webhook.
fn ca_bundle_patch(hooks: &[(&str, bool)], bundle: &ByteString) -> Option<json_patch::Patch> {
    let value = serde_json::to_value(bundle).unwrap_or_default();
    let ops: Vec<serde_json::Value> = hooks
        .iter()
        .enumerate()
        .filter(|(_, (_, has))| !has)
        .flat_map(|(i, (name, _))| {
            [
                json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}),
                json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": value}),
            ]
        })
        .collect();
    if ops.is_empty() {
        return None;
    }
    Some(
        serde_json::from_value(serde_json::Value::Array(ops))
            .expect("JSON patch operations built above"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(ca: &Bundle, cert: &Bundle) -> Secret {
        let mut bundle = cert.clone();
        bundle.ca_pem = ca.ca_pem.clone();
        secret_object("tls", "sites", &bundle)
    }

    fn names(extra: &[&str]) -> Vec<String> {
        let mut names = certs::service_dns_names("sites-operator-webhook", "sites");
        names.extend(extra.iter().map(|n| n.to_string()));
        names
    }

    #[test]
    fn a_stored_certificate_is_kept_only_when_its_ca_issued_it() {
        let names = names(&[]);
        let one = certs::generate(&names, VALIDITY_DAYS).unwrap();
        let other = certs::generate(&names, VALIDITY_DAYS).unwrap();
        assert_eq!(usable(&stored(&one, &one), &names), Some(one.clone()));
        // The key matches, the names are covered, the dates are fine, and both CAs have the same
        // name (the leaf's issuer): only the signature tells that ca.crt did not issue tls.crt.
        assert_eq!(usable(&stored(&other, &one), &names), None);
        // Nor is the leaf its own CA.
        let mut leaf_as_ca = one.clone();
        leaf_as_ca.ca_pem = one.cert_pem.clone();
        assert_eq!(usable(&stored(&leaf_as_ca, &one), &names), None);
    }

    /// A certificate that the stored CA issued, with the right names and dates, is still
    /// replaced unless it is a TLS server's: a leaf for server authentication whose key signs
    /// handshakes, not certificates; and the CA is one certificate that may sign certificates.
    #[test]
    fn a_stored_certificate_is_kept_only_when_it_is_a_serving_leaf() {
        use rcgen::{
            BasicConstraints, CertificateParams, CustomExtension, ExtendedKeyUsagePurpose as Eku,
            IsCa, KeyUsagePurpose as Ku,
        };
        let names = names(&[]);
        let server = |p: &mut CertificateParams| p.extended_key_usages = vec![Eku::ServerAuth];
        type Adjust<'a> = &'a dyn Fn(&mut CertificateParams);
        let kept = |ca: Adjust<'_>, leaf: Adjust<'_>| {
            let b = certs::generate_with(&names, VALIDITY_DAYS, ca, leaf).unwrap();
            usable(&stored(&b, &b), &names).is_some()
        };
        let same: Adjust<'_> = &|_| {};
        // (case, CA, leaf, kept)
        let cases: [(&str, Adjust<'_>, Adjust<'_>, bool); 12] = [
            ("as generated", same, &server, true),
            (
                "CA:FALSE written out",
                same,
                &|p| {
                    server(p);
                    p.is_ca = IsCa::ExplicitNoCa;
                },
                true,
            ),
            (
                "for server and client authentication",
                same,
                &|p| p.extended_key_usages = vec![Eku::ClientAuth, Eku::ServerAuth],
                true,
            ),
            ("no extended key usage", same, same, false),
            (
                "client authentication only",
                same,
                &|p| p.extended_key_usages = vec![Eku::ClientAuth],
                false,
            ),
            (
                "a CA",
                same,
                &|p| {
                    server(p);
                    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                },
                false,
            ),
            (
                "a key that signs certificates",
                same,
                &|p| {
                    server(p);
                    p.key_usages.push(Ku::KeyCertSign);
                },
                false,
            ),
            (
                "no key usage",
                same,
                &|p| {
                    server(p);
                    p.key_usages.clear();
                },
                false,
            ),
            (
                "a key that only enciphers keys",
                same,
                &|p| {
                    server(p);
                    p.key_usages = vec![Ku::KeyEncipherment];
                },
                false,
            ),
            (
                "an unknown critical extension",
                same,
                &|p| {
                    server(p);
                    let mut e = CustomExtension::from_oid_content(
                        &[1, 3, 6, 1, 4, 1, 99999, 1],
                        vec![5, 0],
                    );
                    e.set_criticality(true);
                    p.custom_extensions.push(e);
                },
                false,
            ),
            (
                "an unknown extension, not critical",
                same,
                &|p| {
                    server(p);
                    p.custom_extensions.push(CustomExtension::from_oid_content(
                        &[1, 3, 6, 1, 4, 1, 99999, 1],
                        vec![5, 0],
                    ));
                },
                true,
            ),
            (
                "a CA whose key may not sign certificates",
                &|p| p.key_usages = vec![Ku::DigitalSignature],
                &server,
                false,
            ),
        ];
        for (case, ca, leaf, want) in cases {
            assert_eq!(kept(ca, leaf), want, "{case}");
        }

        // The key of another certificate.
        let one = certs::generate(&names, VALIDITY_DAYS).unwrap();
        let other = certs::generate(&names, VALIDITY_DAYS).unwrap();
        let mut mismatched = one.clone();
        mismatched.key_pem = other.key_pem.clone();
        assert_eq!(usable(&stored(&one, &mismatched), &names), None);
        // ca.crt is published as the caBundle: a second CA in it is not kept, nor anything but
        // certificates.
        let mut two_cas = one.clone();
        two_cas.ca_pem = format!("{}{}", one.ca_pem, other.ca_pem);
        assert_eq!(usable(&stored(&two_cas, &one), &names), None);
        let mut with_key = one.clone();
        with_key.ca_pem = format!("{}{}", one.ca_pem, one.key_pem);
        assert_eq!(usable(&stored(&with_key, &one), &names), None);
        assert_eq!(usable(&stored(&one, &one), &names), Some(one));
    }

    #[test]
    fn ip_address_names_of_both_families_are_recognised() {
        let wanted = names(&["10.0.0.1", "fd00::1", "2001:db8::a"]);
        let b = certs::generate(&wanted, VALIDITY_DAYS).unwrap();
        let secret = stored(&b, &b);
        assert_eq!(usable(&secret, &wanted), Some(b.clone()));
        // The same addresses written otherwise, and DNS names in another case.
        let respelled = vec![
            "SITES-OPERATOR-WEBHOOK.sites.svc".to_string(),
            "fd00:0:0::0001".to_string(),
            "2001:DB8::A".to_string(),
            "10.0.0.1".to_string(),
        ];
        assert_eq!(usable(&secret, &respelled), Some(b.clone()));
        // An address it does not name is missing, of either family.
        for missing in ["fd00::2", "10.0.0.2", "::ffff:10.0.0.1", "other.sites.svc"] {
            assert_eq!(
                usable(&secret, &names(&[missing])),
                None,
                "{missing} is not covered"
            );
        }
    }

    #[test]
    fn a_certificate_close_to_its_expiry_or_incomplete_is_not_kept() {
        let names = names(&[]);
        let days = u32::try_from(RENEW_BEFORE.as_secs() / 86_400).unwrap();
        let soon = certs::generate(&names, days).unwrap();
        assert_eq!(usable(&stored(&soon, &soon), &names), None);
        let later = certs::generate(&names, days + 2).unwrap();
        assert_eq!(usable(&stored(&later, &later), &names), Some(later.clone()));
        let mut secret = stored(&later, &later);
        secret.data.as_mut().unwrap().remove(CA_FILE);
        assert_eq!(usable(&secret, &names), None);
    }

    #[test]
    fn the_ca_bundle_goes_to_the_webhooks_judged_and_only_those_lacking_it() {
        let bundle = ByteString(b"CA".to_vec());
        assert!(ca_bundle_patch(&[("a", true), ("b", true)], &bundle).is_none());
        assert!(ca_bundle_patch(&[], &bundle).is_none());
        let patch = ca_bundle_patch(&[("a", true), ("b", false)], &bundle).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/webhooks/1/name", "value": "b"},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "Q0E="},
            ])
        );
        // Applied to a list changed since (a webhook inserted before it), the test fails.
        let mut changed = json!({"webhooks": [
            {"name": "a", "clientConfig": {}},
            {"name": "new", "clientConfig": {}},
            {"name": "b", "clientConfig": {}},
        ]});
        assert!(json_patch::patch(&mut changed, &patch).is_err());
        assert!(
            changed["webhooks"][1]["clientConfig"]
                .get("caBundle")
                .is_none()
        );
    }
}
