//! Leader election with a coordination.k8s.io Lease, as client-go's leaderelection does it:
//! a replica holds the Lease while it renews it within `lease_duration`; others take it over
//! once it expires. Writes are gated on the `leading` flag, which turns false as soon as a
//! renewal fails for longer than `renew_deadline` (before another replica may take over).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta};
use tokio::sync::watch;

use crate::write::Writer;
use crate::{Error, Target};

/// Timing of the election.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        // client-go / controller-runtime defaults.
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Whether a Lease held by someone else has expired at `now`.
pub fn expired(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renewed.0.as_second() + duration < now.as_second()
}

/// The elector.
pub struct Elector {
    api: Api<Lease>,
    writer: Writer<Lease>,
    name: String,
    identity: String,
    timing: Timing,
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: String,
        timing: Timing,
    ) -> Elector {
        let api = Api::namespaced(client, namespace);
        Elector {
            writer: Writer::new(Api::clone(&api)),
            api,
            name: name.into(),
            identity,
            timing,
        }
    }

    /// One attempt to acquire or renew; Ok(true) when this replica holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, Error> {
        let now = Timestamp::now();
        let mine = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_duration.as_secs() as i32),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let stored = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| Error::Read {
                target: Target::of::<Lease>(&self.name),
                source: Box::new(source),
            })?;
        match stored {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(mine(0, None)),
                };
                match self.writer.create_object(&lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if e.code() == Some(409) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let held_by_me = spec.holder_identity.as_deref() == Some(self.identity.as_str());
                if !held_by_me && !expired(&lease, now) {
                    return Ok(false);
                }
                let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me);
                let acquired = if held_by_me {
                    spec.acquire_time.clone()
                } else {
                    None
                };
                lease.spec = Some(mine(transitions, acquired));
                // The resourceVersion makes this a compare-and-swap: a concurrent writer wins.
                match self.writer.replace_object(&lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if e.code() == Some(409) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Gives the Lease up (on shutdown) so another replica takes over without waiting.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
        if let Err(e) = self.writer.replace_object(&lease).await {
            tracing::warn!(error = %e, "cannot release the leader Lease");
        } else {
            tracing::info!("released the leader Lease");
        }
    }

    /// Runs the election until `stop` resolves, publishing leadership on `leading`.
    pub async fn run(
        self,
        leading: watch::Sender<bool>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut last_renewal: Option<tokio::time::Instant> = None;
        loop {
            let result = self.try_acquire_or_renew().await;
            let now = tokio::time::Instant::now();
            let is_leader = match result {
                Ok(true) => {
                    last_renewal = Some(now);
                    true
                }
                Ok(false) => {
                    last_renewal = None;
                    false
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: cannot reach the Lease");
                    // Keep leading only within the renew deadline of the last renewal.
                    last_renewal.is_some_and(|t| now - t < self.timing.renew_deadline)
                }
            };
            if *leading.borrow() != is_leader {
                tracing::info!(identity = %self.identity, leader = is_leader, "leadership changed");
                let _ = leading.send(is_leader);
            }
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        let _ = leading.send(false);
        self.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expiry_follows_the_last_renewal_and_the_duration() {
        let lease = |holder: Option<&str>, renewed: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {
                "holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15
            }}))
            .unwrap()
        };
        let now: Timestamp = "2026-11-29T10:00:30Z".parse().unwrap();
        assert!(!expired(
            &lease(Some("a"), "2026-11-29T10:00:20.000000Z"),
            now
        ));
        assert!(expired(
            &lease(Some("a"), "2026-11-29T10:00:10.000000Z"),
            now
        ));
        assert!(
            expired(&lease(None, "2026-11-29T10:00:29.000000Z"), now),
            "released"
        );
        assert!(expired(
            &serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap(),
            now
        ));
    }
}
