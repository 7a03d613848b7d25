//! TLS for the webhook server: rustls (ring), TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, a
//! serving certificate read from files and **reloaded without restart**, and optional client
//! certificate verification.
//!
//! The [`CertStore`] re-reads the certificate and key files on an interval and swaps them in
//! when their bytes change (cert-manager rotates a mounted Secret by swapping a symlink, so the
//! content, not the mtime, is compared). New handshakes get the new certificate; established
//! connections keep theirs. Files that do not parse, a key that does not match the certificate,
//! or a certificate outside its validity period are refused: the old certificate keeps serving
//! and the error is logged.
//!
//! The served certificate's notAfter is exported as
//! `sites_webhook_certificate_expiry_timestamp_seconds` ([`CertStore::report_expiry`]), and a
//! certificate still served within [`RENEW_BEFORE`] of its expiry is warned about, once a day:
//! whatever should have renewed it (cert-manager, a restart with `--self-signed`) did not.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use prometheus::IntGauge;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

/// How long before its expiry a certificate is due for renewal: `--self-signed` replaces a stored
/// certificate this close to its expiry at start, and a certificate still served this close is
/// warned about (cert-manager renews a 90-day certificate 30 days before by default).
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);

/// How often a certificate served within [`RENEW_BEFORE`] of its expiry is warned about.
const EXPIRY_WARNING_EVERY: i64 = 86_400;

/// Why a certificate could not be (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn invalid(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Invalid {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Parses a PEM certificate chain and key into a [`CertifiedKey`], refusing a key that does not
/// match the certificate and a leaf certificate that is not valid at `now`.
pub fn certified_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    now: UnixTime,
) -> Result<CertifiedKey, TlsError> {
    checked_key(cert_path, cert_pem, key_path, key_pem, now).map(|(ck, _)| ck)
}

/// [`certified_key`], and the leaf certificate's notAfter in seconds since the Unix epoch.
fn checked_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    now: UnixTime,
) -> Result<(CertifiedKey, i64), TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert_path, format!("not a PEM certificate chain: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(cert_path, "no certificate found"));
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| invalid(key_path, format!("not a PEM private key: {e}")))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| invalid(cert_path, format!("not an X.509 certificate: {e}")))?;
    let validity = parsed.validity();
    let now_secs = now.as_secs() as i64;
    if now_secs < validity.not_before.timestamp() {
        return Err(invalid(
            cert_path,
            format!("not valid before {}", validity.not_before),
        ));
    }
    if now_secs > validity.not_after.timestamp() {
        return Err(invalid(
            cert_path,
            format!("expired on {}", validity.not_after),
        ));
    }
    let not_after = validity.not_after.timestamp();
    let ck = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        invalid(
            key_path,
            format!(
                "does not match the certificate in {}: {e}",
                cert_path.display()
            ),
        )
    })?;
    Ok((ck, not_after))
}

/// The serving certificate, reloadable from its files.
pub struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    loaded: Mutex<(Vec<u8>, Vec<u8>)>,
    /// The current certificate's notAfter, in seconds since the Unix epoch.
    not_after: AtomicI64,
    /// Set to [`CertStore::not_after`] whenever a certificate is loaded.
    expiry: OnceLock<IntGauge>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

/// The outcome of one reload check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The files did not change.
    Unchanged,
    /// New files were loaded and serve new handshakes.
    Replaced,
}

