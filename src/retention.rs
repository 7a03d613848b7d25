//! Retention (the lifecycle design's retention job): a site past its `retention_date` plus
//! `archive_after_days` is archived (the same toggle as the Hub's "Archive Site": `enabled:
//! false`, recorded in [`ARCHIVED_AT_ANNOTATION`]); an archived site is deleted
//! `delete_after_days` after it was archived. Sites without a retention date are never touched.
//! The decision is a pure function of the Site, the date and the configuration; the runner is
//! used by the operator (daily, leader only) and by `sites-operator retention`.

use k8s_openapi::jiff::civil::Date;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::config::Retention;
use crate::crd::Site;
use crate::write::{Judged, Writer};
use crate::{Error, Target};

/// When the retention job archived the site (a date, `YYYY-MM-DD`).
pub const ARCHIVED_AT_ANNOTATION: &str = "sites.ecmwf.int/archived-at";

/// What the retention policy does with one Site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Keep,
    Archive,
    Delete,
}

fn date(s: &str) -> Option<Date> {
    s.trim().parse::<Date>().ok()
}

fn plus_days(d: Date, days: u32) -> Option<Date> {
    d.checked_add(k8s_openapi::jiff::Span::new().days(i64::from(days)))
        .ok()
}

/// The retention decision for `site` on `today`. A paused Site is kept whatever its dates
/// (ROL-03: the operator writes nothing for it); the policy acts once it is resumed.
pub fn decide(site: &Site, today: Date, retention: &Retention) -> Action {
    if site.paused() {
        return Action::Keep;
    }
    let c = &site.spec.configuration;
    let Some(retained_until) = c.retention_date.as_deref().and_then(date) else {
        return Action::Keep;
    };
    let Some(archive_after) = plus_days(retained_until, retention.archive_after_days) else {
        return Action::Keep;
    };
    if c.enabled {
        return if today > archive_after {
            Action::Archive
        } else {
            Action::Keep
        };
    }
    // Archived: count from the day the job archived it, or (archived by hand) from the day the
    // policy would have.
    let archived_on = site
        .annotations()
        .get(ARCHIVED_AT_ANNOTATION)
        .and_then(|d| date(d))
        .map_or(archive_after, |d| d.max(archive_after));
    match plus_days(archived_on, retention.delete_after_days) {
        Some(delete_after) if today > delete_after => Action::Delete,
        _ => Action::Keep,
    }
}

/// Applies the policy to every Site in `namespace` (listed from the API server, a page at a
/// time); returns the Sites acted on (the callers report them: the CLI one line each on stdout,
/// the operator in its log). A dry run decides and reports but writes nothing.
pub async fn run_once(
    client: &kube::Client,
    namespace: &str,
    retention: &Retention,
    today: Date,
    dry_run: bool,
) -> Result<Vec<(String, Action)>, Error> {
    run_once_with_progress(client, namespace, retention, today, dry_run, |_| {}).await
}

/// Sites per page of the list.
const PAGE: u32 = 500;

/// [`run_once`], calling `progress` before the first Site and after each one (`changed`: the
/// Sites acted on). The run stops at the first failed write, which `failed` counts.
pub async fn run_once_with_progress(
    client: &kube::Client,
    namespace: &str,
    retention: &Retention,
    today: Date,
    dry_run: bool,
    progress: impl FnMut(crate::progress::Counts),
) -> Result<Vec<(String, Action)>, Error> {
    let api: Api<Site> = Api::namespaced(client.clone(), namespace);
    let mut sites = Vec::new();
    let mut page = ListParams::default().limit(PAGE);
    loop {
        let list = api.list(&page).await.map_err(|source| Error::List {
            target: Target::of::<Site>(""),
            source: Box::new(source),
        })?;
        sites.extend(list.items.into_iter().map(|mut s| {
            // Only the spec and the annotations are read.
            s.metadata.managed_fields = None;
            s
        }));
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => break,
        }
    }
    apply_to(&api, &sites, retention, today, dry_run, progress).await
}

/// Applies the policy to `sites` (the operator passes its cache). A write is conditional on the
/// resourceVersion the Site was read at: a Site changed since (its retention date moved) is left
/// for the next run.
pub async fn apply_to(
    api: &Api<Site>,
    sites: &[impl std::borrow::Borrow<Site>],
    retention: &Retention,
    today: Date,
    dry_run: bool,
    mut progress: impl FnMut(crate::progress::Counts),
) -> Result<Vec<(String, Action)>, Error> {
    let mut acted = Vec::new();
    let mut counts = crate::progress::Counts {
        total: sites.len(),
        ..Default::default()
    };
    progress(counts);
    for site in sites {
        let result = apply_one(api, site.borrow(), retention, today, dry_run, &mut acted).await;
        counts.done += 1;
        counts.changed = acted.len();
        if result.is_err() {
            counts.failed += 1;
        }
        progress(counts);
        result?;
    }
    Ok(acted)
}

