//! Events (`events.k8s.io/v1`) about Sites and the platform ConfigMap, recorded as kube's
//! [`kube::runtime::events::Recorder`] and client-go's recorder do: one Event per type, action,
//! reason, reporter and object (the note is not part of the key), and a repeat within six
//! minutes counted in the first Event's `series` instead of a new Event.
//!
//! This file is the recorder's memory and the Events' bodies: which write an Event is (new, or a
//! repeat of which Event) and what a new one holds. The writes themselves are
//! [`crate::controller::apply::record_event`]'s.
//!
//! kube's Recorder remembers each recent Event whole (about 2.3 KB) and sweeps all of them on
//! every publish: at 10,000 new Sites that was a fifth of the operator's heap. This one keeps,
//! per key hashed, the Event's name, count and time, and sweeps at most once a minute.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
pub use kube::runtime::events::{Event, EventType, Reporter};

/// How long a repeat still joins the series of the first Event (kube's and client-go's value).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often records older than [`SERIES_WINDOW`] are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Remembers the Events recorded in the last six minutes; clones share what was recorded.
#[derive(Clone)]
pub struct Recorder {
    reporter: Reporter,
    recent: Arc<Mutex<Recent>>,
}

/// The Events recorded in the last [`SERIES_WINDOW`], by key (hashed).
#[derive(Debug)]
struct Recent {
    by_key: HashMap<u64, Recorded>,
    swept: Instant,
}

/// One recorded Event: its name and how often it happened, the last time when.
#[derive(Debug)]
struct Recorded {
    name: Box<str>,
    count: i32,
    last: Instant,
}

/// What to write for an Event.
#[derive(Debug, PartialEq)]
pub(crate) enum Write {
    /// A new Event.
    Create,
    /// A repeat: the series of the Event of that name now counts `count`.
    Repeat { name: Box<str>, count: i32 },
}

impl Recent {
    fn new(now: Instant) -> Recent {
        Recent {
            by_key: HashMap::new(),
            swept: now,
        }
    }

    /// What an Event with `key` at `now` is: new, or a repeat within the window.
    fn write(&mut self, key: u64, now: Instant) -> Write {
        if now.saturating_duration_since(self.swept) >= SWEEP_EVERY {
            self.by_key
                .retain(|_, r| now.saturating_duration_since(r.last) < SERIES_WINDOW);
            // The room of a burst (an Event per new Site) is given back once it is swept.
            if self.by_key.len() < self.by_key.capacity() / 4 {
                self.by_key.shrink_to(self.by_key.len() * 2);
            }
            self.swept = now;
        }
        match self.by_key.get(&key) {
            Some(r) if now.saturating_duration_since(r.last) < SERIES_WINDOW => Write::Repeat {
                name: r.name.clone(),
                count: r.count + 1,
            },
            _ => Write::Create,
        }
    }

    /// The Event with `key` was written as `name`, now counting `count`.
    fn written(&mut self, key: u64, name: Box<str>, count: i32, now: Instant) {
        self.by_key.insert(
            key,
            Recorded {
                name,
                count,
                last: now,
            },
        );
    }
}

/// An Event about to be written: what to write, and the key it is remembered under.
pub(crate) struct Planned {
    key: u64,
    pub(crate) write: Write,
}

impl Recorder {
    pub fn new(reporter: Reporter) -> Recorder {
        Recorder {
            reporter,
            recent: Arc::new(Mutex::new(Recent::new(Instant::now()))),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key of an Event: what kube's and client-go's recorders compare (not the note).
    fn key(&self, ev: &Event, regarding: &ObjectReference) -> u64 {
        let reference = |r: &ObjectReference, h: &mut std::hash::DefaultHasher| {
            (&r.api_version, &r.kind, &r.name, &r.namespace, &r.uid).hash(h)
        };
        let mut h = std::hash::DefaultHasher::new();
        (ev.type_, &ev.action, &ev.reason).hash(&mut h);
        (&self.reporter.controller, &self.reporter.instance).hash(&mut h);
        reference(regarding, &mut h);
        match &ev.secondary {
            Some(related) => reference(related, &mut h),
            None => 0u8.hash(&mut h),
        }
        h.finish()
    }

    /// What recording `ev` about `regarding` now writes: a new Event, or the first one's series
    /// counted up when the same Event was recorded in the last six minutes.
    pub(crate) fn plan(&self, ev: &Event, regarding: &ObjectReference) -> Planned {
        let key = self.key(ev, regarding);
        Planned {
            key,
            write: self.recent().write(key, Instant::now()),
        }
    }

    /// The planned Event was written as `name`, now counting `count`.
    pub(crate) fn written(&self, planned: Planned, name: Box<str>, count: i32) {
        self.recent()
            .written(planned.key, name, count, Instant::now());
    }

    /// A new Event, as kube's Recorder writes it.
    pub(crate) fn event(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }
}

/// The merge patch that counts a repeat in the first Event's series.
pub(crate) fn series(count: i32, now: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "series": {"count": count, "lastObservedTime": MicroTime(now)}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_the_window_count_up_the_first_event_and_later_ones_start_anew() {
        let start = Instant::now();
        let mut recent = Recent::new(start);
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(recent.write(1, at(0)), Write::Create);
        recent.written(1, "a.1".into(), 1, at(0));
        let cases = [
            // (key, seconds, expected)
            (1, 10, Some(("a.1", 2))),
            (2, 10, None),
            (1, 10 + 359, Some(("a.1", 3))),
            // Six minutes after the last repeat: a new Event.
            (1, 10 + 359 + 360, None),
        ];
        for (key, s, want) in cases {
            let got = recent.write(key, at(s));
            match want {
                Some((name, count)) => {
                    assert_eq!(
                        got,
                        Write::Repeat {
                            name: name.into(),
                            count
                        },
                        "key {key} at {s} s"
                    );
                    recent.written(key, name.into(), count, at(s));
                }
                None => assert_eq!(got, Write::Create, "key {key} at {s} s"),
            }
        }
    }

    #[test]
    fn the_sweep_drops_only_records_older_than_the_window() {
        let start = Instant::now();
        let mut recent = Recent::new(start);
        let at = |s: u64| start + Duration::from_secs(s);
        recent.written(1, "old".into(), 1, at(0));
        recent.written(2, "new".into(), 1, at(300));
        recent.write(3, at(400));
        assert_eq!(recent.by_key.len(), 1, "{recent:?}");
        assert!(recent.by_key.contains_key(&2));
    }

    #[test]
    fn the_key_is_type_action_reason_reporter_and_objects_not_the_note() {
        let recorder = Recorder::new(Reporter::from("sites-operator".to_string()));
        let site = |name: &str| ObjectReference {
            kind: Some("Site".into()),
            name: Some(name.into()),
            namespace: Some("sites".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        };
        let event = |reason: &str, note: &str| Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let base = recorder.key(&event("Created", "one"), &site("a"));
        assert_eq!(base, recorder.key(&event("Created", "two"), &site("a")));
        assert_ne!(base, recorder.key(&event("Updated", "one"), &site("a")));
        assert_ne!(base, recorder.key(&event("Created", "one"), &site("b")));
        let mut warning = event("Created", "one");
        warning.type_ = EventType::Warning;
        assert_ne!(base, recorder.key(&warning, &site("a")));
    }
}
