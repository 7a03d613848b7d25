//! The change budget of platform-wide rollouts (ROL-01, ROL-02). When a platform change (a new
//! configuration, or an operator version whose rendering differs) would roll a Site's pods, the
//! reconcile asks [`Rollouts::admit`] before it writes the StatefulSet:
//!
//! - At most the budget's Sites roll at once. A Site counts from the write that rolls it until
//!   it is Available again on new pods: as many ready pods as it wants, none of them one that
//!   ran before the roll ([`Rollouts::observe`]).
//! - The others wait. The order is chosen so that trouble shows early and costs little: Sites
//!   that are not Available first (they have nothing to lose, and show a change that does not
//!   start at once), then the others by name. A freed slot goes to the first in that order
//!   ([`Rollouts::next`]).
//! - A rolled Site that was Available before its roll and is not again within the progress
//!   deadline halts the rollout ([`Rollouts::overdue`]): nothing more is rolled, and the Sites
//!   already rolled stay as they are, until the configuration changes (a revert, a fix, or new
//!   rollout settings). A Site that was not Available before is not held against the change: it
//!   leaves the budget as failed, without halting.
//!
//! A Site's own edits, new Sites, archived Sites and changes that roll nothing do not ask. The
//! state is the leader's, in memory: a new leader starts with none (docs/operations.md, "Platform
//! rollouts").

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The budget in force: how many Sites may be rolling at once, and the progress deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub slots: usize,
    pub deadline: Duration,
}

/// What a Site that a platform change would roll may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Write: the Site counts against the budget from now on.
    Roll,
    /// Write: the Site already counts against the budget (a write before has rolled it).
    Rolling,
    /// Wait for a slot: `rolling` Sites roll, of `slots`, and `ahead` waiting Sites come first.
    Wait {
        rolling: usize,
        slots: usize,
        ahead: usize,
    },
    /// The rollout of this configuration is halted.
    Halted(Halt),
}

/// Why a rollout stopped: the Site that was not Available again within the deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub site: String,
    /// The configuration whose rollout halted ([`version`]).
    pub version: u64,
    pub deadline: Duration,
}

/// A Site whose roll outlived the deadline: `halts` when it was Available before its roll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overdue {
    pub site: String,
    pub halts: bool,
}

/// Where the rollout of the configuration in force stands (`sites_rollout_*` gauges).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub version: u64,
    /// Sites not reconciled yet under this configuration: until none is left, more Sites may
    /// join the rollout.
    pub pending: usize,
    /// Sites rolled under this configuration, those rolling now included.
    pub rolled: usize,
    pub rolling: usize,
    pub waiting: usize,
    /// Sites that were not Available before their roll and are not after the deadline.
    pub failed: usize,
    pub halted: Option<Halt>,
}

/// The ConfigMap, in the operator's namespace, where the leader publishes the rollout
/// ([`RolloutStatus`] as JSON under [`STATUS_KEY`]) for `sites-operator rollout status`.
pub const STATUS_CONFIGMAP: &str = "sites-rollout";
/// The key of [`STATUS_CONFIGMAP`] holding the [`RolloutStatus`].
pub const STATUS_KEY: &str = "status.json";

/// The rollout of the configuration in force, as the leader publishes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The configuration in force: 16 hex digits of [`version`].
    pub version: String,
    /// When it came in force (RFC 3339).
    pub since: String,
    /// Sites in the namespace.
    pub sites: usize,
    /// Sites not reconciled yet under this configuration.
    pub pending: usize,
    /// Sites rolled since, those rolling now included.
    pub rolled: usize,
    pub rolling: usize,
    pub waiting: usize,
    pub failed: usize,
    pub paused: usize,
    /// How many Sites may roll at once.
    pub max_rolling: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<HaltStatus>,
}

/// Why the rollout is halted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaltStatus {
    pub site: String,
    pub deadline_seconds: u64,
}

impl RolloutStatus {
    /// Every Site reconciled under this configuration, and none rolling or waiting.
    pub fn done(&self) -> bool {
        self.halted.is_none() && self.pending == 0 && self.rolling == 0 && self.waiting == 0
    }

    /// The time left at the pace so far (None before the first Site finished its roll, or
    /// when nothing is left).
    pub fn eta(&self, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
        let since: k8s_openapi::jiff::Timestamp = self.since.parse().ok()?;
        let finished = self.rolled.saturating_sub(self.rolling);
        let left = self.rolling + self.waiting;
        if finished == 0 || left == 0 {
            return None;
        }
        let elapsed = Duration::try_from(now.duration_since(since)).ok()?;
        Some(elapsed.mul_f64(left as f64 / finished as f64))
    }

