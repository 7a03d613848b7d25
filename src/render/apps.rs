//! The applications of a site as the renderer uses them: built-in or custom, image, port,
//! readiness probe, and the public paths each one serves.
//!
//! Rules (SPEC section 2, LIFE-06):
//! - An application whose name is in the platform catalogue is **built-in**: it listens on the
//!   catalogue port and is probed on the catalogue's readiness path (TCP when it has none). Its
//!   image is the one recorded in the Site (written by the Hub or `sites-operator upgrade`), or,
//!   when the Site records none, the catalogue repository tagged with the platform version.
//! - Any other application is **custom**: it needs its own image (kept as written), listens on
//!   `port` (default 8000) and gets a TCP readiness probe on that port.
//! - Public paths: an application serves the `paths` it declares. The site path
//!   `/<space>/<name>` goes to the built-in application that comes first in the catalogue among
//!   those declaring no paths. A site where no application serves a path has no public path and
//!   gets no route.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::config::{CatalogueApplication, PlatformConfig};
use crate::crd::{Application, Site, Str};
use crate::render::route::RoutePath;

/// Port of a custom application that does not set one.
pub const CUSTOM_DEFAULT_PORT: i32 = 8000;
/// Name of the container added to every site when migration is enabled.
pub const MIRROR_CONTAINER: &str = "site-mirror";

/// How a container's readiness is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness<'a> {
    /// HTTP GET on this path of the application port.
    Http(&'a str),
    /// A TCP connection to the application port.
    Tcp,
}

/// One application, resolved against the platform catalogue.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedApp<'a, S = String> {
    /// Index in `spec.configuration.applications` (for field paths).
    pub index: usize,
    /// The application as written in the Site.
    pub spec: &'a Application<S>,
    /// The catalogue entry of a built-in application.
    pub builtin: Option<&'a CatalogueApplication>,
    /// Position of that entry in the catalogue.
    pub catalogue_index: Option<usize>,
    /// The platform version (a built-in application without an image of its own runs the
    /// catalogue's at this version: [`ResolvedApp::image`]).
    version: &'a str,
    /// The port the application listens on.
    pub port: i32,
    /// The readiness probe.
    pub readiness: Readiness<'a>,
}

impl<'a, S: Str> ResolvedApp<'a, S> {
    /// The container image: the Site's, or the catalogue's at the platform version. Empty for
    /// a custom application without one (not valid: it has none to run).
    pub fn image(&self) -> Cow<'a, str> {
        match (self.builtin, &self.spec.image) {
            (_, Some(image)) => Cow::Borrowed(&**image),
            (Some(entry), None) => Cow::Owned(catalogue_image(entry, self.version)),
            (None, None) => Cow::Borrowed(""),
        }
    }
}

impl<S> ResolvedApp<'_, S> {
    /// The field path of this application.
    pub fn field(&self, rest: &str) -> String {
        format!("spec.configuration.applications[{}]{rest}", self.index)
    }
}

/// The image of a built-in application at the platform version.
pub fn catalogue_image(entry: &CatalogueApplication, version: &str) -> String {
    format!("{}:{version}", entry.image)
}

/// The built-in image rule: the image application `name` gets from the platform when nothing
/// pins one, the catalogue repository at the platform version; None for an application the
/// catalogue does not have (a custom one). Rendering ([`pinned`]), the mutating webhook's image
/// recording and `upgrade` ([`upgraded_applications`]) all take it from here.
pub fn builtin_image(name: &str, cfg: &PlatformConfig) -> Option<String> {
    cfg.sites
        .applications
        .iter()
        .find(|entry| entry.name == name)
        .map(|entry| catalogue_image(entry, &cfg.sites.version))
}

/// Every application of the site resolved against the catalogue, in the Site's order. Nothing
/// is checked here: [`crate::rules`] holds the rules (and uses this resolution, so
/// the two cannot disagree about an image or a port).
pub fn resolve_each<'a, S: Str>(
    applications: &'a [Application<S>],
    cfg: &'a PlatformConfig,
) -> impl Iterator<Item = ResolvedApp<'a, S>> + 'a {
    applications.iter().enumerate().map(move |(index, spec)| {
        let catalogue_index = cfg
            .sites
            .applications
            .iter()
            .position(|c| c.name == *spec.name);
        let builtin = catalogue_index.map(|i| &cfg.sites.applications[i]);
        let port = match (builtin, spec.port) {
            (Some(entry), _) => i32::from(entry.port),
            (None, Some(p)) => p,
            (None, None) => CUSTOM_DEFAULT_PORT,
        };
        let readiness = match builtin.and_then(|b| b.readiness_path.as_deref()) {
            Some(path) => Readiness::Http(path),
            None => Readiness::Tcp,
        };
        ResolvedApp {
            index,
            spec,
            builtin,
            catalogue_index,
            version: &cfg.sites.version,
            port,
            readiness,
        }
    })
}

/// The applications of a valid site, in name order: reordering the Site's list is not a change
/// (LIFE-02), so everything rendered from the applications follows their names.
pub fn resolve<'a>(site: &'a Site, cfg: &'a PlatformConfig) -> Vec<ResolvedApp<'a>> {
    resolve_sorted(&site.spec.configuration.applications, cfg)
}

