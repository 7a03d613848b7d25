//! Writing one object of an owned kind for a Site: what exists of its name is looked up (the
//! cache, or the API server where the cache may lag: [`existing`]), judged (only an object the
//! Site controls is written: [`controlled`], SPEC 4.6), and applied only where it differs
//! ([`apply::apply`]); an object found not to be the one judged is judged again
//! ([`apply_judged`]). [`Writes`] is what a reconcile wrote. The reconcile ([`super::reconcile`])
//! and the routes ([`super::routes`]) write every owned object through [`step`] or
//! [`write_owned`].

use std::sync::Arc;

use kube::{Resource, ResourceExt};

use crate::controller::apply::{self, Written};
use crate::controller::cache::kept::{Keep, Kept, Owned};
use crate::controller::cache::table::Records;
use crate::controller::context::Context;
use crate::crd::Site;
use crate::ownership::Control;
use crate::{Error, Result, Target};

/// What a reconcile wrote: the objects it created (for the one Created Event), and whether the
/// StatefulSet is as the spec asks (only then may the status say what the spec asks for, e.g.
/// Disabled).
#[derive(Default)]
pub(super) struct Writes {
    pub(super) created: Vec<String>,
    pub(super) workload_current: bool,
    /// An object was left as the operator last wrote it because the cache has not shown that
    /// write yet: look again once it should have.
    pub(super) awaiting: bool,
}

impl Writes {
    pub(super) fn record<K: Resource>(&mut self, name: &str, written: Written)
    where
        K::DynamicType: Default,
    {
        match written {
            Written::Created => self
                .created
                .push(format!("{} {name}", K::kind(&K::DynamicType::default()))),
            Written::Awaiting => self.awaiting = true,
            Written::Unchanged | Written::Updated => {}
        }
    }
}

/// Whether this Site may write the existing object: it controls it; a deleted Site of the same
/// name still does (wait for garbage collection); anything else is a conflict.
pub(super) fn controlled<K: Keep>(obj: &Kept<K>, site: &Site) -> Result<()> {
    match obj.control(site) {
        Control::ThisSite => Ok(()),
        Control::PreviousSite => Err(Error::Waiting {
            what: format!(
                "the previous Site's {} to be deleted",
                Target::of::<K>(obj.name())
            ),
        }),
        Control::Other { controller } => Err(Error::ObjectConflict {
            target: Target::of::<K>(obj.name()),
            controller,
        }),
    }
}

/// Applies one object: what exists of that name (the cache holds every object of the owned
/// kinds) is written only if this Site controls it, or nothing of that name exists, and it
/// differs from the rendering.
pub(super) async fn step<K>(
    ctx: &Context,
    site: &Site,
    writes: &mut Writes,
    store: &Records<K>,
    desired: K,
) -> Result<(Written, Option<K>)>
where
    K: Owned,
{
    let stored = store.get(&desired.name_any());
    write_owned(ctx, site, writes, stored, store.live(), desired).await
}

/// [`step`] with what exists already looked up (`live`: [`existing`]).
pub(super) async fn write_owned<K>(
    ctx: &Context,
    site: &Site,
    writes: &mut Writes,
    stored: Option<Arc<Kept<K>>>,
    live: bool,
    desired: K,
) -> Result<(Written, Option<K>)>
where
    K: Owned,
{
    let name = desired.name_any();
    let stored = existing(ctx, stored, live, &name).await?;
    let judge = |obj: &Kept<K>| controlled(obj, site);
    if let Some(existing) = &stored {
        judge(existing)?;
    }
    let (written, obj) = apply_judged(ctx, site, stored, desired, judge).await?;
    writes.record::<K>(&name, written);
    Ok((written, obj))
}

