//! A Kubernetes API server emulator: the cluster sites-operator's tests and local playground
//! run against. It serves the real REST wire protocol (discovery, OpenAPI v3, CRUD, patch,
//! server-side apply, watch, Tables) over HTTP or HTTPS, so `kube::Client` and the real
//! `kubectl` work against it unchanged. Target behaviour: Kubernetes 1.32.

pub mod admin;
pub mod admission;
pub mod aggregated;
pub mod apiservices;
pub mod apply;
pub mod audit;
pub mod authz;
pub mod batch;
pub mod builtin;
pub mod cel;
pub mod client;
pub mod cluster;
pub mod control_plane;
pub mod controllers;
pub mod crds;
pub mod deletion;
pub mod discovery;
pub mod disruption;
pub mod events;
pub mod faults;
pub mod gc;
mod gofmt;
pub mod identity;
pub mod jsonpath;
pub mod kinds;
pub mod list;
pub mod merge;
pub mod meta;
pub mod negotiate;
pub mod node;
pub mod ops;
pub mod priority;
pub mod protobuf;
pub mod registry;
pub mod request;
pub mod schema;
pub mod selectable;
pub mod selector;
pub mod server;
pub mod smp;
pub mod state;
pub mod stats;
pub mod status;
pub mod store;
pub mod subresources;
pub mod table;
pub mod tokens;
pub mod wire;
pub mod write;

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::registry::Registry;
use crate::state::App;
use crate::stats::Stats;
use crate::store::Store;

/// How to start an emulator.
#[derive(Clone, Debug)]
pub struct Options {
    /// Serve HTTPS with a generated CA (true) or plain HTTP.
    pub tls: bool,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Watch events kept for resuming watches; older positions get 410 Gone.
    pub history: usize,
    /// Authenticate bearer tokens and authorize every request against the stored RBAC, as an
    /// API server with `--authorization-mode=RBAC` ([`authz::admit`]); the kubeconfig's token
    /// stays the unrestricted administrator.
    pub authorize: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tls: false,
            port: 0,
            history: 200_000,
            authorize: false,
        }
    }
}

/// A running emulator. Dropping it stops the server.
pub struct Emulator {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    ca_pem: Option<String>,
    stop: watch::Sender<bool>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Emulator {
    /// Starts an emulator with the default namespaces.
    pub async fn start(opts: Options) -> std::io::Result<Emulator> {
        let store = Arc::new(Store::new(Registry::builtin(), opts.history));
        let app = Arc::new(App {
            store,
            stats: Arc::new(Stats::default()),
            services: Default::default(),
            kubelet: Default::default(),
            faults: Default::default(),
            cluster: Default::default(),
            authorize: opts.authorize,
        });
        let listener = TcpListener::bind(("127.0.0.1", opts.port)).await?;
        let addr = listener.local_addr()?;
        let (tls, ca_pem) = if opts.tls {
            let (config, ca) = tls_config()?;
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                Some(ca),
            )
        } else {
            (None, None)
        };
        if let Some(ca) = &ca_pem {
            app.cluster.set_ca(ca);
        }
        seed(&app);
        cluster::seed(&app, addr);
        let (stop, mut stopped) = watch::channel(false);
        let router = {
            let app = app.clone();
            axum::Router::new()
                .fallback(move |req: axum::extract::Request| server::handle(app.clone(), req))
        };
        tokio::spawn(gc::run(app.clone()));
        tokio::spawn(controllers::run(app.clone()));
        tokio::spawn(cluster::run(app.clone()));
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stopped.changed() => return,
                    a = listener.accept() => a,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let svc = TowerToHyperService::new(router.clone());
                let tls = tls.clone();
                tokio::spawn(async move {
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(stream).await {
                                let _ = builder
                                    .serve_connection_with_upgrades(TokioIo::new(s), svc)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                                .await;
                        }
                    }
                });
            }
        });
        Ok(Emulator {
            addr,
            app,
            ca_pem,
            stop,
        })
    }

    /// Base URL, e.g. `https://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate (PEM) that signed the serving certificate, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A kubeconfig for this emulator (context `emulator`, namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        use base64::Engine;
        let mut cluster = json!({"server": self.url()});
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        let cfg = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": "emulator", "user": {"token": authz::ADMIN_TOKEN}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator", "namespace": "default"}}],
            "current-context": "emulator",
        });
        serde_yaml_ng::to_string(&cfg).unwrap_or_default()
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Request counters.
    pub fn stats(&self) -> &Stats {
        &self.app.stats
    }

    /// Makes the in-cluster Service `<name>.<namespace>.svc:<port>` reachable at `addr` (for
    /// admission webhooks served by a local process).
    pub fn map_service(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.app.services.insert(namespace, name, port, addr);
    }

    /// The simulated kubelet: set how containers behave (ready, never ready, crash-looping,
    /// image-pull failure) by default, per image or per pod.
    pub fn kubelet(&self) -> &controllers::Kubelet {
        &self.app.kubelet
    }

    /// Fault injection: error rates, latency, dropped watches.
    pub fn faults(&self) -> &faults::Faults {
        &self.app.faults
    }

    /// Drops the watch history: watches resuming from an older resourceVersion get 410 Gone.
    pub fn compact(&self) {
        self.app.store.lock().compact();
    }
}

/// Objects every cluster has.
fn seed(app: &Arc<App>) {
    let Some(ns) = app.store.lock().registry.get("", "v1", "namespaces") else {
        return;
    };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if let Ok(p) = ops::prepare_create(&ns, "", obj, &ops::WriteOptions::default()) {
            let _ = app.store.commit_create(&ns, p.object);
        }
    }
}

/// A CA and a serving certificate for 127.0.0.1 / localhost.
fn tls_config() -> std::io::Result<(rustls::ServerConfig, String)> {
    let err = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let ca_key = rcgen::KeyPair::generate().map_err(|e| err(&e))?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| err(&e))?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sites-emulator CA");
    let ca_cert = ca_params.self_signed(&ca_key).map_err(|e| err(&e))?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().map_err(|e| err(&e))?;
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .map_err(|e| err(&e))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sites-emulator");
    let cert = params.signed_by(&key, &issuer).map_err(|e| err(&e))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), ca_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .map_err(|e| err(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, ca_cert.pem()))
}