/// Decides and applies the policy to one Site, recording it in `acted` when acted on.
async fn apply_one(
    api: &Api<Site>,
    site: &Site,
    retention: &Retention,
    today: Date,
    dry_run: bool,
    acted: &mut Vec<(String, Action)>,
) -> Result<(), Error> {
    let name = site.name_any();
    let action = decide(site, today, retention);
    if action == Action::Keep {
        return Ok(());
    }
    if !dry_run {
        // Conditional on the Site as it was read: one changed since (its retention date moved)
        // is decided again on the next run.
        let writer = Writer::new(api.clone());
        let written = match action {
            Action::Archive => {
                let patch = json!({
                    "metadata": {"annotations": {ARCHIVED_AT_ANNOTATION: today.to_string()}},
                    "spec": {"configuration": {"enabled": false}}
                });
                let version = site.resource_version();
                writer
                    .merge(&name, patch, version.as_deref())
                    .await
                    .map(drop)
            }
            Action::Delete => writer
                .delete_object(&name, Judged::exactly(&site.metadata))
                .await
                .map(drop),
            Action::Keep => Ok(()),
        };
        match written {
            Ok(()) => {}
            Err(e) if e.code() == Some(409) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    acted.push((name, action));
    Ok(())
}

/// Today's date in UTC.
pub fn today() -> Date {
    k8s_openapi::jiff::Timestamp::now()
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .date()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SiteBuilder;

    #[test]
    fn retention_decisions() {
        let r = Retention {
            archive_after_days: 0,
            delete_after_days: 90,
        };
        let d = |s: &str| s.parse::<Date>().unwrap();
        // (case, site, today, action)
        let cases = [
            (
                "no retention date",
                SiteBuilder::new("s").enabled(true).retention(None).build(),
                "2030-01-01",
                Action::Keep,
            ),
            (
                "unparsable date",
                SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("someday"))
                    .build(),
                "2030-01-01",
                Action::Keep,
            ),
            (
                "on the retention date",
                SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("2027-06-30"))
                    .build(),
                "2027-06-30",
                Action::Keep,
            ),
            (
                "the day after",
                SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("2027-06-30"))
                    .build(),
                "2027-07-01",
                Action::Archive,
            ),
            (
                "the day after, paused",
                SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("2027-06-30"))
                    .annotation(crate::crd::PAUSED_ANNOTATION, "true")
                    .build(),
                "2027-07-01",
                Action::Keep,
            ),
            (
                "archived 91 days ago, paused",
                SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .annotation(ARCHIVED_AT_ANNOTATION, "2027-07-01")
                    .annotation(crate::crd::PAUSED_ANNOTATION, "true")
                    .build(),
                "2027-09-30",
                Action::Keep,
            ),
            (
                "archived 90 days ago",
                SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .annotation(ARCHIVED_AT_ANNOTATION, "2027-07-01")
                    .build(),
                "2027-09-29",
                Action::Keep,
            ),
            (
                "archived 91 days ago",
                SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .annotation(ARCHIVED_AT_ANNOTATION, "2027-07-01")
                    .build(),
                "2027-09-30",
                Action::Delete,
            ),
            (
                "archived by hand before the date",
                SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .build(),
                "2027-08-01",
                Action::Keep,
            ),
            (
                "archived by hand, counted from the policy date",
                SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .build(),
                "2027-09-29",
                Action::Delete,
            ),
            (
                "disabled without a retention date",
                SiteBuilder::new("s").enabled(false).retention(None).build(),
                "2040-01-01",
                Action::Keep,
            ),
        ];
        for (case, s, today, want) in cases {
            assert_eq!(decide(&s, d(today), &r), want, "{case}");
        }
        let later = Retention {
            archive_after_days: 30,
            delete_after_days: 0,
        };
        assert_eq!(
            decide(
                &SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("2027-06-30"))
                    .build(),
                d("2027-07-30"),
                &later
            ),
            Action::Keep
        );
        assert_eq!(
            decide(
                &SiteBuilder::new("s")
                    .enabled(true)
                    .retention(Some("2027-06-30"))
                    .build(),
                d("2027-07-31"),
                &later
            ),
            Action::Archive
        );
        assert_eq!(
            decide(
                &SiteBuilder::new("s")
                    .enabled(false)
                    .retention(Some("2027-06-30"))
                    .annotation(ARCHIVED_AT_ANNOTATION, "2027-07-31")
                    .build(),
                d("2027-08-01"),
                &later
            ),
            Action::Delete
        );
    }
}
