//! What a running emulator holds, below every part that serves or changes it: the store, the
//! injected faults, the simulated kubelet's test-set behaviour, request counts, where in-cluster
//! Services are reachable, and the cluster-wide state outside the store (the CA, issued tokens).
//! The handlers, controllers and the HTTP layer all take an [`App`]; none of them holds state
//! of its own.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use crate::stats::Stats;
use crate::store::Store;

/// Shared server state.
pub struct App {
    pub store: Arc<Store>,
    /// Injected faults.
    pub faults: crate::faults::Faults,
    /// The simulated kubelet's test-controlled behaviour.
    pub kubelet: Kubelet,
    pub stats: Arc<Stats>,
    /// Where in-cluster Services (webhook backends) are reachable.
    pub services: ServiceMap,
    /// Cluster-wide state outside the store (CA, issued tokens).
    pub cluster: Cluster,
    /// Authenticate tokens and authorize every request against the stored RBAC
    /// (`Options::authorize`, [`crate::authz::admit`]).
    pub authorize: bool,
}

/// How the simulated kubelet runs a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// Starts and becomes ready.
    #[default]
    Ready,
    /// Starts but never passes its readiness probe.
    NeverReady,
    /// Exits with an error again and again (CrashLoopBackOff).
    CrashLoop,
    /// The image cannot be pulled (ErrImagePull, then ImagePullBackOff).
    ImagePullFailure,
}

impl std::str::FromStr for Behaviour {
    type Err = String;

    /// The variant's name: `Ready`, `NeverReady`, `CrashLoop`, `ImagePullFailure`.
    fn from_str(s: &str) -> Result<Behaviour, String> {
        match s {
            "Ready" => Ok(Behaviour::Ready),
            "NeverReady" => Ok(Behaviour::NeverReady),
            "CrashLoop" => Ok(Behaviour::CrashLoop),
            "ImagePullFailure" => Ok(Behaviour::ImagePullFailure),
            other => Err(format!(
                "{other:?}: expected Ready, NeverReady, CrashLoop or ImagePullFailure"
            )),
        }
    }
}

/// Test-controlled kubelet behaviour.
#[derive(Default)]
pub struct Behaviours {
    default: Behaviour,
    by_image: HashMap<String, Behaviour>,
    by_pod: HashMap<(String, String), Behaviour>,
}

/// Handle the emulator exposes to tests.
#[derive(Default)]
pub struct Kubelet {
    behaviours: Mutex<Behaviours>,
    /// Pods whose behaviour changed and need another look.
    pub(crate) touched: Mutex<HashSet<(String, String)>>,
    /// The least time between two steps of one pod ([`Kubelet::set_pace`]).
    pace: Mutex<std::time::Duration>,
}

impl Kubelet {
    pub fn set_default(&self, b: Behaviour) {
        self.behaviours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .default = b;
        self.touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(("*".into(), "*".into()));
    }

    /// Every container running `image` behaves as `b` (exact image reference).
    pub fn set_image(&self, image: &str, b: Behaviour) {
        self.behaviours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_image
            .insert(image.to_string(), b);
        self.touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(("*".into(), "*".into()));
    }

    /// Every container of one pod behaves as `b`.
    pub fn set_pod(&self, namespace: &str, pod: &str, b: Behaviour) {
        self.behaviours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_pod
            .insert((namespace.into(), pod.into()), b);
        self.touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.into(), pod.into()));
    }

    /// Each pod stays at least `pace` in a state before its next step (scheduled with its
    /// containers being created, then running as its behaviour says): the pace of a real node,
    /// whose scheduler, volume mounts, image pulls and container starts each take their time,
    /// so that a controller sees every state a pod goes through (the Pending pod whose
    /// containers are `ContainerCreating`, which the default pace of one 25 ms tick hides).
    /// Zero, the default, steps a pod on every tick it needs one.
    pub fn set_pace(&self, pace: std::time::Duration) {
        *self.pace.lock().unwrap_or_else(|p| p.into_inner()) = pace;
    }

    pub(crate) fn pace(&self) -> std::time::Duration {
        *self.pace.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn behaviour(&self, ns: &str, pod: &str, image: &str) -> Behaviour {
        let b = self.behaviours.lock().unwrap_or_else(|p| p.into_inner());
        b.by_pod
            .get(&(ns.to_string(), pod.to_string()))
            .or_else(|| b.by_image.get(image))
            .copied()
            .unwrap_or(b.default)
    }
}

/// Local addresses of in-cluster Services: (namespace, name, port) -> address.
#[derive(Default)]
pub struct ServiceMap {
    map: Mutex<HashMap<(String, String, u16), SocketAddr>>,
}

impl ServiceMap {
    pub fn insert(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.into(), name.into(), port), addr);
    }

    pub(crate) fn get(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.into(), name.into(), port))
            .copied()
    }
}

/// Cluster-wide state outside the object store.
#[derive(Default)]
pub struct Cluster {
    /// The CA published in `kube-root-ca.crt`.
    ca_pem: OnceLock<String>,
    /// Service account tokens issued by TokenRequest, by token.
    pub tokens: Mutex<HashMap<String, Issued>>,
}

impl Cluster {
    /// Sets the CA the emulator serves with (HTTPS).
    pub fn set_ca(&self, pem: &str) {
        let _ = self.ca_pem.set(pem.to_string());
    }

    /// The CA in `kube-root-ca.crt`: the serving CA, or a CA generated once per process.
    pub fn ca_pem(&self) -> String {
        if let Some(p) = self.ca_pem.get() {
            return p.clone();
        }
        static FALLBACK: OnceLock<String> = OnceLock::new();
        FALLBACK
            .get_or_init(|| {
                let ca = rcgen::KeyPair::generate().and_then(|key| {
                    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
                    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                    params
                        .distinguished_name
                        .push(rcgen::DnType::CommonName, "sites-emulator CA");
                    params.self_signed(&key)
                });
                ca.map(|c| c.pem()).unwrap_or_default()
            })
            .clone()
    }
}

/// One issued token.
#[derive(Clone, Debug)]
pub struct Issued {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub audiences: Vec<String>,
    pub expires: jiff::Timestamp,
    pub jti: String,
    /// (resource plural, name, uid) of the object the token is bound to.
    pub bound: Option<(String, String, String)>,
}
