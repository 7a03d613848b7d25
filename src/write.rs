//! Every write of the product to the cluster goes through [`Writer`]: this is the one file that
//! calls kube's writing methods (`tests/integration/structure.rs` holds every other file of
//! `src/` to that). A write here
//!
//! - carries the operator's field manager, [`FIELD_MANAGER`], so that what the operator wrote is
//!   never taken for another manager's ([`crate::ownership::other_manager`]);
//! - is conditional on what its caller judged: a merge patch on the resourceVersion it was read
//!   at, a deletion on the uid (and resourceVersion), a replacement on the resourceVersion the
//!   object carries, an apply on the uid the object carries. An object changed or replaced since
//!   is not written over: the API server answers 409 (422 for an apply whose uid is not the
//!   object's), and the caller judges again;
//! - fails with a [`WriteError`] naming what was written, the object, the API server's answer
//!   and, for a 403, the RBAC rule the Role lacks.
//!
//! What to write and when stays with the callers; docs/architecture.md ("Where each API write
//! happens") lists them.

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Target, Verb, WriteError};

/// The field manager of every write of the operator.
pub const FIELD_MANAGER: &str = "sites-operator";

/// What a deletion is conditional on: the object as it was judged. A field left `None` is not
/// checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    pub uid: Option<String>,
    pub version: Option<String>,
}

impl Judged {
    /// Conditional on the object's uid: one replaced under the same name since is left alone.
    pub fn uid(uid: Option<String>) -> Judged {
        Judged { uid, version: None }
    }

    /// Conditional on the object's uid and resourceVersion, as `meta` has them: one changed in
    /// any way since is left alone.
    pub fn exactly(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Judged {
        Judged {
            uid: meta.uid.clone(),
            version: meta.resource_version.clone(),
        }
    }
}

/// What a deletion found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The object was deleted (or its deletion begun, when it has finalizers).
    Now,
    /// The object was already gone.
    AlreadyGone,
}

/// The writes of one API (a kind, in a namespace or cluster-wide).
#[derive(Clone)]
pub struct Writer<K> {
    api: Api<K>,
    dry_run: bool,
}

impl<K> Writer<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    K::DynamicType: Default,
{
    pub fn new(api: Api<K>) -> Writer<K> {
        Writer {
            api,
            dry_run: false,
        }
    }

    /// Writes that the API server validates and answers but does not store.
    pub fn dry_run(mut self, dry_run: bool) -> Writer<K> {
        self.dry_run = dry_run;
        self
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: self.dry_run,
            field_manager: Some(FIELD_MANAGER.into()),
        }
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams {
            dry_run: self.dry_run,
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        }
    }

    /// The error of a failed write (its target is built only then).
    fn failed(verb: Verb, name: &str) -> impl FnOnce(kube::Error) -> WriteError + '_ {
        move |source| WriteError {
            verb,
            target: Target::of::<K>(name),
            source: Box::new(source),
        }
    }

    /// Server-side apply of `obj`; `force` takes the fields other managers hold. A uid in `obj`
    /// holds the apply to that object (another one of its name is a 422, none a 409).
    pub async fn apply(&self, obj: &K, force: bool) -> Result<K, WriteError> {
        let name = obj.name_any();
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = force;
        params.dry_run = self.dry_run;
        self.api
            .patch(&name, &params, &Patch::Apply(obj))
            .await
            .map_err(Self::failed(Verb::Apply, &name))
    }

    /// Merge patch of the object `name`, conditional on `version` (the resourceVersion it was
    /// judged at; `None`: unconditional, for a patch that is right whatever the object holds).
    pub async fn merge(
        &self,
        name: &str,
        patch: serde_json::Value,
        version: Option<&str>,
    ) -> Result<K, WriteError> {
        self.api
            .patch(
                name,
                &self.patch_params(),
                &Patch::Merge(at_version(patch, version)),
            )
            .await
            .map_err(Self::failed(Verb::Patch, name))
    }

    /// Merge patch of the status subresource of the object `name` (`{"status": …}`).
    pub async fn merge_status(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<K, WriteError> {
        self.api
            .patch_status(name, &self.patch_params(), &Patch::Merge(patch))
            .await
            .map_err(Self::failed(Verb::PatchStatus, name))
    }

    /// JSON patch of the object `name`; a `test` operation among `ops` makes it conditional.
    pub async fn json_patch(&self, name: &str, ops: json_patch::Patch) -> Result<K, WriteError> {
        self.api
            .patch(name, &self.patch_params(), &Patch::<()>::Json(ops))
            .await
            .map_err(Self::failed(Verb::Patch, name))
    }

    /// Creates `obj` (409 when one of its name exists). A review (TokenReview,
    /// SubjectAccessReview) is created to read the API server's answer.
    pub async fn create_object(&self, obj: &K) -> Result<K, WriteError> {
        self.api
            .create(&self.post_params(), obj)
            .await
            .map_err(Self::failed(Verb::Create, &obj.name_any()))
    }

    /// Replaces the stored object with `obj`, conditional on the resourceVersion `obj` carries
    /// (409 when the object changed since).
    pub async fn replace_object(&self, obj: &K) -> Result<K, WriteError> {
        let name = obj.name_any();
        self.api
            .replace(&name, &self.post_params(), obj)
            .await
            .map_err(Self::failed(Verb::Replace, &name))
    }

    /// Deletes the object `name` when it is still the one `judged` (409 when not); one already
    /// gone is [`Deleted::AlreadyGone`].
    pub async fn delete_object(&self, name: &str, judged: Judged) -> Result<Deleted, WriteError> {
        match self
            .api
            .delete(name, &delete_params(judged, self.dry_run))
            .await
        {
            Ok(_) => Ok(Deleted::Now),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::AlreadyGone),
            Err(e) => Err(Self::failed(Verb::Delete, name)(e)),
        }
    }
}