/// Applies `desired` over `stored`, the object `judge` accepted (or nothing of its name). When
/// the API server answers that the object is not the one judged ([`apply::judged_again`]:
/// created, deleted or replaced by someone else since the cache showed it), the object is read
/// and judged again, and applied only if it passes.
pub(super) async fn apply_judged<K>(
    ctx: &Context,
    site: &Site,
    stored: Option<Arc<Kept<K>>>,
    mut desired: K,
    judge: impl Fn(&Kept<K>) -> Result<()>,
) -> Result<(Written, Option<K>)>
where
    K: Owned,
{
    if let Some(obj) = &stored {
        take_over(ctx, site, obj).await?;
    }
    match apply::apply(ctx, stored.as_deref(), &mut desired).await {
        Err(e) if apply::judged_again(&e) => {
            tracing::info!(error = %e, "not the object judged: judging it again");
            let again = ctx.read_kept::<K>(&desired.name_any()).await?;
            if let Some(obj) = &again {
                judge(obj)?;
                take_over(ctx, site, obj).await?;
            }
            apply::apply(ctx, again.as_deref(), &mut desired).await
        }
        other => other,
    }
}

/// An object the Site may write but does not control (no controller owner reference: orphaned
/// by `kubectl delete --cascade=orphan` of an earlier Site of the name, or its reference removed
/// by hand) is taken over only once the API server itself shows the Site: the same uid, not
/// being deleted. Each kind has its own watch, so the garbage collector's removal of the owner
/// references of a Site being deleted with `--cascade=orphan` may reach the operator before the
/// Site's own deletion does; an owner reference written back then names a Site about to go, and
/// the garbage collector deletes the object the user meant to keep. One read, only on a
/// takeover; [`Error::SiteGone`] when the cache's Site is behind (its watch event follows).
async fn take_over<K: Keep>(ctx: &Context, site: &Site, obj: &Kept<K>) -> Result<()> {
    if obj.controlled_by(site) {
        return Ok(());
    }
    let name = site.name_any();
    // A list of the one name, not a get: the operator may list Sites, and a list without a
    // resourceVersion is read from etcd, as a get is.
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let live = ctx
        .api::<Site>()
        .list_metadata(&params)
        .await
        .map_err(|source| Error::List {
            target: Target::of::<Site>(&name),
            source: Box::new(source),
        })?;
    let current = live.items.iter().any(|live| {
        live.metadata.name.as_deref() == Some(&name)
            && live.metadata.uid == site.metadata.uid
            && live.metadata.deletion_timestamp.is_none()
    });
    if current {
        Ok(())
    } else {
        Err(Error::SiteGone {
            target: Target::of::<K>(obj.name()),
        })
    }
}

/// What exists of the object `name`: the cache's copy (`stored`); when the cache has none, the
/// API server's if the cache may be missing it:
/// - the cache is not `live` ([`Records::live`]: its watch failed and has delivered nothing
///   since, so an object created meanwhile may be missing) and the operator never wrote nor saw
///   the object;
/// - or the operator wrote or saw the object and its watch has not shown it for longer than
///   [`crate::controller::own_writes::PENDING`]: a watch that far behind (the API server or etcd
///   just restarted) or a deletion whose event has not come; one read tells which, where
///   believing the cache would write the object again.
///
/// Nothing is applied, with force, onto an object that was not judged; a live cache costs no
/// read. What a live watch has not delivered yet (an object created within its delay,
/// milliseconds, before the apply) is not seen: that window is accepted.
pub(super) async fn existing<K>(
    ctx: &Context,
    stored: Option<Arc<Kept<K>>>,
    live: bool,
    name: &str,
) -> Result<Option<Arc<Kept<K>>>>
where
    K: Owned,
{
    if stored.is_some() {
        return Ok(stored);
    }
    let own = &ctx.own.objects;
    let missing = if own.known::<K>(name) {
        !own.awaited::<K>(name)
    } else {
        !live
    };
    if missing {
        ctx.read_kept::<K>(name).await
    } else {
        Ok(None)
    }
}
