//! The routes of a Site (SPEC 4.5, LIFE-13, RTG-03): the route of the active routing mode
//! (an Ingress or an HTTPRoute; none when an older Site serves the path: `path_taken_by`),
//! then the removal of this Site's route of the other mode. Routes are judged as every owned
//! kind is ([`super::owned`]).

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;

use crate::config::RoutingMode;
use crate::controller::apply;
use crate::controller::cache::kept::{Kept, Owned};
use crate::controller::cache::table::Records;
use crate::controller::context::Context;
use crate::controller::owned::{Writes, apply_judged, controlled, existing};
use crate::crd::Site;
use crate::ownership::Control;
use crate::render::Route;
use crate::{Error, Result};

/// The older Site (creationTimestamp, then name) that serves this Site's public path, if any:
/// the backstop for two Sites admitted with one path (webhook down, a race).
pub(super) fn path_taken_by(ctx: &Context, site: &Site) -> Option<String> {
    let age = |s: &Site| (s.metadata.creation_timestamp.clone(), s.name_any());
    ctx.caches
        .sharing_path(site)
        .into_iter()
        .filter(|other| age(other) < age(site))
        .min_by_key(|other| age(other))
        .map(|other| other.name_any())
}

/// The route of the active mode (created, updated, or deleted when the site has no public
/// path), then the removal of this site's route of the other mode (LIFE-13). A route conflict
/// does not keep the other mode's route. Routes are judged as every owned kind is: by their
/// controller owner reference ([`ownership::control`]), never by a label alone.
pub(super) async fn routes(
    ctx: &Context,
    mode: RoutingMode,
    site: &Site,
    desired: Option<Route>,
    writes: &mut Writes,
) -> Result<()> {
    let c = &ctx.caches;
    let (ingress, http_route) = match desired {
        Some(Route::Ingress(i)) => (Some(i), None),
        Some(Route::HttpRoute(r)) => (None, Some(r)),
        None => (None, None),
    };
    let (active, pruned) = match mode {
        RoutingMode::Ingress => (
            active_route(ctx, writes, site, Some(&c.ingresses), ingress).await,
            prune_route::<HttpRoute>(ctx, site, c.httproutes.get()).await,
        ),
        RoutingMode::Gateway => {
            let every = ctx.tunables.gateway_probe;
            let store = c.httproutes.serve(&ctx.client, &ctx.namespace, every).await;
            (
                active_route(ctx, writes, site, store, http_route).await,
                prune_route::<Ingress>(ctx, site, Some(&c.ingresses)).await,
            )
        }
    };
    active.and(pruned)
}

/// The route of the active mode; `store` is None when the cluster does not serve its kind. A
/// route of the site's name that the Site does not control is a [`Error::RouteConflict`]
/// (RTG-03, LIFE-07): left alone, neither written nor deleted.
async fn active_route<K>(
    ctx: &Context,
    writes: &mut Writes,
    site: &Site,
    store: Option<&Records<K>>,
    desired: Option<K>,
) -> Result<()>
where
    K: Owned,
{
    let id = site.name_any();
    let Some(store) = store else {
        return match desired {
            Some(_) => Err(Error::NoHttpRoutes),
            None => Ok(()),
        };
    };
    let stored = match desired {
        Some(_) => existing(ctx, store.get(&id), store.live(), &id).await?,
        None => store.get(&id),
    };
    let judge = |existing: &Kept<K>| match controlled(existing, site) {
        Err(Error::ObjectConflict { controller, .. }) => Err(Error::RouteConflict {
            kind: K::kind(&K::DynamicType::default()).into_owned(),
            name: id.clone(),
            controller,
        }),
        other => other,
    };
    if let Some(existing) = stored.as_deref() {
        judge(existing)?;
    }
    match (desired, stored) {
        (Some(route), stored) => {
            let (written, _) = apply_judged(ctx, site, stored, route, judge).await?;
            writes.record::<K>(&id, written);
            Ok(())
        }
        (None, Some(existing)) => apply::delete::<K>(ctx, &id, existing.facts.uid()).await,
        (None, None) => Ok(()),
    }
}

/// Deletes this site's route of the inactive mode: only one the Site controls; any other stays.
async fn prune_route<K>(ctx: &Context, site: &Site, store: Option<&Records<K>>) -> Result<()>
where
    K: Owned,
{
    let id = site.name_any();
    let Some(stored) = store.and_then(|s| s.get(&id)) else {
        return Ok(());
    };
    if stored.control(site) != Control::ThisSite {
        tracing::warn!(site = %id, "a route of the other routing mode with this name is not this site's; left alone");
        return Ok(());
    }
    apply::delete::<K>(ctx, &id, stored.facts.uid())
        .await
        .map_err(|e| match e {
            Error::Write(w) => Error::DeleteOtherModeRoute(w),
            e => e,
        })
}