    /// One line: `rollout 3f2a…: 120/1000 rolled, 25 rolling, 855 waiting, 0 failed, 3 paused,
    /// ETA 6m20s`, a progress bar first when `bar`, and the halt when halted.
    pub fn line(&self, now: k8s_openapi::jiff::Timestamp, bar: bool) -> String {
        let total = self.rolled + self.waiting;
        let finished = self.rolled.saturating_sub(self.rolling);
        let mut line = format!("rollout {}: ", &self.version[..self.version.len().min(8)]);
        if bar {
            const WIDTH: usize = 20;
            let filled = (finished * WIDTH).checked_div(total).unwrap_or(WIDTH);
            line.push_str(&format!(
                "[{}{}] ",
                "#".repeat(filled),
                "-".repeat(WIDTH - filled)
            ));
        }
        line.push_str(&format!(
            "{finished}/{total} rolled, {} rolling, {} waiting, {} failed, {} paused",
            self.rolling, self.waiting, self.failed, self.paused
        ));
        if self.pending > 0 {
            line.push_str(&format!(", {} not reconciled yet", self.pending));
        }
        match (&self.halted, self.done()) {
            (Some(h), _) => line.push_str(&format!(
                "; HALTED: Site {} was not Available again within {}s after its pods rolled; \
                 revert or fix sites-config to resume",
                h.site, h.deadline_seconds
            )),
            (None, true) => line.push_str("; done"),
            (None, false) => {
                if let Some(eta) = self.eta(now) {
                    let secs = eta.as_secs();
                    line.push_str(&format!(", ETA {}m{:02}s", secs / 60, secs % 60));
                }
            }
        }
        line
    }
}

#[derive(Clone, Debug)]
struct Rolling {
    since: Instant,
    was_available: bool,
    /// The uids of the Site's pods when it rolled: a pod among them runs the old template.
    old_pods: Vec<[u8; 16]>,
}

/// The rollout state of the leader.
#[derive(Debug, Default)]
pub struct Rollouts {
    version: u64,
    /// When this configuration came in force.
    since: Option<k8s_openapi::jiff::Timestamp>,
    /// Sites not reconciled yet under this configuration.
    pending: BTreeSet<String>,
    rolling: BTreeMap<String, Rolling>,
    /// Waiting Sites, with whether each was Available when it asked (the order of [`next`]).
    ///
    /// [`next`]: Rollouts::next
    waiting: BTreeMap<String, bool>,
    halted: Option<Halt>,
    rolled: BTreeSet<String>,
    failed: BTreeSet<String>,
    /// The generation of each Site its StatefulSet was last written (or found up to date) at:
    /// a Site whose generation moved since has an edit of its own to apply.
    shaped: std::collections::HashMap<String, i64>,
    /// The last configuration [`Rollouts::version_of`] hashed, held so that its pointer names it.
    known: Option<(std::sync::Arc<crate::config::PlatformConfig>, u64)>,
}

/// The version of a configuration: a new one starts a new rollout (and ends a halt). Equal
/// configurations have the same version, so a revert is recognised as a change back.
pub fn version(config: &crate::config::PlatformConfig) -> u64 {
    crate::digest::hashed(&format!("{config:?}"))
}

impl Rollouts {
    /// A rollouts state for the configuration `version` in force, over `sites`, none of them
    /// reconciled yet.
    pub fn new(version: u64, sites: Vec<String>) -> Rollouts {
        Rollouts {
            version,
            since: Some(k8s_openapi::jiff::Timestamp::now()),
            pending: sites.into_iter().collect(),
            ..Rollouts::default()
        }
    }

    /// A new configuration is in force over `sites`: its rollout starts. A halt of another
    /// configuration ends; Sites rolling stay counted until they are Available.
    pub fn new_version(&mut self, version: u64, sites: Vec<String>) {
        if version == self.version {
            return;
        }
        self.version = version;
        self.since = Some(k8s_openapi::jiff::Timestamp::now());
        self.pending = sites.into_iter().collect();
        self.rolled.clear();
        self.failed.clear();
        if self.halted.as_ref().is_some_and(|h| h.version != version) {
            self.halted = None;
        }
    }