impl CertStore {
    /// Loads the certificate and key; fails when they are unreadable or invalid.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<CertStore>, TlsError> {
        let cert = read(cert_path)?;
        let key = read(key_path)?;
        let (ck, not_after) = checked_key(cert_path, &cert, key_path, &key, UnixTime::now())?;
        Ok(Arc::new(CertStore {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new(Arc::new(ck)),
            loaded: Mutex::new((cert, key)),
            not_after: AtomicI64::new(not_after),
            expiry: OnceLock::new(),
        }))
    }

    /// The current certificate's notAfter, in seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Acquire)
    }

    /// Sets `gauge` (`sites_webhook_certificate_expiry_timestamp_seconds`) to the current
    /// certificate's notAfter now and whenever another certificate is loaded. Only the first
    /// gauge given is kept.
    pub fn report_expiry(&self, gauge: IntGauge) {
        let gauge = self.expiry.get_or_init(|| gauge);
        gauge.set(self.not_after());
    }

    /// Re-reads the files and swaps the certificate in when they changed and are valid. On error
    /// the current certificate stays in place.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let cert = read(&self.cert_path)?;
        let key = read(&self.key_path)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.0 == cert && loaded.1 == key {
            return Ok(Reload::Unchanged);
        }
        let (ck, not_after) = checked_key(
            &self.cert_path,
            &cert,
            &self.key_path,
            &key,
            UnixTime::now(),
        )?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ck);
        *loaded = (cert, key);
        self.not_after.store(not_after, Ordering::Release);
        if let Some(gauge) = self.expiry.get() {
            gauge.set(not_after);
        }
        Ok(Reload::Replaced)
    }

    /// Checks the files every `interval` until `shutdown` resolves; logs replacements at info,
    /// refused files at error (once per distinct error, so a broken rotation does not flood the
    /// log), and a certificate still served within [`RENEW_BEFORE`] of its expiry at warning
    /// (at the first check, then daily; see [`expiry_warning_due`]).
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut last_error: Option<String> = None;
        let mut warned: Option<(i64, i64)> = None;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let store = self.clone();
            let result = tokio::task::spawn_blocking(move || store.reload())
                .await
                .unwrap_or_else(|e| Err(TlsError::Config(e.to_string())));
            match result {
                Ok(Reload::Replaced) => {
                    last_error = None;
                    tracing::info!(cert = %self.cert_path.display(), "loaded a new serving certificate");
                }
                Ok(Reload::Unchanged) => last_error = None,
                Err(e) => {
                    let text = e.to_string();
                    if last_error.as_deref() != Some(text.as_str()) {
                        tracing::error!(error = %text, "keeping the current serving certificate");
                        last_error = Some(text);
                    }
                }
            }
            let not_after = self.not_after();
            let now = UnixTime::now().as_secs() as i64;
            if expiry_warning_due(not_after, now, warned) {
                tracing::warn!(
                    cert = %self.cert_path.display(),
                    not_after,
                    expires_in_days = (not_after - now).div_euclid(86_400),
                    "the serving certificate expires soon and was not renewed"
                );
                warned = Some((not_after, now));
            }
        }
    }

    /// The certificate new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Whether to warn, at `now`, that the certificate expiring at `not_after` (both in seconds since
