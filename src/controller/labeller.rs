//! The delayed volume labels: a bound volume gets its Site's labels some seconds after the
//! claim binds (jittered, so that thousands of new Sites do not patch at once), from one
//! background task with a heap of due patches. A writer outside `apply.rs`, because the
//! patch needs no reconcile context.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::{Api, Patch};
use tokio::sync::mpsc;

use crate::crd::ID_LABEL;
use crate::render::volume;
use crate::watched::Volume;

/// The delayed volume label patches: the volumes with a patch scheduled and not yet made, and
/// the queue of one background task serving every site.
#[derive(Default)]
pub(crate) struct Labeller {
    pending: Arc<Mutex<HashSet<String>>>,
    queue: Mutex<Option<mpsc::UnboundedSender<Labelling>>>,
}

impl Labeller {
    /// Schedules the label patch of `volume` for Site `id` at `due`, unless one is already
    /// scheduled and not yet made.
    pub(crate) fn schedule(
        &self,
        client: &kube::Client,
        due: tokio::time::Instant,
        volume: String,
        id: &str,
    ) {
        if !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(volume.clone())
        {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let tx = queue.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(label_when_due(client.clone(), self.pending.clone(), rx));
            tx
        });
        let _ = tx.send(Labelling {
            due,
            volume,
            id: id.to_string(),
        });
    }
}

/// A volume label patch due at `due`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Labelling {
    due: tokio::time::Instant,
    volume: String,
    id: String,
}

/// Applies volume label patches when they are due, one at a time, until the context is gone.
/// One task and a heap of small entries, not a sleeping task per site: at 10,000 new Sites the
/// tasks alone took tens of MiB.
async fn label_when_due(
    client: kube::Client,
    pending: Arc<Mutex<HashSet<String>>>,
    mut rx: mpsc::UnboundedReceiver<Labelling>,
) {
    let mut waiting: BinaryHeap<Reverse<Labelling>> = BinaryHeap::new();
    loop {
        let next = waiting.peek().map(|Reverse(l)| l.due);
        tokio::select! {
            item = rx.recv() => match item {
                Some(l) => waiting.push(Reverse(l)),
                None => return,
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if next.is_some() => {
                if let Some(Reverse(l)) = waiting.pop() {
                    label_volume(&client, &l.volume, &l.id).await;
                    pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&l.volume);
                }
            }
        }
    }
}

/// Labels `volume` with the site labels of `id` unless it already has them. Errors are logged:
/// the label only helps a later re-creation find the volume.
pub async fn label_volume(client: &kube::Client, volume: &str, id: &str) {
    let api: Api<Volume> = Api::all(client.clone());
    match api.get_opt(volume).await {
        Ok(Some(pv)) if pv.labels().get(ID_LABEL).map(String::as_str) == Some(id) => {}
        Ok(Some(_)) => {
            if let Err(e) = api
                .patch(
                    volume,
                    &crate::labels::update_params(),
                    &Patch::Merge(&volume::label_patch(id)),
                )
                .await
            {
                tracing::warn!(site = %id, volume = %volume, error = %e, "cannot label the site volume");
            }
        }
        Ok(None) => {
            tracing::info!(site = %id, volume = %volume, "volume not found; not labelled")
        }
        Err(e) => {
            tracing::warn!(site = %id, volume = %volume, error = %e, "cannot read the site volume")
        }
    }
}