    /// Site `id`, whose pods a platform change under configuration `version` would roll, asks to
    /// roll (`available`: its Available condition now; `pods`: the uids of its pods).
    pub fn admit(
        &mut self,
        id: &str,
        available: bool,
        pods: Vec<[u8; 16]>,
        version: u64,
        budget: &Budget,
        now: Instant,
    ) -> Admission {
        if let Some(halt) = &self.halted {
            self.waiting.insert(id.to_string(), available);
            return Admission::Halted(halt.clone());
        }
        if self.rolling.contains_key(id) {
            return Admission::Rolling;
        }
        self.waiting.insert(id.to_string(), available);
        let free = budget.slots.saturating_sub(self.rolling.len());
        let ahead = self
            .waiting
            .iter()
            .filter(|(other, a)| (**a, other.as_str()) < (available, id))
            .count();
        // A reconcile that read the configuration before the one in force waits: the change
        // queues it again.
        if version != self.version || ahead >= free {
            return Admission::Wait {
                rolling: self.rolling.len(),
                slots: budget.slots,
                ahead,
            };
        }
        self.waiting.remove(id);
        self.rolled.insert(id.to_string());
        self.rolling.insert(
            id.to_string(),
            Rolling {
                since: now,
                was_available: available,
                old_pods: pods,
            },
        );
        Admission::Roll
    }

    /// The write that was to roll `id` rolled nothing (it failed, or left the pod template as
    /// it was): its slot is free again. Returns whether it held one.
    pub fn unroll(&mut self, id: &str) -> bool {
        self.rolled.remove(id);
        self.rolling.remove(id).is_some()
    }

    /// `id` has no platform roll pending (its rendering is in place, or it is deleted, paused
    /// or archived): it leaves the waiting line.
    pub fn settle(&mut self, id: &str) {
        self.waiting.remove(id);
    }

    /// The StatefulSet of `id` is as rendered for the Site's `generation`.
    pub fn shaped(&mut self, id: &str, generation: i64) {
        self.shaped.insert(id.to_string(), generation);
    }

    /// The generation the StatefulSet of `id` was last shaped for, since this replica leads.
    pub fn shaped_at(&self, id: &str) -> Option<i64> {
        self.shaped.get(id).copied()
    }

    /// `id` is gone: it leaves the line and the budget.
    pub fn forget(&mut self, id: &str) -> bool {
        self.waiting.remove(id);
        self.pending.remove(id);
        self.shaped.remove(id);
        self.rolling.remove(id).is_some()
    }

    /// A reconcile of `id` under configuration `version` ended, whatever its outcome.
    pub fn judged(&mut self, id: &str, version: u64) {
        if version == self.version {
            self.pending.remove(id);
        }
    }

    /// The [`version`] of `config`, computed once per configuration (every reconcile asks).
    pub fn version_of(&mut self, config: &std::sync::Arc<crate::config::PlatformConfig>) -> u64 {
        match &self.known {
            Some((known, v)) if std::sync::Arc::ptr_eq(known, config) => *v,
            _ => {
                let v = version(config);
                self.known = Some((config.clone(), v));
                v
            }
        }
    }

    /// Whether `id` counts against the budget now.
    pub fn is_rolling(&self, id: &str) -> bool {
        self.rolling.contains_key(id)
    }

    /// The pods of `id` as the cache shows them now (uid, ready): a rolling Site with `want`
    /// ready pods, none of which ran before its roll, is Available again and leaves the budget;
    /// so does one that wants none any more (archived, or scaled to zero, meanwhile). Returns
    /// whether a slot came free.
    pub fn observe(&mut self, id: &str, pods: &[([u8; 16], bool)], want: usize) -> bool {
        let Some(rolling) = self.rolling.get(id) else {
            return false;
        };
        let fresh = pods
            .iter()
            .filter(|(uid, ready)| *ready && !rolling.old_pods.contains(uid))
            .count();
        if fresh < want {
            return false;
        }
        self.rolling.remove(id);
        self.failed.remove(id);
        true
    }