/// `patch` with `metadata.resourceVersion` set to `version` (when there is one): the API server
/// applies a merge patch that carries a resourceVersion only to that version of the object.
fn at_version(mut patch: serde_json::Value, version: Option<&str>) -> serde_json::Value {
    if let (Some(version), Some(body)) = (version, patch.as_object_mut()) {
        let meta = body
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".into(), version.into());
        }
    }
    patch
}

/// Delete parameters conditional on what was judged.
fn delete_params(judged: Judged, dry_run: bool) -> DeleteParams {
    let conditional = judged.uid.is_some() || judged.version.is_some();
    DeleteParams {
        dry_run,
        preconditions: conditional.then_some(Preconditions {
            uid: judged.uid,
            resource_version: judged.version,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_patch_is_held_to_the_version_judged() {
        let cases = [
            (
                "a version is added beside the patch's metadata",
                json!({"metadata": {"labels": {"a": "b"}}}),
                Some("7"),
                json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "7"}}),
            ),
            (
                "a patch without metadata gains it",
                json!({"spec": {"x": 1}}),
                Some("7"),
                json!({"spec": {"x": 1}, "metadata": {"resourceVersion": "7"}}),
            ),
            (
                "the judged version wins over one in the patch",
                json!({"metadata": {"resourceVersion": "1"}}),
                Some("7"),
                json!({"metadata": {"resourceVersion": "7"}}),
            ),
            (
                "no version: unconditional, as given",
                json!({"series": {"count": 2}}),
                None,
                json!({"series": {"count": 2}}),
            ),
        ];
        for (what, patch, version, want) in cases {
            assert_eq!(at_version(patch, version), want, "{what}");
        }
    }

    #[test]
    fn a_deletion_is_held_to_what_was_judged() {
        let cases = [
            ("nothing judged: unconditional", Judged::default(), None),
            (
                "the uid",
                Judged::uid(Some("u".into())),
                Some((Some("u"), None)),
            ),
            (
                "uid and version",
                Judged {
                    uid: Some("u".into()),
                    version: Some("7".into()),
                },
                Some((Some("u"), Some("7"))),
            ),
        ];
        for (what, judged, want) in cases {
            let params = delete_params(judged, false);
            let got = params
                .preconditions
                .as_ref()
                .map(|p| (p.uid.as_deref(), p.resource_version.as_deref()));
            assert_eq!(got, want, "{what}");
        }
        assert!(delete_params(Judged::default(), true).dry_run);
    }
}
