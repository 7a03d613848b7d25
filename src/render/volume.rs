//! Retained volumes (LIFE-01 step 4, the data-recovery path of the lifecycle design): a Site
//! recreated with the same identity finds the PersistentVolume its data lives on and re-binds
//! it. Pure decisions over PersistentVolumes the caller listed; the caller does the API calls.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Value, json};

use crate::crd::ID_LABEL;
use crate::labels;

fn phase(pv: &PersistentVolume) -> Option<&str> {
    pv.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn claim_ref(pv: &PersistentVolume) -> Option<(&str, &str)> {
    let c = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        c.namespace.as_deref().unwrap_or_default(),
        c.name.as_deref().unwrap_or_default(),
    ))
}

fn has_site_label(pv: &PersistentVolume, id: &str) -> bool {
    pv.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ID_LABEL))
        .is_some_and(|v| v == id)
}

/// Whether a volume is free for a claim in `namespace`: Released or Available, and not reserved
/// for a claim in another namespace.
fn reusable(pv: &PersistentVolume, namespace: &str) -> bool {
    matches!(phase(pv), Some("Released") | Some("Available"))
        && claim_ref(pv).is_none_or(|(ns, _)| ns.is_empty() || ns == namespace)
}

/// Finds a retained volume for the site's claim, before the claim is created: first a reusable
/// volume labelled with the site id, then one whose old claim reference names one of
/// `old_claim_names` (the names the site's data lived under before, e.g. the site id or the
/// owner's account) in the site's namespace. Ties go to the volume that sorts first by name, so
/// the choice is stable.
pub fn find_retained_volume<'a>(
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    id: &str,
    namespace: &str,
    old_claim_names: &[&str],
) -> Option<&'a PersistentVolume> {
    let mut candidates: Vec<&PersistentVolume> = volumes
        .into_iter()
        .filter(|pv| reusable(pv, namespace))
        .collect();
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates
        .iter()
        .find(|pv| has_site_label(pv, id))
        .or_else(|| {
            candidates.iter().find(|pv| {
                claim_ref(pv)
                    .is_some_and(|(ns, name)| ns == namespace && old_claim_names.contains(&name))
            })
        })
        .copied()
}

/// A volume still Bound to the claim `namespace/claim_name` when that claim does not exist (as
/// far as the caller knows): the claim was deleted a moment ago and the volume is not Released
/// yet, or the caller's view of claims lags. Either way a new claim must wait: provisioning now
/// would lose the retained data.
pub fn still_bound_to<'a>(
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    namespace: &str,
    claim_name: &str,
) -> Option<&'a PersistentVolume> {
    volumes.into_iter().find(|pv| {
        pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            && claim_ref(pv).is_some_and(|(ns, name)| ns == namespace && name == claim_name)
    })
}

/// The merge patch that labels a retained volume for the site and pre-binds it to the site's
/// claim: the claim reference names the claim without uid or resourceVersion, so the volume
/// binds to the new claim (and only to it).
pub fn rebind_patch(id: &str, namespace: &str, claim_name: &str) -> Value {
    json!({
        "metadata": {"labels": labels::labels(id)},
        "spec": {"claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim_name,
            "uid": null,
            "resourceVersion": null,
        }},
    })
}

/// The volume to label after the claim is bound: the claim's `volumeName`, then a volume
/// labelled with the site id, then one whose claim reference names the claim. None while the
/// claim is not bound yet (the caller tries again later).
pub fn bound_volume<'a>(
    volumes: &'a [PersistentVolume],
    claim: &PersistentVolumeClaim,
    id: &str,
) -> Option<&'a PersistentVolume> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let by_volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty())
        .and_then(|v| {
            volumes
                .iter()
                .find(|pv| pv.metadata.name.as_deref() == Some(v))
        });
    by_volume_name
        .or_else(|| {
            volumes
                .iter()
                .find(|pv| has_site_label(pv, id) && phase(pv) == Some("Bound"))
        })
        .or_else(|| {
            volumes.iter().find(|pv| {
                claim_ref(pv) == Some((namespace, claim_name)) && phase(pv) == Some("Bound")
            })
        })
}