/// [`resolve`] of a Site's applications.
pub fn resolve_sorted<'a, S: Str>(
    applications: &'a [Application<S>],
    cfg: &'a PlatformConfig,
) -> Vec<ResolvedApp<'a, S>> {
    let mut out: Vec<_> = resolve_each(applications, cfg).collect();
    out.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    out
}

/// The site path: `/<space>/<name>`.
pub fn site_path(site: &Site) -> String {
    site.parts().path()
}

/// The path users open: `/<space>/<name>/` ([`crate::crd::SiteRef::public_path`]).
pub fn public_path(site: &Site) -> String {
    site.parts().public_path()
}

/// The application serving the site path: among the built-in applications declaring no paths,
/// the one first in the catalogue (so reordering the Site's list changes nothing).
pub fn site_app<'s, 'a, S>(apps: &'s [ResolvedApp<'a, S>]) -> Option<&'s ResolvedApp<'a, S>> {
    apps.iter()
        .filter(|a| a.spec.paths.is_empty())
        .filter_map(|a| a.catalogue_index.map(|rank| (rank, a)))
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, a)| a)
}

/// The public paths of the site, each with its backend (the site Service at the application's
/// port). Empty when no application serves a path.
pub fn route_paths(site: &Site, apps: &[ResolvedApp<'_>], service: &str) -> Vec<RoutePath> {
    route_paths_at(&site_path(site), apps, service)
}

/// [`route_paths`] of a Site whose site path is `site_path`.
pub fn route_paths_at<S: Str>(
    site_path: &str,
    apps: &[ResolvedApp<'_, S>],
    service: &str,
) -> Vec<RoutePath> {
    let mut paths = Vec::new();
    if let Some(app) = site_app(apps) {
        paths.push(RoutePath {
            path: site_path.to_string(),
            path_type: "Prefix".into(),
            service: service.to_string(),
            port: IntOrString::Int(app.port),
        });
    }
    for app in apps {
        for p in &app.spec.paths {
            paths.push(RoutePath {
                path: p.path.to_string(),
                path_type: p.path_type.to_string(),
                service: service.to_string(),
                port: IntOrString::Int(app.port),
            });
        }
    }
    paths
}

/// The applications of `site` with an image for every built-in application, or None when the
/// spec already records one for each (SPEC 4.6, "no silent rollouts, whoever writes the Site").
/// A built-in application without an image in the spec runs its pin:
/// 1. the image the Site's status records for it (`status.images`, written by the reconciler
///    from what it rendered; a value that is not an image reference is ignored);
/// 2. else the image its container runs in `running` (the Site's own StatefulSet): a Site from
///    before the status recorded images, or whose status was lost;
/// 3. else the catalogue image at the platform version: a Site rendered for the first time.
///
/// The spec's image always wins: `upgrade` writes it, and the mutating webhook records it on
/// CREATE and keeps it on UPDATE. Only a new Site, or `upgrade`, therefore meets a new platform
/// version.
pub fn pinned<'r>(
    site: &Site,
    cfg: &PlatformConfig,
    running: impl Fn(&str) -> Option<&'r str>,
) -> Option<Vec<Application>> {
    let applications = &site.spec.configuration.applications;
    let missing =
        |app: &Application| app.image.is_none() && builtin_image(&app.name, cfg).is_some();
    if !applications.iter().any(missing) {
        return None;
    }
    let recorded = site.status.as_ref().map(|s| &s.images);
    let valid = |image: &&str| crate::validation::format::image_reference(image).is_ok();
    let image_of = |name: &str| {
        recorded
            .and_then(|images| images.get(name))
            .map(String::as_str)
            .filter(valid)
            .or_else(|| running(name).filter(valid))
    };
    Some(
        applications
            .iter()
            .map(|app| {
                let mut app = app.clone();
                if app.image.is_none()
                    && let Some(catalogue) = builtin_image(&app.name, cfg)
                {
                    app.image = Some(image_of(&app.name).map_or(catalogue, str::to_owned));
                }
                app
            })
            .collect(),
    )
}

/// The image of each built-in application of `site` as it is rendered (the Site's pins already
/// applied: [`pinned`]): what `status.images` records.
pub fn builtin_images(site: &Site, cfg: &PlatformConfig) -> BTreeMap<String, String> {
    resolve_each(&site.spec.configuration.applications, cfg)
        .filter(|app| app.builtin.is_some())
        .map(|app| (app.spec.name.clone(), app.image().into_owned()))
        .collect()
}

/// The upgrade rule (LIFE-06): every built-in application's image becomes the catalogue image
/// at the platform version; custom applications, and every other field, stay as written.
pub fn upgraded_applications(site: &Site, cfg: &PlatformConfig) -> Vec<Application> {
    site.spec
        .configuration
        .applications
        .iter()
        .map(|app| {
            let mut app = app.clone();
            if let Some(image) = builtin_image(&app.name, cfg) {
                app.image = Some(image);
            }
            app
        })
        .collect()
}
