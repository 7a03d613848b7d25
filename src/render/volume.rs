//! Retained volumes (LIFE-01 step 4, the data-recovery path of the lifecycle design): a Site
//! recreated with the same identity finds the PersistentVolume its data lives on and re-binds
//! it. Pure decisions over PersistentVolumes the caller listed; the caller does the API calls.

use serde_json::{Value, json};

use crate::crd::ID_LABEL;
use crate::labels;
use crate::watched::Volume;

fn phase(pv: &Volume) -> Option<&str> {
    pv.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn claim_ref(pv: &Volume) -> Option<(&str, &str)> {
    let c = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        c.namespace.as_deref().unwrap_or_default(),
        c.name.as_deref().unwrap_or_default(),
    ))
}

fn has_site_label(pv: &Volume, id: &str) -> bool {
    pv.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ID_LABEL))
        .is_some_and(|v| v == id)
}

/// Whether a volume is free for a claim in `namespace`: Released or Available, and not reserved
/// for a claim in another namespace.
fn reusable(pv: &Volume, namespace: &str) -> bool {
    matches!(phase(pv), Some("Released") | Some("Available"))
        && claim_ref(pv).is_none_or(|(ns, _)| ns.is_empty() || ns == namespace)
}

/// Finds a retained volume for the site's claim `<id>`, before the claim is created: first a
/// reusable volume labelled with the site id, then a volume Released from the site's own claim
/// (`namespace/<id>`). Nothing else: a volume released from a claim of another name holds
/// someone else's data (SPEC 4.6). Ties go to the volume that sorts first by name, so the choice
/// is stable.
pub fn find_retained_volume<'a>(
    volumes: impl IntoIterator<Item = &'a Volume>,
    id: &str,
    namespace: &str,
) -> Option<&'a Volume> {
    let mut candidates: Vec<&Volume> = volumes
        .into_iter()
        .filter(|pv| reusable(pv, namespace))
        .collect();
    candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    candidates
        .iter()
        .find(|pv| has_site_label(pv, id))
        .or_else(|| {
            candidates
                .iter()
                .find(|pv| phase(pv) == Some("Released") && claim_ref(pv) == Some((namespace, id)))
        })
        .copied()
}

/// A volume still Bound to the claim `namespace/claim_name` when that claim does not exist (as
/// far as the caller knows): the claim was deleted a moment ago and the volume is not Released
/// yet, or the caller's view of claims lags. Either way a new claim must wait: provisioning now
/// would lose the retained data.
pub fn still_bound_to<'a>(
    volumes: impl IntoIterator<Item = &'a Volume>,
    namespace: &str,
    claim_name: &str,
) -> Option<&'a Volume> {
    volumes.into_iter().find(|pv| {
        pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            && claim_ref(pv).is_some_and(|(ns, name)| ns == namespace && name == claim_name)
    })
}

/// Whether the volume a claim was pinned to still waits to be bound to that claim (uid
/// `claim_uid`): it is reusable ([`reusable`]) and its claim reference does not name that claim
/// by uid yet. The re-bind ([`rebind_patch`]) follows the claim, so a re-bind cut short (the
/// operator stopped between the two writes) is finished by the next reconcile.
pub fn awaits_rebind(pv: &Volume, namespace: &str, claim_name: &str, claim_uid: &str) -> bool {
    let named = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|c| {
            c.namespace.as_deref() == Some(namespace)
                && c.name.as_deref() == Some(claim_name)
                && c.uid.as_deref() == Some(claim_uid)
        });
    reusable(pv, namespace) && !named
}

/// The merge patch that labels a retained volume for the site and binds it to the site's new
/// claim: the claim reference names the claim with its uid, so the volume binds to that claim
/// and to no other claim of the same name (one created by someone else between the two writes
/// stays unbound).
pub fn rebind_patch(
    id: &str,
    namespace: &str,
    claim_name: &str,
    claim_uid: &str,
    resource_version: Option<&str>,
) -> Value {
    json!({
        // Conditional on the volume as it was judged when its resourceVersion is known (one
        // changed since is a 409, retried and judged again). The operator's cached volumes keep
        // no resourceVersion, so its re-binds are not conditional: the volume is judged from the
        // cache (Released or Available, its claim reference not naming this claim yet).
        "metadata": {"labels": labels::labels(id), "resourceVersion": resource_version},
        "spec": {"claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim_name,
            "uid": claim_uid,
            "resourceVersion": null,
        }},
    })
}