/// The merge patch that puts the site labels on its bound volume (so a later recreation finds it).
pub fn label_patch(id: &str) -> Value {
    json!({"metadata": {"labels": labels::labels(id)}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(
        name: &str,
        phase: &str,
        labels: Option<&str>,
        claim: Option<(&str, &str)>,
    ) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name}, "spec": {}, "status": {"phase": phase}});
        if let Some(id) = labels {
            v["metadata"]["labels"] = json!({ID_LABEL: id});
        }
        if let Some((ns, n)) = claim {
            v["spec"]["claimRef"] = json!({"namespace": ns, "name": n, "uid": "old-uid"});
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(found: Option<&PersistentVolume>) -> Option<&str> {
        found.and_then(|p| p.metadata.name.as_deref())
    }

    #[test]
    fn a_volume_still_bound_to_the_deleted_claim_makes_the_new_claim_wait() {
        let site = "docs-handbook";
        // (case, volumes, expected volume)
        let cases = [
            ("no volume", vec![], None),
            (
                "bound to the claim",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "released already (the retained lookup takes it)",
                vec![pv("pv-a", "Released", Some(site), Some(("sites", site)))],
                None,
            ),
            (
                "bound to another claim",
                vec![pv("pv-a", "Bound", None, Some(("sites", "other")))],
                None,
            ),
            (
                "bound to the same name in another namespace",
                vec![pv("pv-a", "Bound", None, Some(("team", site)))],
                None,
            ),
        ];
        for (case, volumes, want) in cases {
            assert_eq!(
                names(still_bound_to(&volumes, "sites", site)),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn retained_volume_lookup() {
        let site = "docs-handbook";
        // (case, volumes, old claim names, expected volume)
        type Case<'a> = (
            &'a str,
            Vec<PersistentVolume>,
            Vec<&'a str>,
            Option<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing retained",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", site)))],
                vec![site],
                None,
            ),
            (
                "by site label",
                vec![pv("pv-a", "Released", Some(site), Some(("sites", site)))],
                vec![],
                Some("pv-a"),
            ),
            (
                "label wins over old claim name",
                vec![
                    pv("pv-a", "Released", None, Some(("sites", site))),
                    pv("pv-b", "Released", Some(site), Some(("sites", "other"))),
                ],
                vec![site],
                Some("pv-b"),
            ),
            (
                "by old claim name",
                vec![pv("pv-a", "Released", None, Some(("sites", "jdoe")))],
                vec![site, "jdoe"],
                Some("pv-a"),
            ),
            (
                "old claim name in another namespace",
                vec![pv("pv-a", "Released", None, Some(("other", site)))],
                vec![site],
                None,
            ),
            (
                "labelled but bound elsewhere",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", "x")))],
                vec![],
                None,
            ),
            (
                "available, pre-bound to nobody",
                vec![pv("pv-a", "Available", Some(site), None)],
                vec![],
                Some("pv-a"),
            ),
            (
                "another site's volume",
                vec![pv(
                    "pv-a",
                    "Released",
                    Some("other-site"),
                    Some(("sites", "other-site")),
                )],
                vec![site],
                None,
            ),
            (
                "stable choice",
                vec![
                    pv("pv-z", "Released", Some(site), None),
                    pv("pv-a", "Released", Some(site), None),
                ],
                vec![],
                Some("pv-a"),
            ),
        ];
        for (case, volumes, old, want) in cases {
            assert_eq!(
                names(find_retained_volume(&volumes, site, "sites", &old)),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn rebind_patch_prebinds_without_uid() {
        let p = rebind_patch("docs-handbook", "sites", "docs-handbook");
        assert_eq!(p["metadata"]["labels"][ID_LABEL], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["name"], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["namespace"], "sites");
        assert!(
            p["spec"]["claimRef"]["uid"].is_null(),
            "null removes the old uid in a merge patch"
        );
        assert!(
            p["spec"]["claimRef"]
                .as_object()
                .unwrap()
                .contains_key("uid")
        );
    }

    #[test]
    fn bound_volume_lookup() {
        let site = "docs-handbook";
        let claim = |volume: Option<&str>| -> PersistentVolumeClaim {
            let mut c = json!({"metadata": {"name": site, "namespace": "sites"}, "spec": {}});
            if let Some(v) = volume {
                c["spec"]["volumeName"] = json!(v);
            }
            serde_json::from_value(c).unwrap()
        };
        let volumes = vec![
            pv("pv-named", "Bound", None, Some(("sites", site))),
            pv("pv-labelled", "Bound", Some(site), Some(("sites", "x"))),
        ];
        assert_eq!(
            names(bound_volume(&volumes, &claim(Some("pv-named")), site)),
            Some("pv-named")
        );
        assert_eq!(
            names(bound_volume(&volumes, &claim(None), site)),
            Some("pv-labelled")
        );
        let unlabelled = vec![pv("pv-ref", "Bound", None, Some(("sites", site)))];
        assert_eq!(
            names(bound_volume(&unlabelled, &claim(None), site)),
            Some("pv-ref")
        );
        let pending = vec![pv("pv-ref", "Available", None, None)];
        assert_eq!(
            names(bound_volume(&pending, &claim(None), site)),
            None,
            "not bound yet"
        );
        assert_eq!(label_patch(site)["metadata"]["labels"][ID_LABEL], site);
    }
}
