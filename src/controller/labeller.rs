//! The schedule of the delayed volume labels: a bound volume gets its Site's labels some
//! seconds after the claim binds (jittered, so that thousands of new Sites do not patch at once),
//! from one background task with a heap of due labels. When a label is due and what it writes
//! are volume retention's (`volumes.rs`); this file keeps only the heap, below the `Context` that
//! holds it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// The delayed volume labels: the volumes with a label scheduled and not yet made, and the queue
/// of one background task serving every site.
#[derive(Default)]
pub(crate) struct Labeller {
    pending: Arc<Mutex<HashSet<String>>>,
    queue: Mutex<Option<mpsc::UnboundedSender<Labelling>>>,
}

impl Labeller {
    /// Schedules the label of `volume` for Site `id` at `due`, unless one is already scheduled
    /// and not yet made. The task, started by the first label scheduled, makes every label with
    /// that first `label(volume, id)`.
    pub(crate) fn schedule<F, Fut>(
        &self,
        due: tokio::time::Instant,
        volume: String,
        id: &str,
        label: F,
    ) where
        F: Fn(String, String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
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
            tokio::spawn(label_when_due(label, self.pending.clone(), rx));
            tx
        });
        let _ = tx.send(Labelling {
            due,
            volume,
            id: id.to_string(),
        });
    }
}

/// A volume label due at `due`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Labelling {
    due: tokio::time::Instant,
    volume: String,
    id: String,
}

/// Makes volume labels when they are due, one at a time, until the context is gone. One task
/// and a heap of small entries, not a sleeping task per site: at 10,000 new Sites the tasks
/// alone took tens of MiB.
async fn label_when_due<F, Fut>(
    label: F,
    pending: Arc<Mutex<HashSet<String>>>,
    mut rx: mpsc::UnboundedReceiver<Labelling>,
) where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = ()>,
{
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
                    label(l.volume.clone(), l.id).await;
                    pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&l.volume);
                }
            }
        }
    }
}