/// The merge patch that puts the site labels on its bound volume (so a later recreation finds it).
pub fn label_patch(id: &str) -> Value {
    json!({"metadata": {"labels": labels::labels(id)}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, phase: &str, labels: Option<&str>, claim: Option<(&str, &str)>) -> Volume {
        let mut v = json!({"metadata": {"name": name}, "spec": {}, "status": {"phase": phase}});
        if let Some(id) = labels {
            v["metadata"]["labels"] = json!({ID_LABEL: id});
        }
        if let Some((ns, n)) = claim {
            v["spec"]["claimRef"] = json!({"namespace": ns, "name": n, "uid": "old-uid"});
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(found: Option<&Volume>) -> Option<&str> {
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
        // (case, volumes, expected volume)
        type Case<'a> = (&'a str, Vec<Volume>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "nothing retained",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", site)))],
                None,
            ),
            (
                "by site label",
                vec![pv("pv-a", "Released", Some(site), Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "label wins over the claim reference",
                vec![
                    pv("pv-a", "Released", None, Some(("sites", site))),
                    pv("pv-b", "Released", Some(site), Some(("sites", "other"))),
                ],
                Some("pv-b"),
            ),
            (
                "released from the site's own claim",
                vec![pv("pv-a", "Released", None, Some(("sites", site)))],
                Some("pv-a"),
            ),
            (
                "available, unlabelled, naming the site's claim: not released from it",
                vec![pv("pv-a", "Available", None, Some(("sites", site)))],
                None,
            ),
            (
                "released from a claim of another name (the owner's)",
                vec![pv("pv-a", "Released", None, Some(("sites", "jdoe")))],
                None,
            ),
            (
                "the site's claim name in another namespace",
                vec![pv("pv-a", "Released", None, Some(("other", site)))],
                None,
            ),
            (
                "labelled but bound elsewhere",
                vec![pv("pv-a", "Bound", Some(site), Some(("sites", "x")))],
                None,
            ),
            (
                "available, pre-bound to nobody",
                vec![pv("pv-a", "Available", Some(site), None)],
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
                None,
            ),
            (
                "stable choice",
                vec![
                    pv("pv-z", "Released", Some(site), None),
                    pv("pv-a", "Released", Some(site), None),
                ],
                Some("pv-a"),
            ),
        ];
        for (case, volumes, want) in cases {
            assert_eq!(
                names(find_retained_volume(&volumes, site, "sites")),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn rebind_patch_binds_by_the_claims_uid() {
        let p = rebind_patch(
            "docs-handbook",
            "sites",
            "docs-handbook",
            "u-new",
            Some("41"),
        );
        assert_eq!(
            p["metadata"]["resourceVersion"], "41",
            "conditional on the judged volume"
        );
        assert_eq!(p["metadata"]["labels"][ID_LABEL], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["name"], "docs-handbook");
        assert_eq!(p["spec"]["claimRef"]["namespace"], "sites");
        assert_eq!(
            p["spec"]["claimRef"]["uid"], "u-new",
            "the old uid replaced"
        );
        assert!(p["spec"]["claimRef"]["resourceVersion"].is_null());
    }

    /// A pinned claim's volume waits for its re-bind until its claim reference names the claim
    /// by uid; a volume someone else's claim bound is not taken.
    #[test]
    fn a_pinned_claims_volume_awaits_its_rebind_by_uid() {
        let with_uid = |phase: &str, claim: Option<(&str, &str)>, uid: &str| {
            let mut v = pv("pv-a", phase, Some("s"), claim);
            if let Some(r) = v.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
                r.uid = Some(uid.into());
            }
            v
        };
        let cases = [
            (
                "released from the old claim",
                with_uid("Released", Some(("sites", "s")), "old"),
                true,
            ),
            (
                "available, no claim",
                pv("pv-a", "Available", Some("s"), None),
                true,
            ),
            (
                "named without uid",
                with_uid("Released", Some(("sites", "s")), ""),
                true,
            ),
            (
                "re-bound to the claim",
                with_uid("Released", Some(("sites", "s")), "new"),
                false,
            ),
            (
                "bound to the claim",
                with_uid("Bound", Some(("sites", "s")), "new"),
                false,
            ),
            (
                "bound to another claim",
                with_uid("Bound", Some(("sites", "x")), "x"),
                false,
            ),
            (
                "held for another namespace",
                with_uid("Released", Some(("other", "s")), "old"),
                false,
            ),
        ];
        for (case, volume, want) in cases {
            assert_eq!(awaits_rebind(&volume, "sites", "s", "new"), want, "{case}");
        }
    }
}