/// the Unix epoch) is still served: when it is within [`RENEW_BEFORE`] of its expiry (or past
/// it), and `last_warned` (the notAfter warned about, and when) was about another certificate or
/// is a day old.
pub fn expiry_warning_due(not_after: i64, now: i64, last_warned: Option<(i64, i64)>) -> bool {
    let renew_before = i64::try_from(RENEW_BEFORE.as_secs()).unwrap_or(i64::MAX);
    not_after.saturating_sub(now) < renew_before
        && last_warned.is_none_or(|(warned_for, at)| {
            warned_for != not_after || now.saturating_sub(at) >= EXPIRY_WARNING_EVERY
        })
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Reads a PEM bundle of CA certificates (for client certificate verification).
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let pem = read(path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| invalid(path, format!("not a PEM certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(path, format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid(path, "no CA certificate found"));
    }
    Ok(roots)
}

/// The server configuration: TLS 1.3 and 1.2 with the ring provider's suites (AEAD only, ECDHE
/// only), ALPN h2 then http/1.1, the reloadable certificate, and client certificates required
/// and verified against `client_ca` when given.
pub fn server_config(
    certs: Arc<CertStore>,
    client_ca: Option<RootCertStore>,
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(offset_days: i64) -> UnixTime {
        let now = UnixTime::now().as_secs() as i64;
        UnixTime::since_unix_epoch(Duration::from_secs((now + offset_days * 86_400) as u64))
    }

    #[test]
    fn certificates_are_checked_for_validity_and_key_match() {
        let b = crate::certs::generate(&["localhost".to_string()], 30).unwrap();
        let other = crate::certs::generate(&["localhost".to_string()], 30).unwrap();
        let (c, k) = (Path::new("tls.crt"), Path::new("tls.key"));
        // (case, cert, key, time, error fragment or None)
        let cases = [
            ("valid now", &b.cert_pem, &b.key_pem, at(0), None),
            (
                "expired",
                &b.cert_pem,
                &b.key_pem,
                at(31),
                Some("expired on"),
            ),
            (
                "not yet valid",
                &b.cert_pem,
                &b.key_pem,
                at(-2),
                Some("not valid before"),
            ),
            (
                "key of another certificate",
                &b.cert_pem,
                &other.key_pem,
                at(0),
                Some("does not match"),
            ),
            (
                "not PEM",
                &"garbage".to_string(),
                &b.key_pem,
                at(0),
                Some("no certificate found"),
            ),
        ];
        for (case, cert, key, time, want) in cases {
            let got = certified_key(c, cert.as_bytes(), k, key.as_bytes(), time);
            match want {
                None => assert!(got.is_ok(), "{case}: {:?}", got.err()),
                Some(fragment) => {
                    let e = got
                        .err()
                        .unwrap_or_else(|| panic!("{case}: accepted"))
                        .to_string();
                    assert!(e.contains(fragment), "{case}: {e}");
                }
            }
        }
    }

    #[test]
    fn the_expiry_gauge_follows_the_certificate_loaded() {
        let dir = std::env::temp_dir().join(format!("tls-{}", uuid::Uuid::new_v4()));
        let write = |days| {
            let b = crate::certs::generate(&["localhost".to_string()], days).unwrap();
            b.write(&dir).unwrap();
            let der = CertificateDer::from_pem_slice(b.cert_pem.as_bytes()).unwrap();
            let (_, leaf) = x509_parser::parse_x509_certificate(&der).unwrap();
            leaf.validity().not_after.timestamp()
        };
        let first = write(30);
        let store = CertStore::load(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
        assert_eq!(store.not_after(), first);
        let registry = prometheus::Registry::new();
        let metrics = crate::metrics::WebhookMetrics::register(&registry).unwrap();
        let gauge = &metrics.certificate_expiry;
        assert_eq!(gauge.get(), 0);
        store.report_expiry(gauge.clone());
        assert_eq!(gauge.get(), first);
        assert!(
            crate::metrics::encode(&registry).contains(&format!(
                "\nsites_webhook_certificate_expiry_timestamp_seconds {first}\n"
            )),
            "exported"
        );
        // A new certificate in the files: the gauge follows once it is loaded.
        let second = write(90);
        assert!(second > first);
        assert_eq!(gauge.get(), first);
        assert_eq!(store.reload().unwrap(), Reload::Replaced);
        assert_eq!((store.not_after(), gauge.get()), (second, second));
        // A refused file keeps the certificate served, and its expiry.
        std::fs::write(dir.join("tls.crt"), "garbage").unwrap();
        assert!(store.reload().is_err());
        assert_eq!(gauge.get(), second);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_certificate_served_close_to_its_expiry_is_warned_about_daily() {
        let day = 86_400;
        let now = 1_000 * day;
        let soon = now + 29 * day;
        // (case, notAfter, last warning, due)
        let cases = [
            ("far from expiry", now + 31 * day, None, false),
            ("just outside the window", now + 30 * day, None, false),
            ("within the window, never warned", soon, None, true),
            ("already expired", now - day, None, true),
            ("warned an hour ago", soon, Some((soon, now - 3_600)), false),
            ("warned a day ago", soon, Some((soon, now - day)), true),
            (
                "warned about another certificate",
                soon,
                Some((soon - day, now - 3_600)),
                true,
            ),
        ];
        for (case, not_after, last, due) in cases {
            assert_eq!(expiry_warning_due(not_after, now, last), due, "{case}");
        }
        assert_eq!(RENEW_BEFORE.as_secs(), 30 * 86_400);
    }
}