    /// Rolling Sites past the deadline leave the budget: one that was Available before its roll
    /// halts the rollout (the first one names the halt); one that was not is counted as failed.
    pub fn overdue(&mut self, budget: &Budget, now: Instant) -> Vec<Overdue> {
        let late: Vec<String> = self
            .rolling
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.since) >= budget.deadline)
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in late {
            let Some(r) = self.rolling.remove(&id) else {
                continue;
            };
            if r.was_available && self.halted.is_none() {
                self.halted = Some(Halt {
                    site: id.clone(),
                    version: self.version,
                    deadline: budget.deadline,
                });
            }
            if !r.was_available {
                self.failed.insert(id.clone());
            }
            out.push(Overdue {
                site: id,
                halts: r.was_available,
            });
        }
        out
    }

    /// The waiting Sites that may roll now, first in the order first (none while halted).
    pub fn next(&self, budget: &Budget) -> Vec<String> {
        if self.halted.is_some() {
            return Vec::new();
        }
        let free = budget.slots.saturating_sub(self.rolling.len());
        let mut ranked: Vec<(&bool, &String)> =
            self.waiting.iter().map(|(id, a)| (a, id)).collect();
        ranked.sort();
        ranked
            .into_iter()
            .take(free)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Every waiting Site (to report a halt in their status).
    pub fn waiting(&self) -> Vec<String> {
        self.waiting.keys().cloned().collect()
    }

    /// The rollout as the leader publishes it: `sites` Sites, `paused` of them paused, under
    /// `budget`.
    pub fn status(&self, sites: usize, paused: usize, budget: &Budget) -> RolloutStatus {
        RolloutStatus {
            version: format!("{:016x}", self.version),
            since: self.since.map(|t| t.to_string()).unwrap_or_default(),
            sites,
            pending: self.pending.len(),
            rolled: self.rolled.len(),
            rolling: self.rolling.len(),
            waiting: self.waiting.len(),
            failed: self.failed.len(),
            paused,
            max_rolling: budget.slots,
            halted: self.halted.as_ref().map(|h| HaltStatus {
                site: h.site.clone(),
                deadline_seconds: h.deadline.as_secs(),
            }),
        }
    }

    pub fn progress(&self) -> Progress {
        Progress {
            version: self.version,
            pending: self.pending.len(),
            rolled: self.rolled.len(),
            rolling: self.rolling.len(),
            waiting: self.waiting.len(),
            failed: self.failed.len(),
            halted: self.halted.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Budget = Budget {
        slots: 2,
        deadline: Duration::from_secs(600),
    };

    fn uid(n: u8) -> [u8; 16] {
        [n; 16]
    }

    #[test]
    fn at_most_the_budget_rolls_and_unavailable_sites_go_first() {
        let t = Instant::now();
        let mut r = Rollouts::new(1, Vec::new());
        // In the order the reconciles ask: `c` and `d` are not Available.
        let asked = [("a", true), ("b", true), ("c", false), ("d", false)];
        let got: Vec<Admission> = asked
            .iter()
            .map(|(id, available)| r.admit(id, *available, vec![uid(1)], 1, &BUDGET, t))
            .collect();
        assert_eq!(got[0], Admission::Roll, "a slot is free");
        assert_eq!(got[1], Admission::Roll, "a second slot is free");
        assert!(matches!(
            got[2],
            Admission::Wait {
                rolling: 2,
                slots: 2,
                ahead: 0
            }
        ));
        assert!(
            matches!(got[3], Admission::Wait { ahead: 1, .. }),
            "{:?}",
            got[3]
        );
        // A waiting Site asking again still waits; the freed slot goes to the first in line.
        assert!(matches!(
            r.admit("d", false, vec![], 1, &BUDGET, t),
            Admission::Wait { .. }
        ));
        assert!(
            !r.observe("a", &[(uid(1), true)], 1),
            "the old pod: not rolled yet"
        );
        assert!(
            !r.observe("a", &[(uid(2), false)], 1),
            "the new pod is not ready"
        );
        assert!(
            r.observe("a", &[(uid(2), true)], 1),
            "Available on a new pod"
        );
        assert!(!r.observe("a", &[(uid(2), true)], 1), "counted once");
        assert_eq!(r.next(&BUDGET), ["c"], "unavailable first, then by name");
        // Another Site asking before `c` does waits behind it.
        assert!(matches!(
            r.admit("e", true, vec![], 1, &BUDGET, t),
            Admission::Wait { ahead: 2, .. }
        ));
        assert_eq!(r.admit("c", false, vec![], 1, &BUDGET, t), Admission::Roll);
        // Rolling twice counts once.
        assert_eq!(
            r.admit("c", false, vec![], 1, &BUDGET, t),
            Admission::Rolling
        );
        // A rolling Site archived meanwhile wants no pods: it leaves the budget.
        assert!(r.observe("c", &[], 0));
        assert_eq!(r.admit("c", false, vec![], 1, &BUDGET, t), Admission::Roll);
        let p = r.progress();
        assert_eq!((p.rolled, p.rolling, p.waiting), (3, 2, 2));
        // A Site whose roll is no longer needed leaves the line; one whose write rolled nothing
        // frees its slot.
        r.settle("e");
        assert!(r.unroll("b"));
        assert_eq!(r.next(&BUDGET), ["d"]);
    }

    #[test]
    fn a_site_available_before_its_roll_and_late_after_it_halts_the_rollout() {
        let t = Instant::now();
        let mut r = Rollouts::new(1, Vec::new());
        assert_eq!(
            r.admit("failing", false, vec![], 1, &BUDGET, t),
            Admission::Roll
        );
        assert_eq!(
            r.admit("healthy", true, vec![], 1, &BUDGET, t),
            Admission::Roll
        );
        assert!(matches!(
            r.admit("next", true, vec![], 1, &BUDGET, t),
            Admission::Wait { .. }
        ));
        assert!(r.overdue(&BUDGET, t + Duration::from_secs(599)).is_empty());
        let late = r.overdue(&BUDGET, t + BUDGET.deadline);
        assert_eq!(
            late,
            [
                Overdue {
                    site: "failing".into(),
                    halts: false
                },
                Overdue {
                    site: "healthy".into(),
                    halts: true
                },
            ]
        );
        let halt = Halt {
            site: "healthy".into(),
            version: 1,
            deadline: BUDGET.deadline,
        };
        assert_eq!(r.progress().halted, Some(halt.clone()));
        assert_eq!(r.progress().failed, 1);
        // Halted: nothing more rolls, though slots are free; waiting Sites learn why.
        assert!(r.next(&BUDGET).is_empty());
        assert_eq!(
            r.admit("next", true, vec![], 1, &BUDGET, t),
            Admission::Halted(halt.clone())
        );
        assert_eq!(r.waiting(), ["next"]);
        // The same configuration again keeps the halt; another one (a revert) ends it.
        r.new_version(1, Vec::new());
        assert!(r.progress().halted.is_some());
        r.new_version(2, vec!["next".into()]);
        assert_eq!(r.progress().halted, None);
        assert_eq!(r.progress().pending, 1);
        r.judged("next", 1);
        assert_eq!(
            r.progress().pending,
            1,
            "a reconcile of the configuration before"
        );
        assert_eq!(r.next(&BUDGET), ["next"]);
        assert_eq!(
            r.admit("next", true, vec![], 2, &BUDGET, t),
            Admission::Roll
        );
    }

    #[test]
    fn a_reconcile_of_an_older_configuration_waits() {
        let t = Instant::now();
        let mut r = Rollouts::new(2, Vec::new());
        assert!(matches!(
            r.admit("a", true, vec![], 1, &BUDGET, t),
            Admission::Wait { .. }
        ));
        assert_eq!(r.admit("a", true, vec![], 2, &BUDGET, t), Admission::Roll);
        assert!(r.forget("a"));
        assert_eq!(r.progress().rolling, 0);
    }

    /// ROL-04: what `rollout status` prints of a published status.
    #[test]
    fn a_published_status_reads_as_one_line_with_an_eta() {
        let since: k8s_openapi::jiff::Timestamp = "2026-12-07T15:00:00Z".parse().unwrap();
        let now = since + k8s_openapi::jiff::SignedDuration::from_secs(100);
        let mut r = Rollouts::new(0xabc, vec!["a".into()]);
        r.since = Some(since);
        let budget = Budget {
            slots: 25,
            deadline: Duration::from_secs(600),
        };
        let mut s = r.status(1000, 3, &budget);
        assert_eq!(s.version, "0000000000000abc");
        assert_eq!(s.pending, 1);
        assert!(!s.done(), "a Site is not reconciled yet");
        s.pending = 0;
        assert!(s.done(), "nothing rolls");
        (s.rolled, s.rolling, s.waiting) = (125, 25, 875);
        assert!(!s.done());
        // 100 finished in 100 s, 900 left: 900 s.
        assert_eq!(s.eta(now), Some(Duration::from_secs(900)));
        assert_eq!(
            s.line(now, false),
            "rollout 00000000: 100/1000 rolled, 25 rolling, 875 waiting, 0 failed, 3 paused, ETA 15m00s"
        );
        assert!(
            s.line(now, true)
                .starts_with("rollout 00000000: [##------------------] 100/1000")
        );
        s.halted = Some(HaltStatus {
            site: "docs".into(),
            deadline_seconds: 600,
        });
        assert!(s.line(now, false).ends_with(
            "; HALTED: Site docs was not Available again within 600s after its pods rolled; revert or fix sites-config to resume"
        ));
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"maxRolling\":25"), "{text}");
        assert_eq!(serde_json::from_str::<RolloutStatus>(&text).unwrap(), s);
        let (rolled, waiting) = (s.rolled, s.waiting);
        s.halted = None;
        (s.rolling, s.waiting) = (0, 0);
        assert_eq!(s.eta(now), None);
        assert!(
            s.line(now, true).contains("[####################]"),
            "{rolled} {waiting}"
        );
        assert!(s.line(now, false).ends_with("; done"));
    }
}
